"""XML model formats: OpenVINO IR (``.xml``), PMML, and any other XML, read as text
(bounded; never through an XML parser that resolves entities).

- any ``<!ENTITY`` declaration: ``xml.entity`` (malicious): external entities read local
  files or fetch URLs when the document is parsed (XXE), internal ones expand
  exponentially (billion laughs);
- OpenVINO IR (``<net ...>``): a layer of ``type="Python"`` runs a Python class, and an
  extension / custom-op library reference loads native code: ``openvino.custom_code``
  (malicious); otherwise ``format.openvino_not_allowed`` (policy);
- PMML (``<PMML``): ``format.pmml_not_allowed`` (policy); ``<Extension>`` elements are
  named in the evidence (vendor payloads that some engines evaluate);
- other XML: ``format.unrecognized``-style policy (``format.xml_not_allowed``).
Sources: OpenVINO IR v10/v11 spec (layer ``type``, ``extension`` library attribute);
PMML 4.4 (Extension); OWASP XXE.
"""

from __future__ import annotations

import re

from scanner.core.blobview import read_bounded
from scanner.core.context import ScanContext
from scanner.core.model import Blob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe

V, S = Verdict, Severity

XML_ENTITY = rule(
    "xml.entity", V.MALICIOUS, S.CRITICAL,
    "XML document declares entities (external entities read files or URLs when parsed: "
    "XXE; internal ones expand without bound)",
    "Do not parse this file; model XML never needs a DOCTYPE with entities.",
)
OPENVINO_CODE = rule(
    "openvino.custom_code", V.MALICIOUS, S.CRITICAL,
    "OpenVINO IR uses a Python layer or loads a native extension library",
    "Do not load this model; use only built-in OpenVINO operations.",
)
OPENVINO_NOT_ALLOWED = rule(
    "format.openvino_not_allowed", V.POLICY, S.MEDIUM,
    "OpenVINO IR: not an allowed weight format",
    "Export the weights to safetensors.",
)
PMML_NOT_ALLOWED = rule(
    "format.pmml_not_allowed", V.POLICY, S.MEDIUM,
    "PMML model: not an allowed weight format",
    "Ship the model in an allowed format.",
)
XML_NOT_ALLOWED = rule(
    "format.xml_not_allowed", V.POLICY, S.LOW,
    "XML document that is no recognised, allowed model file",
    "Remove the file from the model folder.",
)

MAX_XML_BYTES = 64 << 20
_ENTITY = re.compile(rb"<!ENTITY\s+(%\s*)?([^\s>]{1,64})[^>]{0,300}", re.I)
_PY_LAYER = re.compile(rb"<layer\b[^>]{0,2000}\btype\s*=\s*[\"']Python[\"'][^>]{0,500}", re.I)
_LIBRARY = re.compile(
    rb"(<extensions?\b[^>]{0,2000}|\blibrary\s*=\s*[\"'][^\"']{0,300}[\"']|"
    rb"[\w./\\-]{1,200}\.(?:so|dll|dylib)(?:\.\d+)*[\"'<\s])", re.I)
_EXTENSION = re.compile(rb"<Extension\b[^>]{0,300}", re.I)


def looks_like_xml(text: str) -> bool:
    """Text whose first markup is an XML declaration, DOCTYPE or a known model root."""
    body = text.lstrip("\ufeff \t\r\n")
    return body.startswith(("<?xml", "<!DOCTYPE", "<PMML", "<net ", "<net>"))


def analyze_xml(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for an XML blob (see the module docstring)."""
    data = read_bounded(blob, MAX_XML_BYTES, "max_xml_bytes")
    out: list[Finding] = []
    for m in list(_ENTITY.finditer(data))[:8]:
        out.append(XML_ENTITY.finding(blob.name, "entity declaration "
                                      f"{m.group(2).decode('utf-8', 'replace')!r}",
                                      evidence=m.group(0).decode("utf-8", "replace")[:300],
                                      offset=m.start()))
    head = data[:4096]
    if re.search(rb"<net\b", head):
        out.append(OPENVINO_NOT_ALLOWED.finding(blob.name, "OpenVINO IR model"))
        for pattern in (_PY_LAYER, _LIBRARY):
            for m in list(pattern.finditer(data))[:8]:
                out.append(OPENVINO_CODE.finding(
                    blob.name, "Python layer" if pattern is _PY_LAYER else
                    "native extension library", evidence=m.group(0).decode(
                        "utf-8", "replace")[:300], offset=m.start()))
    elif re.search(rb"<PMML\b", head):
        ext = [m.group(0).decode("utf-8", "replace")[:80] for m in _EXTENSION.finditer(data)]
        out.append(PMML_NOT_ALLOWED.finding(
            blob.name, "PMML model" + (f" with {len(ext)} Extension element(s)" if ext else ""),
            evidence="; ".join(ext[:4])[:300]))
    else:
        out.append(XML_NOT_ALLOWED.finding(blob.name, "XML document",
                                           evidence=head[:60].decode("utf-8", "replace")))
    return out


XML = Format("xml")  # OpenVINO IR, PMML, other XML
SPECS = (FormatSpec(XML, analyze_xml, binary=False,
                    probes=(Probe(210, lambda h: looks_like_xml(h.text or ""), text=True),)),)
