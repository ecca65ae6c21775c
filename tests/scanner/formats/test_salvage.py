"""A 7z archive whose header is broken still gets its pack streams read
(``scanner.formats.salvage``): extractors reach a stored or LZMA/LZMA2 stream without the
header, so a pickle payload in it is ``malicious``, not merely ``malformed``. Archives are
written here from 7zFormat.txt; nothing is extracted or loaded."""

from __future__ import annotations

import lzma
import zlib

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.sevenzip import analyze_7z

# PROTO 2, GLOBAL posix.system, BINUNICODE 'true', TUPLE1, REDUCE, STOP (never loaded)
PAYLOAD = b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R."
# protocol 0: GLOBAL os.system, STRING 'true', TUPLE, REDUCE, STOP
PAYLOAD_P0 = b"cos\nsystem\n(S'true'\ntR."


def _archive(body: bytes, header: bytes) -> bytes:
    """Signature header (next header right after ``body``) + body + header."""
    start = (len(body).to_bytes(8, "little") + len(header).to_bytes(8, "little")
             + zlib.crc32(header).to_bytes(4, "little"))
    return b"7z\xbc\xaf\x27\x1c\x00\x04" + zlib.crc32(start).to_bytes(4, "little") + start \
        + body + header


def _pack(data: bytes, codec: str) -> bytes:
    if codec == "stored":
        return data
    filt = ({"id": lzma.FILTER_LZMA2, "dict_size": 1 << 20} if codec == "lzma2" else
            {"id": lzma.FILTER_LZMA1, "lc": 3, "lp": 0, "pb": 2, "dict_size": 1 << 20})
    return lzma.compress(data, format=lzma.FORMAT_RAW, filters=[filt])


@pytest.mark.parametrize("codec", ["stored", "lzma2", "lzma"])
@pytest.mark.parametrize("payload", [PAYLOAD, PAYLOAD_P0], ids=["p2", "p0"])
def test_broken_header_pickle_call_is_malicious(codec: str, payload: bytes) -> None:
    body = _pack(b"# readme\n" * 3 + payload, codec)
    data = _archive(body, b"\x01\x04\x06garbage")  # kHeader, kMainStreamsInfo, then junk
    findings = analyze_7z(ScanContext(), BytesBlob("m.7z", data))
    assert worst(findings) is Verdict.MALICIOUS, findings
    assert "archive.malformed" in {f.rule_id for f in findings}
    bad = [f for f in findings if f.verdict is Verdict.MALICIOUS]
    assert all(f.path.startswith("m.7z!<") for f in bad), bad
    assert any("system" in f.evidence for f in bad), bad


def test_truncated_archive_keeps_what_was_written() -> None:
    """The file ends before its header (a download cut short): the stream is still read."""
    data = _archive(_pack(PAYLOAD, "lzma2"), b"\x01" * 40)[:-40]
    findings = analyze_7z(ScanContext(), BytesBlob("m.7z", data))
    assert worst(findings) is Verdict.MALICIOUS, findings


@pytest.mark.parametrize("codec", ["stored", "lzma2"])
def test_broken_archive_of_plain_data_stays_malformed(codec: str) -> None:
    """Salvage never invents findings: text, a harmless pickle and random bytes add none."""
    harmless = b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s."  # {'a': 1}
    body = _pack(b"hello world\n" * 50 + harmless + bytes(range(256)) * 4, codec)
    findings = analyze_7z(ScanContext(), BytesBlob("m.7z", _archive(body, b"\x01\x04\x06x")))
    assert worst(findings) is Verdict.MALFORMED, findings
    assert not any(f.path.startswith("m.7z!") for f in findings), findings
