"""The cluster link: an authenticated model handshake, then heartbeats, head <-> worker.

Hand-written on a plain TCP socket (no pickle, no framework): the engine's own
inter-node transport (torch.distributed store, gloo, ZMQ) is unauthenticated and moves
pickled objects, so this link must not share a parser with it. Messages are single JSON
lines of at most ``MAX_LINE`` bytes, each read with a deadline.

Protocol (version 1), on ``head:(cluster.port + 1)``; the worker connects from its own
cluster address and the head accepts only the address listed for the claimed rank::

    W -> H  {"v": 1, "rank": r, "nonce": Nw, "digest": Dw}
    H -> W  {"nonce": Nh, "digest": Dh, "proof": HMAC(K, "head|r|Nw|Nh|Dh|Dw")}
    W -> H  {"proof": HMAC(K, "worker|r|Nw|Nh|Dw|Dh")}
    H -> W  {"ok": true} once every worker has proved itself and every digest equals the
            head's; {"ok": false, "error": ...} otherwise (both sides refuse, naming both)
    then    {"hb": 1} both ways every ``HEARTBEAT_S``; {"ready": true} head -> workers when
            the engine serves

K is the cluster secret (``[cluster] secret_file``, at least 32 bytes, the same on every
node); N are 16 random bytes (hex) per connection, so a recorded exchange cannot be
replayed; D is the signed manifest's root digest of the model each node verified from its
own store. Forging a proof needs K: a third host on the segment cannot pass for a node,
even with a spoofed source address, and cannot alter either digest. The link closing, an
unreadable message or ``heartbeat_timeout_s`` of silence marks the link dead: the head and
the workers then stop their engines and meet again here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.errors import LaunchError

MAX_LINE = 4096
HEARTBEAT_S = 1.0
MIN_SECRET_BYTES = 32


class ClusterError(LaunchError):
    """A cluster handshake, firewall or link failure (codes ``cluster_*``); a
    ``LaunchError``, so a failed handshake on a restart counts as one more engine death."""


def read_secret(path: Path) -> bytes:
    """The cluster secret's bytes (whitespace stripped). Raises ``cluster_secret_invalid``."""
    try:
        data = path.read_bytes().strip()
    except OSError as exc:
        raise ClusterError(f"cannot read the cluster secret: {exc.strerror}",
                           code="cluster_secret_invalid", where=str(path),
                           fix="create it on every node: `openssl rand -hex 32 > FILE`, "
                               "mode 0600") from None
    if len(data) < MIN_SECRET_BYTES:
        raise ClusterError(f"the cluster secret has {len(data)} bytes, fewer than "
                           f"{MIN_SECRET_BYTES}", code="cluster_secret_invalid",
                           where=str(path), fix="use `openssl rand -hex 32`")
    return data


def _proof(key: bytes, *parts: object) -> str:
    return hmac.new(key, "|".join(str(p) for p in parts).encode(), hashlib.sha256).hexdigest()


class _Lines:
    """Bounded JSON-line reader/writer over a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.wlock = threading.Lock()

    def send(self, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        with self.wlock:
            self.sock.sendall(data)

    def recv(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message in time")
            self.sock.settimeout(left)
            chunk = self.sock.recv(MAX_LINE)
            if not chunk:
                raise ConnectionError("link closed by the peer")
            self.buf += chunk
            if len(self.buf) > MAX_LINE and b"\n" not in self.buf:
                raise ValueError("message too long")
        line, _, self.buf = self.buf.partition(b"\n")
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("message is not an object")
        return obj


def _hex(obj: dict[str, Any], key: str, size: int = 64) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or len(value) > size or \
            any(c not in "0123456789abcdef" for c in value) or not value:
        raise ValueError(f"field {key!r} is not lowercase hex")
    return value


def mismatch_error(rank: int, own: str, other: str, head: bool) -> ClusterError:
    who, peer = ("head (rank 0)", f"worker rank {rank}") if head else \
        (f"worker rank {rank}", "head (rank 0)")
    return ClusterError(
        f"the cluster would load different models: {who} verified {own}, {peer} verified "
        f"{other}", code="cluster_model_mismatch", where=f"cluster node rank {rank}",
        fix="import the same signed model version on every node (`appliance models list`)")


class Link:
    """One side's open links after a good handshake; heartbeats until :meth:`close`."""

    def __init__(self, peers: list[_Lines], timeout_s: float) -> None:
        self.peers = peers
        self.timeout_s = timeout_s
        self.reason = ""
        self.ready = threading.Event()
        self._closed = threading.Event()
        self._seen = [time.monotonic()] * len(peers)
        self._threads = [threading.Thread(target=self._read, args=(i,), daemon=True,
                                          name=f"cluster-link-{i}")
                         for i in range(len(peers))]
        self._threads.append(threading.Thread(target=self._beat, daemon=True,
                                              name="cluster-heartbeat"))
        for thread in self._threads:
            thread.start()

    def _fail(self, reason: str) -> None:
        if not self.reason:
            self.reason = reason
        self._closed.set()

    def _read(self, index: int) -> None:
        lines = self.peers[index]
        while not self._closed.is_set():
            try:
                msg = lines.recv(time.monotonic() + self.timeout_s)
            except (OSError, ValueError) as exc:
                if not self._closed.is_set():
                    self._fail(f"cluster link {index + 1} lost: {exc}")
                return
            self._seen[index] = time.monotonic()
            if msg.get("ready") is True:
                self.ready.set()

    def _beat(self) -> None:
        while not self._closed.wait(HEARTBEAT_S):
            for index, lines in enumerate(self.peers):
                try:
                    lines.send({"hb": 1})
                except OSError as exc:
                    self._fail(f"cluster link {index + 1} lost: {exc}")
                    return

    @property
    def dead(self) -> bool:
        return self._closed.is_set()

    def announce_ready(self) -> None:
        for lines in self.peers:
            try:
                lines.send({"ready": True})
            except OSError as exc:
                self._fail(f"cluster link lost: {exc}")

    def close(self) -> None:
        self._fail("closed")
        for lines in self.peers:
            try:
                lines.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            lines.sock.close()


def head_handshake(nodes: tuple[str, ...], port: int, secret: bytes, digest: str,
                   timeout_s: float, heartbeat_timeout_s: float,
                   stopping: Callable[[], bool] = lambda: False) -> Link:
    """Rank 0: accept every worker on ``nodes[0]:port``; return the open :class:`Link`
    once all proved the secret and all digests equal ``digest``. Raises ``ClusterError``
    (``cluster_model_mismatch`` naming both digests, ``cluster_handshake_failed``)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((nodes[0], port))
    except OSError as exc:
        listener.close()
        raise ClusterError(f"cannot listen on {nodes[0]}:{port}: {exc.strerror}",
                           code="cluster_handshake_failed", where=f"{nodes[0]}:{port}",
                           fix="check that this host holds the head's cluster address and "
                               "that the port is free") from None
    listener.listen(len(nodes))
    deadline = time.monotonic() + timeout_s
    joined: dict[int, _Lines] = {}
    try:
        while len(joined) < len(nodes) - 1:
            if stopping():
                raise ClusterError("stopped while waiting for the workers",
                                   code="cluster_handshake_failed")
            if time.monotonic() >= deadline:
                missing = [r for r in range(1, len(nodes)) if r not in joined]
                raise ClusterError(
                    f"workers {missing} did not complete the handshake within {timeout_s:g} s",
                    code="cluster_handshake_failed", where=f"{nodes[0]}:{port}",
                    fix="start `appliance serve --node-rank R` on every node with the same "
                        "policy and cluster secret")
            listener.settimeout(0.5)
            try:
                sock, (peer, _) = listener.accept()
            except TimeoutError:
                continue
            rank_of = {addr: r for r, addr in enumerate(nodes)}
            if rank_of.get(peer, 0) == 0:
                sock.close()  # not a listed worker address
                continue
            lines = _Lines(sock)
            try:
                rank = _head_one(lines, rank_of[peer], secret, digest,
                                 min(deadline, time.monotonic() + 30))
            except ClusterError as exc:
                if exc.code == "cluster_model_mismatch":
                    for other in joined.values():
                        other.sock.close()
                    raise
                sock.close()  # a bad proof: keep waiting for the real node
                continue
            except (OSError, ValueError):
                sock.close()
                continue
            if rank in joined:
                joined[rank].sock.close()
            joined[rank] = lines
        for lines in joined.values():
            lines.send({"ok": True})
    except BaseException:
        for lines in joined.values():
            lines.sock.close()
        raise
    finally:
        listener.close()
    return Link([joined[r] for r in sorted(joined)], heartbeat_timeout_s)


def _head_one(lines: _Lines, rank: int, secret: bytes, digest: str, deadline: float) -> int:
    hello = lines.recv(deadline)
    if hello.get("v") != 1 or hello.get("rank") != rank:
        raise ValueError("bad hello")
    nonce_w, other = _hex(hello, "nonce", 32), _hex(hello, "digest")
    nonce_h = secrets.token_hex(16)
    lines.send({"nonce": nonce_h, "digest": digest,
                "proof": _proof(secret, "head", rank, nonce_w, nonce_h, digest, other)})
    answer = lines.recv(deadline)
    expected = _proof(secret, "worker", rank, nonce_w, nonce_h, other, digest)
    if not hmac.compare_digest(str(answer.get("proof", "")), expected):
        raise ClusterError("a worker's proof does not match the cluster secret",
                           code="cluster_handshake_failed")
    if other != digest:
        err = mismatch_error(rank, digest, other, head=True)
        lines.send({"ok": False, "error": str(err)})
        lines.sock.close()
        raise err
    return rank


def worker_handshake(nodes: tuple[str, ...], rank: int, port: int, secret: bytes, digest: str,
                     timeout_s: float, heartbeat_timeout_s: float,
                     stopping: Callable[[], bool] = lambda: False) -> Link:
    """Rank ``rank`` > 0: connect to the head (retrying until ``timeout_s``), prove the
    secret, check the head's proof and digest; return the open :class:`Link` after the
    head's ``ok``. Raises ``ClusterError``."""
    deadline = time.monotonic() + timeout_s
    last = "no attempt"
    while True:
        if stopping():
            raise ClusterError("stopped while waiting for the head",
                               code="cluster_handshake_failed")
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"no handshake with the head {nodes[0]}:{port} within {timeout_s:g} s "
                f"(last: {last})", code="cluster_handshake_failed", where=f"{nodes[0]}:{port}",
                fix="start the head (node rank 0) with the same policy and cluster secret")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((nodes[rank], 0))
            sock.settimeout(5)
            sock.connect((nodes[0], port))
            lines = _Lines(sock)
            _worker_one(lines, rank, secret, digest, deadline)
            return Link([lines], heartbeat_timeout_s)
        except ClusterError:
            sock.close()
            raise
        except (OSError, ValueError) as exc:
            sock.close()
            last = str(exc) or type(exc).__name__
            time.sleep(1.0)


def _worker_one(lines: _Lines, rank: int, secret: bytes, digest: str, deadline: float) -> None:
    nonce_w = secrets.token_hex(16)
    lines.send({"v": 1, "rank": rank, "nonce": nonce_w, "digest": digest})
    reply = lines.recv(deadline)
    nonce_h, other = _hex(reply, "nonce", 32), _hex(reply, "digest")
    expected = _proof(secret, "head", rank, nonce_w, nonce_h, other, digest)
    if not hmac.compare_digest(str(reply.get("proof", "")), expected):
        raise ClusterError("the head's proof does not match the cluster secret",
                           code="cluster_handshake_failed", where=f"rank {rank}",
                           fix="use the same secret_file content on every node")
    lines.send({"proof": _proof(secret, "worker", rank, nonce_w, nonce_h, digest, other)})
    if other != digest:
        raise mismatch_error(rank, digest, other, head=False)
    verdict = lines.recv(deadline)
    if verdict.get("ok") is not True:
        raise ClusterError(f"the head refused: {verdict.get('error', 'no reason')}"[:1000],
                           code="cluster_handshake_failed")
