"""Property tests of the pickle analyzer: arbitrary and mutated inputs never raise, always
return well-formed findings, finish in bounded time, and never lose a dangerous global
seen before a cut. Inputs come from hypothesis and ``pickle.dumps`` of plain data;
nothing is ever unpickled."""

from __future__ import annotations

import json
import pickle as P

from _shared import CountingBlob, deadline_hits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scanner.core.context import Limits, ScanContext
from scanner.core.model import BytesBlob, Finding, Verdict, worst
from scanner.core.rules import RULES
from scanner.formats.pickle.analyze import analyze_pickle, analyze_pickle_at, analyze_torch_legacy

# No per-example wall-clock deadline: bounded work is asserted with counts (opcode budget,
# bytes read), and the scanner's own deadline firing fails the example (deadline_hits).
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
LIMITS = Limits(max_pickle_ops=200_000, seconds_per_target=5.0)
READS_PER_BYTE = 4  # each byte of the pickle read at most this often (memo, frames, nesting)

# plain data whose pickles can hold no nested pickle by accident (no newline-terminated
# text ending in "." and no bytes starting with PROTO): the benign baseline
_text = st.text(alphabet=st.characters(blacklist_characters="\n."), max_size=20)
_bytes = st.binary(max_size=20).filter(lambda b: not b.startswith(b"\x80"))
_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                  _text, _bytes)
PLAIN = st.recursive(
    _leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.tuples(inner, inner),
                            st.dictionaries(_text, inner, max_size=5),
                            st.frozensets(st.integers(), max_size=3)),
    max_leaves=25,
)


def _valid(findings: list[Finding], name: str) -> list[Finding]:
    assert isinstance(findings, list)
    for f in findings:
        assert isinstance(f, Finding) and f.rule_id in RULES and f.message
        assert f.rule_id != "scanner.internal_error", f  # a crash caught is still a bug
        assert f.path.startswith(name)
        json.dumps(f.to_dict())
    return findings


def _run(fn: object, data: bytes) -> list[Finding]:
    assert callable(fn)
    blob = CountingBlob(BytesBlob("p.pkl", data))
    findings = fn(ScanContext(LIMITS), blob)
    assert deadline_hits(findings) == []
    assert blob.bytes <= READS_PER_BYTE * len(data) + 64, (blob.bytes, len(data))
    return _valid(findings, "p.pkl")


@SETTINGS
@given(st.binary(max_size=512))
def test_arbitrary_bytes_return_findings(data: bytes) -> None:
    findings = _run(analyze_pickle, data)
    assert worst(findings) >= Verdict.POLICY
    _run(analyze_torch_legacy, data)


@SETTINGS
@given(st.binary(max_size=256), st.integers(min_value=0, max_value=300))
def test_analyze_pickle_at_any_offset(data: bytes, offset: int) -> None:
    findings, end = analyze_pickle_at(ScanContext(LIMITS), BytesBlob("p.pkl", data), offset)
    _valid(findings, "p.pkl")
    assert offset <= end <= max(offset, len(data))
    if offset >= len(data):
        assert {f.rule_id for f in findings} == {"pickle.truncated"}


@SETTINGS
@given(PLAIN, st.integers(min_value=0, max_value=5))
def test_plain_data_pickles_are_policy_exactly(value: object, protocol: int) -> None:
    findings = _run(analyze_pickle, P.dumps(value, protocol=protocol))
    assert [f.rule_id for f in findings] == ["format.pickle_not_allowed"], findings


@SETTINGS
@given(PLAIN, st.integers(min_value=0, max_value=5), st.data())
def test_mutated_pickles_return_findings(value: object, protocol: int, data: st.DataObject) -> None:
    raw = bytearray(P.dumps(value, protocol=protocol))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(min_value=0, max_value=max(0, len(raw) - 1)))
        if kind == "flip" and raw:
            raw[at] = data.draw(st.integers(min_value=0, max_value=255))
        elif kind == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del raw[at : at + data.draw(st.integers(min_value=1, max_value=8))]
        else:
            del raw[at:]
    _run(analyze_pickle, bytes(raw))
    _run(analyze_torch_legacy, bytes(raw))


@SETTINGS
@given(st.sampled_from([("os", "system"), ("posix", "system"), ("builtins", "exec"),
                        ("subprocess", "Popen")]),
       st.binary(max_size=128), st.booleans())
def test_dangerous_global_survives_any_suffix(name: tuple[str, str], tail: bytes,
                                              stack_global: bool) -> None:
    if stack_global:
        head = P.PROTO + b"\x04"
        for part in name:
            head += P.SHORT_BINUNICODE + bytes([len(part)]) + part.encode()
        head += P.STACK_GLOBAL
    else:
        head = P.PROTO + b"\x02" + P.GLOBAL + f"{name[0]}\n{name[1]}\n".encode()
    findings = _run(analyze_pickle, head + tail)
    assert worst(findings) is Verdict.MALICIOUS
    assert ".".join(name) in {f.evidence for f in findings if f.rule_id == "pickle.unsafe_global"}


@SETTINGS
@given(st.lists(st.sampled_from([P.MARK, P.EMPTY_LIST, P.DUP, P.POP, P.POP_MARK, P.APPEND,
                                 P.APPENDS, P.EMPTY_DICT, P.SETITEM, P.TUPLE, P.NONE,
                                 P.MEMOIZE, P.BINGET + b"\x00", P.BUILD, P.REDUCE,
                                 P.STACK_GLOBAL, P.NEWOBJ, P.OBJ, P.BINPERSID]),
                max_size=200))
def test_random_opcode_sequences_return_findings(ops: list[bytes]) -> None:
    _run(analyze_pickle, P.PROTO + b"\x04" + b"".join(ops) + P.STOP)
