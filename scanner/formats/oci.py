"""OCI image layouts (opencontainers/image-spec ``image-layout.md``), analysed without a
container runtime: a folder or a tar holding ``oci-layout``, ``index.json`` and
content-addressed ``blobs/<algorithm>/<hex digest>``.

Every file of a layout is analysed where the walk (folder) or the tar analyzer meets it;
this module recognises the three kinds of layout file by their place and content
(``looks_like_oci``) and adds what the layout means:

- ``oci-layout`` (``{"imageLayoutVersion": ...}``) and an ``index.json`` image index:
  ``format.oci_not_allowed`` (policy: a container image is not a model format);
- every ``blobs/sha256/<64 hex>`` / ``blobs/sha512/<128 hex>`` file: its content must hash
  to its name (``oci.digest_mismatch``, malformed: runtimes refuse it, and the scanned bytes
  are not the ones the image names), then it is sniffed *by content* and analysed like any
  file, so a layer (``tar``, ``tar+gzip``) is walked member by member and a payload pickle in
  it is malicious by the pickle rules;
- descriptors in the index and in manifest blobs (``manifests``, ``config``, ``layers``,
  ``blobs``, ``subject``): ``mediaType`` string, ``digest`` of a supported algorithm, ``size``
  a non-negative integer (``oci.malformed``); ``urls`` make the runtime fetch a layer from
  outside the layout, which cannot be judged here (``oci.external_blob``, policy); inline
  ``data`` is decoded (bounded), digest-checked and analysed as a blob.

Image manifests are also recognised outside a layout, by content: a JSON document with
``schemaVersion`` and ``layers``/``manifests``/``config`` (an OCI or Docker registry manifest,
such as the per-tag files of an Ollama model store) and ``docker save``'s ``manifest.json``
(a list of ``{"Config", "RepoTags", "Layers"}`` whose entries are paths in the archive).
Paths a puller writes or reads are checked for escapes (``oci.path_escape``, malicious): an
absolute or ``..`` path in a docker-archive ``Config``/``Layers`` entry (``docker load``
reads it), a descriptor digest holding path characters (stores that name blob files after
the digest join it onto their blob folder: CVE-2024-37032) and an
``org.opencontainers.image.title`` annotation (the file name ``oras pull`` writes a layer
to).

Bounds: one streamed hash pass per blob (1 MiB windows, deadline checked), JSON documents
capped by ``Limits.max_json_bytes``, inline data by ``MAX_INLINE``. Not checked: that every
descriptor names a blob present in the layout (a missing blob makes the pull fail; every
blob present is analysed either way).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

from scanner.core.archive import escapes
from scanner.core.blobview import iter_chunks
from scanner.core.context import ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Severity, Verdict
from scanner.core.rules import rule
from scanner.core.spec import Format, FormatSpec, Probe
from scanner.core.strict_json import JSONProblem, loads_strict

V, S = Verdict, Severity

OCI_NOT_ALLOWED = rule(
    "format.oci_not_allowed", V.POLICY, S.MEDIUM,
    "OCI image layout (oci-layout, index.json, blobs/): a container image, not an allowed "
    "model format",
    "Ship the model files themselves (safetensors and config), not a container image.",
)
OCI_MALFORMED = rule(
    "oci.malformed", V.MALFORMED, S.HIGH,
    "OCI layout document or descriptor is invalid (JSON, mediaType, digest, size)",
    "Rebuild the image layout with a standard tool (skopeo, oras, docker save).",
)
OCI_DIGEST_MISMATCH = rule(
    "oci.digest_mismatch", V.MALFORMED, S.HIGH,
    "OCI blob content does not hash to the digest its name (or descriptor) claims",
    "Treat the layout as tampered; rebuild it from a trusted registry.",
)
OCI_EXTERNAL_BLOB = rule(
    "oci.external_blob", V.POLICY, S.HIGH,
    "OCI descriptor lists urls: the runtime fetches that content from outside the layout, "
    "where it cannot be judged",
    "Remove foreign-layer urls; every blob must be inside the layout.",
)

OCI_PATH_ESCAPE = rule(
    "oci.path_escape", V.MALICIOUS, S.CRITICAL,
    "An image manifest names a path outside the image (absolute, '..', or path characters "
    "in a digest) that a puller or loader writes or reads",
    "Do not pull or load this image; manifests must name blobs by digest and files by "
    "relative names inside the image.",
)
TITLE_ANNOTATION = "org.opencontainers.image.title"

_DIGEST_LENGTH = {"sha256": 64, "sha512": 128}
_BLOB_NAME = re.compile(r"(?:^|/)blobs/(sha256|sha512)/([0-9a-f]+)")
_DIGEST = re.compile(r"(sha256|sha512):([0-9a-f]+)")
_DIGEST_SHAPE = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+")
MAX_MARKER = 64 << 10  # oci-layout marker file
MAX_INLINE = 1 << 20  # decoded bytes of one descriptor's inline data
MAX_DESCRIPTOR_FINDINGS = 32
# document key -> whether it holds a list of descriptors (else one descriptor)
_DESCRIPTOR_KEYS = {"manifests": True, "layers": True, "blobs": True, "config": False,
                    "subject": False}


def _last(name: str) -> str:
    return name.rsplit("!", 1)[-1]


def _base(name: str) -> str:
    return _last(name).rsplit("/", 1)[-1]


def blob_digest(name: str) -> tuple[str, str] | None:
    """(algorithm, hex) for a content-addressed blob path (``.../blobs/sha256/<hex>``,
    member names of tars too), or ``None``."""
    m = _BLOB_NAME.search(_last(name))
    if m is None or m.end() != len(_last(name)) or len(m.group(2)) != _DIGEST_LENGTH[
            m.group(1)]:
        return None
    return m.group(1), m.group(2)


def looks_like_oci(name: str, head: bytes) -> bool:
    """Sniff: a layout blob by its content-addressed path, the ``oci-layout`` marker, or
    an ``index.json`` image index (by name *and* content: ``schemaVersion`` and
    ``manifests`` in its first bytes)."""
    last = _last(name)
    if "blobs/" in last:
        return blob_digest(name) is not None
    base = last.rsplit("/", 1)[-1]
    if base == "oci-layout":
        return head.lstrip()[:1] == b"{" and b"imageLayoutVersion" in head
    if base == "index.json":
        return (head.lstrip()[:1] == b"{" and b'"schemaVersion"' in head
                and b'"manifests"' in head)
    return is_manifest(base, head)


def is_manifest(base: str, head: bytes) -> bool:
    """Sniff a standalone image manifest by content: an OCI/Docker registry manifest
    (``schemaVersion`` + ``mediaType`` + ``layers``/``manifests``), or ``docker save``'s
    ``manifest.json`` (a list of objects with ``Config`` and ``Layers``)."""
    start = head.lstrip()[:1]
    if start == b"{":
        return (b'"schemaVersion"' in head and b'"mediaType"' in head
                and (b'"layers"' in head or b'"manifests"' in head))
    return (start == b"[" and base == "manifest.json" and b'"Config"' in head
            and b'"Layers"' in head)


def _hash(ctx: ScanContext, blob: Blob, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    for index, (_, data) in enumerate(iter_chunks(blob)):
        if index % 64 == 0:
            ctx.check_deadline()
        h.update(data)
    return h.hexdigest()


def _parse(ctx: ScanContext, blob: Blob, limit: int) -> tuple[object, list[Finding]]:
    from scanner.core.blobview import read_bounded

    data = read_bounded(blob, limit, "max_json_bytes")
    try:
        return loads_strict(data), []
    except JSONProblem as problem:
        return None, [OCI_MALFORMED.finding(blob.name, f"not strict JSON: {problem}",
                                            problem.kind)]


class _Descriptors:
    """Checks the descriptors of one OCI JSON document (index or manifest)."""

    def __init__(self, ctx: ScanContext, path: str) -> None:
        self.ctx, self.path = ctx, path
        self.findings: list[Finding] = []

    def add(self, finding: Finding) -> None:
        if len(self.findings) < MAX_DESCRIPTOR_FINDINGS:
            self.findings.append(finding)

    def document(self, doc: object) -> None:
        if not isinstance(doc, dict):
            return self.add(OCI_MALFORMED.finding(self.path, "OCI document is not an object"))
        if doc.get("schemaVersion") != 2:
            self.add(OCI_MALFORMED.finding(self.path, "schemaVersion is not 2",
                                           "/schemaVersion"))
        for key, many in _DESCRIPTOR_KEYS.items():
            if key not in doc:
                continue
            value = doc[key]
            if many and not isinstance(value, list):
                self.add(OCI_MALFORMED.finding(self.path, f"{key} is not a list", f"/{key}"))
                continue
            items = list(enumerate(value)) if many else [(None, value)]
            for index, item in items:
                self.descriptor(f"/{key}" if index is None else f"/{key}/{index}", item)

    def descriptor(self, ptr: str, d: object) -> None:
        if not isinstance(d, dict):
            return self.add(OCI_MALFORMED.finding(self.path, "descriptor is not an object", ptr))
        media, digest, size = d.get("mediaType"), d.get("digest"), d.get("size")
        if not isinstance(media, str) or not media:
            self.add(OCI_MALFORMED.finding(self.path, "descriptor has no mediaType string",
                                           ptr + "/mediaType"))
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            self.add(OCI_MALFORMED.finding(self.path, "descriptor size is not a non-negative "
                                           "integer", ptr + "/size"))
            size = None
        algo_hex = None
        if not isinstance(digest, str) or not _DIGEST_SHAPE.fullmatch(digest):
            self.add(OCI_MALFORMED.finding(self.path, "descriptor digest is not "
                                           "'algorithm:encoded'", ptr + "/digest"))
        else:
            m = _DIGEST.fullmatch(digest)
            if m is None or len(m.group(2)) != _DIGEST_LENGTH[m.group(1)]:
                self.add(OCI_MALFORMED.finding(
                    self.path, f"digest {digest[:80]!r} is not a sha256/sha512 hex digest "
                    "(cannot be verified)", ptr + "/digest"))
            else:
                algo_hex = (m.group(1), m.group(2))
        if isinstance(digest, str) and ("/" in digest or "\\" in digest or ".." in digest):
            self.add(OCI_PATH_ESCAPE.finding(
                self.path, f"digest {digest[:120]!r} holds path characters: a store that "
                "names blob files after the digest reads or writes outside its blob folder "
                "(CVE-2024-37032)", ptr + "/digest"))
        annotations = d.get("annotations")
        title = annotations.get(TITLE_ANNOTATION) if isinstance(annotations, dict) else None
        if isinstance(title, str) and (why := escapes(title)):
            self.add(OCI_PATH_ESCAPE.finding(
                self.path, f"{TITLE_ANNOTATION} {title[:120]!r} leaves the output folder "
                f"({why}): a puller writes the layer there", ptr + "/annotations"))
        urls = d.get("urls")
        if urls:
            shown = ", ".join(str(u)[:120] for u in urls[:3]) if isinstance(urls, list) \
                else str(urls)[:120]
            self.add(OCI_EXTERNAL_BLOB.finding(self.path, f"descriptor fetches content from "
                                               f"{shown}", ptr + "/urls"))
        if "data" in d:
            self.inline(ptr, d["data"], algo_hex, size)

    def inline(self, ptr: str, data: object, algo_hex: tuple[str, str] | None,
               size: int | None) -> None:
        if not isinstance(data, str) or len(data) > MAX_INLINE * 4 // 3 + 4:
            return self.add(OCI_MALFORMED.finding(
                self.path, f"inline data is not a base64 string of at most {MAX_INLINE} "
                "bytes", ptr + "/data"))
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return self.add(OCI_MALFORMED.finding(self.path, "inline data is not base64",
                                                  ptr + "/data"))
        if size is not None and size != len(raw):
            self.add(OCI_MALFORMED.finding(self.path, f"inline data is {len(raw)} bytes, "
                                           f"descriptor size {size}", ptr + "/data"))
        if algo_hex is not None and hashlib.new(algo_hex[0], raw).hexdigest() != algo_hex[1]:
            self.add(OCI_DIGEST_MISMATCH.finding(self.path, "inline data does not match the "
                                                 "descriptor digest", ptr + "/data"))
        self.findings.extend(self.ctx.analyze(BytesBlob(f"{self.path}#{ptr}/data", raw)))


def _is_oci_document(doc: object) -> bool:
    return isinstance(doc, dict) and "schemaVersion" in doc and any(
        k in doc for k in ("manifests", "layers", "config", "blobs"))


def _marker(ctx: ScanContext, blob: Blob) -> list[Finding]:
    doc, problems = _parse(ctx, blob, MAX_MARKER)
    out = [OCI_NOT_ALLOWED.finding(blob.name, "OCI image layout marker (oci-layout)")]
    if problems:
        return out + problems
    version = doc.get("imageLayoutVersion") if isinstance(doc, dict) else None
    if not isinstance(version, str):
        out.append(OCI_MALFORMED.finding(blob.name, "oci-layout has no imageLayoutVersion "
                                         "string", "/imageLayoutVersion"))
    return out


def _index(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """index.json, or an image manifest met outside a layout (``is_manifest``)."""
    from scanner.formats.text import analyze_json

    what = "OCI image index (index.json)" if _base(blob.name) == "index.json" else \
        "container image manifest"
    out = [OCI_NOT_ALLOWED.finding(blob.name, what)]
    out += analyze_json(ctx, blob)  # strict JSON and the generic code-loading keys
    doc, problems = _parse(ctx, blob, ctx.limits.max_json_bytes)
    if problems:
        return out  # json.invalid reported by analyze_json
    if isinstance(doc, list):
        return out + _docker_archive(blob.name, doc)
    check = _Descriptors(ctx, blob.name)
    check.document(doc)
    return out + check.findings


def _docker_archive(path: str, doc: list[object]) -> list[Finding]:
    """``docker save``'s manifest.json: ``[{"Config": path, "RepoTags": [...], "Layers":
    [path, ...]}]`` (moby ``image/tarexport``); every path is read from the archive."""
    out: list[Finding] = []
    for index, entry in enumerate(doc[:1000]):
        ptr = f"/{index}"
        if not isinstance(entry, dict):
            out.append(OCI_MALFORMED.finding(path, "manifest entry is not an object", ptr))
            continue
        config, layers = entry.get("Config"), entry.get("Layers")
        if not isinstance(config, str) or not (isinstance(layers, list) and all(
                isinstance(x, str) for x in layers)):
            out.append(OCI_MALFORMED.finding(path, "manifest entry needs a Config path and a "
                                             "list of Layers paths", ptr))
            continue
        for where, name in [("/Config", config)] + [(f"/Layers/{i}", x)
                                                     for i, x in enumerate(layers)]:
            why = escapes(name)
            if why:
                out.append(OCI_PATH_ESCAPE.finding(
                    path, f"{where[1:]} path {name[:120]!r} leaves the archive ({why}): "
                    "docker load reads it from outside", ptr + where))
    return out[:MAX_DESCRIPTOR_FINDINGS]


def _content_blob(ctx: ScanContext, blob: Blob, algorithm: str, hexdigest: str) -> list[
        Finding]:
    out: list[Finding] = []
    actual = _hash(ctx, blob, algorithm)
    if actual != hexdigest:
        out.append(OCI_DIGEST_MISMATCH.finding(
            blob.name, f"content hashes to {algorithm}:{actual[:16]}..., not the digest in "
            "its name", f"{algorithm}:{actual}"))
    fmt, found = ctx.analyze_content(blob)  # sniffed without this module's name probe
    out += found
    if fmt == "json" and blob.size <= ctx.limits.max_json_bytes:
        try:
            doc = loads_strict(blob.read_at(0, blob.size))
        except JSONProblem:
            return out  # json.invalid reported by the JSON analysis
        if _is_oci_document(doc):
            check = _Descriptors(ctx, blob.name)
            check.document(doc)
            out += check.findings
    return out


def analyze_oci(ctx: ScanContext, blob: Blob) -> list[Finding]:
    """Findings for one file of an OCI image layout (see the module docstring)."""
    base = _base(blob.name)
    digest = blob_digest(blob.name)
    if digest is not None:
        return _content_blob(ctx, blob, *digest)
    if base == "oci-layout":
        return _marker(ctx, blob)
    return _index(ctx, blob)


OCI = Format("oci")  # OCI image layout file: oci-layout, index.json, blobs/<alg>/<digest>
SPECS = (FormatSpec(
    OCI, analyze_oci, binary=False,
    # By place and content, before every other test (an empty blob too: its digest is
    # still checked); the analyzer sniffs a blob's content without it.
    probes=(Probe(0, lambda h: looks_like_oci(h.name, h.head), by_name=True),),
),)
