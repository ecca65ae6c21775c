"""Every pickle stream after a STOP is interpreted (loaders that call ``load()`` again run
them all), the file is labelled by the worst stream, and each finding says which stream
it comes from. Streams are written here with ``pickle.dumps`` of harmless values or as
hand-written opcodes; nothing is loaded."""

from __future__ import annotations

import pickle
import re

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.pickle.analyze import analyze_pickle

# PROTO 2, GLOBAL posix.system, BINUNICODE 'true', TUPLE1, REDUCE, STOP
EVIL = b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R."


def _scan(data: bytes) -> list:  # type: ignore[type-arg]
    return analyze_pickle(ScanContext(), BytesBlob("s.pkl", data))


def test_payload_in_third_stream_is_malicious_and_located() -> None:
    first, second = pickle.dumps({"a": 1}, protocol=2), pickle.dumps([1, 2], protocol=4)
    data = first + second + EVIL
    findings = _scan(data)
    assert worst(findings) is Verdict.MALICIOUS
    (bad,) = [f for f in findings if f.rule_id == "pickle.unsafe_global"]
    start = len(first) + len(second)
    assert bad.message.startswith(f"pickle stream 3 of 3 (starts at offset {start}): ")
    assert bad.offset is not None and start <= bad.offset < len(data)


def test_worst_stream_wins_in_any_position() -> None:
    plain = pickle.dumps(3, protocol=3)
    for data in (EVIL + plain, plain + EVIL + plain, plain * 5 + EVIL):
        assert worst(_scan(data)) is Verdict.MALICIOUS


def test_harmless_streams_are_policy_and_unlabelled_when_single() -> None:
    many = pickle.dumps(1) + pickle.dumps("x") + pickle.dumps(None)
    assert worst(_scan(many)) is Verdict.POLICY
    (only,) = _scan(EVIL[:0] + EVIL)[1:2]
    assert not re.match(r"pickle stream \d", only.message)


def test_bytes_after_the_last_stream_that_are_no_pickle_stay_malformed() -> None:
    findings = _scan(pickle.dumps(1) + EVIL + b"junk")
    assert worst(findings) is Verdict.MALICIOUS
    assert "pickle.trailing_data" in {f.rule_id for f in findings}
    assert worst(_scan(pickle.dumps(1) + b"junk")) is Verdict.MALFORMED


def test_second_opinion_keeps_picklescan_download_modules_out() -> None:
    """picklescan is imported without http.client (its URL helpers are never called):
    the second opinion still works, the placeholder is gone afterwards, and the real
    module still imports. Fresh interpreter: other tests may have imported http.client."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from scanner.core.model import BytesBlob\n"
        "from scanner.formats.pickle.second import second_opinion\n"
        "data = b'cposix\\nsystem\\n.'\n"
        "found = second_opinion(BytesBlob('x.pkl', data), 0, len(data), {})\n"
        "assert [f.evidence for f in found] == ['posix.system'], found\n"
        "assert 'picklescan.scanner' in sys.modules\n"
        "assert 'http.client' not in sys.modules, 'placeholder left behind'\n"
        "import http.client\n"
        "assert hasattr(http.client, 'HTTPSConnection')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
