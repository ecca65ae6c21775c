"""The tamper-evident audit chain (issue 23): ``appliance audit verify`` finds a deleted, an
edited and a reordered record, a forged checkpoint and an unsigned log; a log rotated
mid-chain (SIGHUP after logrotate, or while the appliance was down) verifies; records are
copied to journald / syslog sockets, and a collector that is down loses nothing in the file."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.audit import AuditChain, DatagramSink, verify_files
from appliance.audit.chain import public_key
from appliance.cli import main
from appliance.signing import keygen, load_private_key


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("audit-keys")
    keygen(folder / "audit.key", folder / "audit.pub", "p256", None)
    keygen(folder / "other.key", folder / "other.pub", "p256", None)
    return folder / "audit.key", folder / "audit.pub"


def _chain(path: Path, key: Path, every: int = 4, **kw: object) -> AuditChain:
    return AuditChain(path, load_private_key(key), every=every, interval_s=3600, **kw)


def _write(path: Path, key: Path, n: int, every: int = 4) -> None:
    chain = _chain(path, key, every)
    for i in range(n):
        chain.append({"ts": 1.5, "request_id": f"r{i}", "status": 200})
    chain.close()


def _verify(*files: Path, pub: Path) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["audit", "verify", *map(str, files), "--public-key", str(pub)])
    return rc, out.getvalue() + err.getvalue()


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def _put(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


@pytest.fixture
def log(tmp_path: Path, keys: tuple[Path, Path]) -> Iterator[Path]:
    path = tmp_path / "audit.jsonl"
    _write(path, keys[0], 10)
    yield path


def test_an_intact_log_verifies(log: Path, keys: tuple[Path, Path]) -> None:
    lines = [json.loads(x) for x in _lines(log)]
    assert [x["seq"] for x in lines] == list(range(len(lines)))
    assert sum(x.get("event") == "audit_checkpoint" for x in lines) == 3  # 4, 8, close
    assert lines[-1]["event"] == "audit_checkpoint"  # nothing unsigned after close
    rc, out = _verify(log, pub=keys[1])
    assert rc == 0, out
    assert "intact: 13 records" in out and "3 signed checkpoints" in out


def test_a_deleted_record_is_found(log: Path, keys: tuple[Path, Path]) -> None:
    lines = _lines(log)
    del lines[5]
    _put(log, lines)
    rc, out = _verify(log, pub=keys[1])
    assert rc == 1
    assert "error[audit_record_missing]" in out and f"{log}:6 (seq 6)" in out


def test_an_edited_record_is_found(log: Path, keys: tuple[Path, Path]) -> None:
    lines = _lines(log)
    lines[2] = lines[2].replace(b'"status":200', b'"status":500')
    _put(log, lines)
    rc, out = _verify(log, pub=keys[1])
    assert rc == 1
    assert "error[audit_record_altered]" in out and f"{log}:3 (seq 2)" in out


def test_an_edited_last_record_is_found_by_the_closing_checkpoint(
        log: Path, keys: tuple[Path, Path]) -> None:
    lines = _lines(log)
    lines[-2] = lines[-2].replace(b'"r9"', b'"rX"')  # the record before the final checkpoint
    _put(log, lines)
    rc, out = _verify(log, pub=keys[1])
    assert rc == 1 and "error[audit_record_altered]" in out


def test_a_reordered_record_is_found(log: Path, keys: tuple[Path, Path]) -> None:
    lines = _lines(log)
    lines[3], lines[4] = lines[4], lines[3]
    _put(log, lines)
    rc, out = _verify(log, pub=keys[1])
    assert rc == 1
    assert "error[audit_record_out_of_order]" in out and f"{log}:4" in out


def test_a_rewritten_chain_fails_on_its_checkpoint(log: Path, keys: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    """Whoever re-links the chain after an edit cannot re-sign the checkpoints without the
    key: the log re-written with another key fails on its first checkpoint."""
    forged = tmp_path / "forged.jsonl"
    _write(forged, keys[0].with_name("other.key"), 10)
    rc, out = _verify(forged, pub=keys[1])
    assert rc == 1 and "error[audit_checkpoint_invalid]" in out and f"{forged}:5" in out


def test_a_log_without_checkpoints_is_refused(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    path = tmp_path / "unsigned.jsonl"
    chain = AuditChain(path)  # no key
    chain.append({"ts": 1.0})
    chain.close()
    rc, out = _verify(path, pub=keys[1])
    assert rc == 1 and "error[audit_unsigned]" in out


def test_rotation_on_sighup_keeps_the_chain(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    path = tmp_path / "audit.jsonl"
    chain = _chain(path, keys[0], every=100)
    for i in range(5):
        chain.append({"ts": 1.0, "request_id": f"a{i}"})
    path.rename(tmp_path / "audit.jsonl.1")  # logrotate, then SIGHUP
    chain.reopen()
    for i in range(5):
        chain.append({"ts": 1.0, "request_id": f"b{i}"})
    chain.close()
    old, new = tmp_path / "audit.jsonl.1", path
    assert json.loads(_lines(old)[-1])["event"] == "audit_checkpoint"  # closes the old file
    assert json.loads(_lines(new)[0])["seq"] == 6  # links on
    rc, out = _verify(old, new, pub=keys[1])
    assert rc == 0, out
    rc, out = _verify(new, pub=keys[1])  # the newest file alone: starts mid-chain
    assert rc == 0 and "starts at seq 6" in out
    rc, out = _verify(new, old, pub=keys[1])  # wrong order
    assert rc == 1 and "audit_record_out_of_order" in out


def test_restart_continues_the_chain_even_after_rotation_while_down(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    path = tmp_path / "audit.jsonl"
    _write(path, keys[0], 3)
    _write(path, keys[0], 3)  # restart: same file
    path.rename(tmp_path / "audit.jsonl.1")  # rotated while the appliance was down
    _write(path, keys[0], 3)
    records = [json.loads(x) for f in (tmp_path / "audit.jsonl.1", path) for x in _lines(f)]
    assert [r["seq"] for r in records] == list(range(len(records)))
    rc, out = _verify(tmp_path / "audit.jsonl.1", path, pub=keys[1])
    assert rc == 0, out
    assert "new chain" not in out


def test_verify_reports_a_chain_restart_after_a_torn_tail(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    path = tmp_path / "audit.jsonl"
    _write(path, keys[0], 3)
    with path.open("ab") as fh:
        fh.write(b'{"seq": 9, "prev": "tor\n')  # a crash mid-write
    report = verify_files([path], public_key(keys[1]))
    assert report.problem is not None and report.problem.code == "audit_not_a_record"


def _datagram_server(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    return sock


def test_records_are_copied_to_journald_and_syslog(tmp_path: Path,
                                                   keys: tuple[Path, Path]) -> None:
    journal = _datagram_server(tmp_path / "journal.sock")
    syslog = _datagram_server(tmp_path / "log.sock")
    sinks = (DatagramSink("journald", str(tmp_path / "journal.sock")),
             DatagramSink("syslog", str(tmp_path / "log.sock"), "local3"))
    chain = _chain(tmp_path / "audit.jsonl", keys[0], sinks=sinks)
    chain.append({"ts": 1.0, "request_id": "r0"})
    got = journal.recv(65536)
    line = _lines(tmp_path / "audit.jsonl")[0]
    assert got.startswith(b"MESSAGE=" + line + b"\n")
    assert b"SYSLOG_IDENTIFIER=appliance-audit\n" in got and b"APPLIANCE_AUDIT_SEQ=0\n" in got
    pri = 19 * 8 + 6  # local3.info
    assert syslog.recv(65536) == b"<%d>appliance-audit[%d]: %s" % (pri, __import__("os")
                                                                  .getpid(), line)
    chain.close()
    journal.close()
    syslog.close()


def test_a_collector_that_is_down_loses_nothing_in_the_file(
        tmp_path: Path, keys: tuple[Path, Path]) -> None:
    sink = DatagramSink("journald", str(tmp_path / "absent.sock"))
    chain = _chain(tmp_path / "audit.jsonl", keys[0], sinks=(sink,))
    for i in range(20):
        chain.append({"ts": 1.0, "request_id": f"r{i}"})
    chain.close()
    assert sink.sent == 0 and sink.dropped == 20 + 5  # records and checkpoints
    rc, out = _verify(tmp_path / "audit.jsonl", pub=keys[1])
    assert rc == 0, out
