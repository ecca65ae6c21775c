"""Property tests of the OCI, executable, legacy GGML, PaddlePaddle, Flax msgpack and
Core ML analyzers: for arbitrary bytes after each format's magic or head (hypothesis),
the analyzer never raises, never returns clean, and only emits registered rules.
About 2 s in all."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanner.core.context import Limits, ScanContext
from scanner.core.model import Blob, BytesBlob, Finding, Verdict, worst
from scanner.core.rules import RULES
from scanner.formats.coreml import analyze_coreml
from scanner.formats.executable import analyze_executable
from scanner.formats.flax import analyze_flax
from scanner.formats.ggml import analyze_ggml
from scanner.formats.oci import analyze_oci
from scanner.formats.paddle import analyze_paddle

SETTINGS = settings(max_examples=120, deadline=None,  # no wall-clock bound: counts, limits
                    suppress_health_check=[HealthCheck.too_slow])
Analyzer = Callable[[ScanContext, Blob], list[Finding]]
CASES: list[tuple[str, Analyzer, str, bytes]] = [
    ("ggjt", analyze_ggml, "model.bin", b"tjgg\x03\x00\x00\x00"),
    ("ggla", analyze_ggml, "lora.bin", b"algg\x01\x00\x00\x00"),
    ("ape", analyze_executable, "x.llamafile", b"MZqFpD='\n"),
    ("elf", analyze_executable, "tool", b"\x7fELF\x02\x01\x01"),
    ("pdmodel", analyze_paddle, "m.pdmodel", b"\x0a\x40\x08\x00\x10" + b"\xff" * 9 + b"\x01"),
    ("pdiparams", analyze_paddle, "m.pdiparams", b"\x00" * 16),
    ("msgpack", analyze_flax, "m.msgpack", b"\x81\xa6params"),
    ("mlmodel", analyze_coreml, "m.mlmodel", b"\x08\x04\x12"),
    ("weight.bin", analyze_coreml, "weight.bin", b"\x01\x00\x00\x00\x02\x00\x00\x00"),
    ("manifest", analyze_coreml, "x/Manifest.json",
     b'{"rootModelIdentifier": "a", "itemInfoEntries": '),
    ("oci-layout", analyze_oci, "oci-layout", b'{"imageLayoutVersion": '),
    ("index.json", analyze_oci, "index.json", b'{"schemaVersion": 2, "manifests": '),
    ("blob", analyze_oci, "blobs/sha256/" + "0" * 64, b""),
]


@pytest.mark.parametrize("label, analyzer, name, prefix", CASES, ids=[c[0] for c in CASES])
def test_arbitrary_bytes_never_raise_and_are_never_clean(
        label: str, analyzer: Analyzer, name: str, prefix: bytes) -> None:
    @SETTINGS
    @given(st.binary(max_size=600))
    def check(tail: bytes) -> None:
        ctx = ScanContext(Limits(seconds_per_target=5.0))
        findings = analyzer(ctx, BytesBlob(name, prefix + tail))
        assert findings and worst(findings) is not Verdict.CLEAN
        for f in findings:
            assert f.rule_id in RULES and f.path.startswith(name)
            assert f.verdict is RULES[f.rule_id].verdict

    check()
