"""Multi-node serving, for real: tensor parallel 2 across two network namespaces.

Builds a small random-weight 4-head model (tests/e2e/tiny_model.py), signs it, imports it
into one store per node, and runs ``appliance serve --node-rank 0|1`` in namespaces n0 and
n1 on a bridge (10.98.0.0/24); n9 is another host on the same segment. Checks, in order:

1. a worker given a different (validly signed) model is refused, and so is the head, each
   naming both digests;
2. the cluster serves a chat completion through the head's gateway;
3. from n9 every TCP port listening in n0 and n1 is probed: only the gateway answers;
4. killing the worker's engine ends an in-flight streamed request with an error (never a
   hang), the head turns not ready, and the cluster serves again without a human;
5. on exit the firewall table is gone.

Needs root, ``ip``, ``nft`` (Debian ``nftables``) and ``curl``; the real CPU engine twice
(about 5-8 minutes on 2 cores). Switched on by ``APPLIANCE_CLUSTER_TESTS=1`` (.ci/run).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
SUBNET = "10.98.0"
HEAD, WORKER, OTHER = f"{SUBNET}.1", f"{SUBNET}.2", f"{SUBNET}.9"
GATEWAY_PORT = 18443
RDV_PORT = 29511

pytestmark = pytest.mark.e2e


def _require() -> None:
    if os.environ.get("APPLIANCE_CLUSTER_TESTS") != "1":
        pytest.skip("cluster test: set APPLIANCE_CLUSTER_TESTS=1 (.ci/run does; root, "
                    "network namespaces, nftables, the CPU engine twice, minutes)")
    if os.geteuid() != 0:
        pytest.skip("cluster test: needs root (network namespaces, nftables)")
    for tool in ("ip", "nft", "curl"):
        if shutil.which(tool) is None:
            pytest.fail(f"cluster test: {tool} is not installed (apt-get install iproute2 "
                        "nftables curl)")


def _run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(cmd)} -> {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


class Net:
    def __init__(self) -> None:
        sfx = f"{os.getpid() % 10000}"
        self.ns = {"n0": f"apc{sfx}n0", "n1": f"apc{sfx}n1", "n9": f"apc{sfx}n9"}
        self.addr = {"n0": HEAD, "n1": WORKER, "n9": OTHER}
        self.ifname = {k: f"e{k}" for k in self.ns}
        self.bridge = f"apcbr{sfx}"

    def up(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "link", "set", self.bridge, "up")
        for key, ns in self.ns.items():
            _run("ip", "netns", "add", ns)
            veth = f"v{self.bridge[3:]}{key}"
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", self.ifname[key])
            _run("ip", "link", "set", self.ifname[key], "netns", ns)
            _run("ip", "link", "set", veth, "master", self.bridge)
            _run("ip", "link", "set", veth, "up")
            self.ex(key, "ip", "addr", "add", f"{self.addr[key]}/24", "dev", self.ifname[key])
            self.ex(key, "ip", "link", "set", self.ifname[key], "up")
            self.ex(key, "ip", "link", "set", "lo", "up")

    def down(self) -> None:
        for ns in self.ns.values():
            _run("ip", "netns", "del", ns, check=False)
        _run("ip", "link", "del", self.bridge, check=False)

    def ex(self, key: str, *cmd: str, check: bool = True,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return _run("ip", "netns", "exec", self.ns[key], *cmd, check=check, timeout=timeout)

    def popen_text(self, key: str, argv: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(["ip", "netns", "exec", self.ns[key], *argv], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def popen(self, key: str, argv: list[str], log: Path,
              env: dict[str, str]) -> subprocess.Popen[bytes]:
        handle = log.open("ab")
        try:
            return subprocess.Popen(["ip", "netns", "exec", self.ns[key], *argv], env=env,
                                    stdout=handle, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            handle.close()


@pytest.fixture(scope="module")
def net() -> Iterator[Net]:
    _require()
    network = Net()
    network.down()
    network.up()
    try:
        yield network
    finally:
        network.down()


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    proc = subprocess.run([PY, "-m", "appliance.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or _env())
    assert proc.returncode == 0, f"appliance {' '.join(args)}: {proc.stderr[-3000:]}"
    return proc.stdout


def _env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    env["PYTHONPATH"] = str(REPO)
    return env


class Files:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.api_key = secrets.token_hex(24)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, net: Net) -> Files:
    from tiny_model import build  # tests/e2e (module of this folder)

    root = tmp_path_factory.mktemp("cluster")
    out = Files(root)
    src = Path(re.search(r"model_dir=(\S+)", _cli("prepare")).group(1))  # type: ignore[union-attr]
    _cli("keygen", "--private-key", str(root / "sign.key"), "--public-key",
         str(root / "sign.pub"))
    for name, seed in (("tiny", 0), ("other", 1)):
        build(src, root / name, seed)
        _cli("sign", str(root / name), "--private-key", str(root / "sign.key"))
    (root / "cluster.secret").write_text(secrets.token_hex(32))
    (root / "api-keys").write_text(out.api_key + "\n")
    for rank, cpu in ((0, "0"), (1, "1")):
        node = root / f"node{rank}"
        node.mkdir()
        (node / "policy.toml").write_text(f"""\
schema_version = 1
[model]
served_name = "tiny"
[engine]
device = "cpu"
tool_call_parser = "hermes"
chat_template = "chat_template.jinja"
max_model_len = 2048
dtype = "bfloat16"
max_num_seqs = 8
startup_timeout_s = 600
enforce_eager = true
[engine.cpu]
omp_threads_bind = "{cpu}"
kvcache_space_gib = 1
[engine.parallel]
tensor_parallel_size = 2
[preflight]
advisories = "{REPO / 'policies' / 'advisories.json'}"
[gateway]
host = "{HEAD}"
port = {GATEWAY_PORT}
allow_plaintext = true
max_tokens_cap = 1024
request_timeout_s = 300
[store]
root = "{node / 'store'}"
[[trust.keys]]
name = "test"
public_key = "{root / 'sign.pub'}"
algorithm = "P-256"
[supervisor]
log_dir = "{node / 'logs'}"
restart_backoff_initial_s = 1.0
max_deaths = 3
[cluster]
nodes = ["{HEAD}", "{WORKER}"]
port = {RDV_PORT}
secret_file = "{root / 'cluster.secret'}"
heartbeat_timeout_s = 10
handshake_timeout_s = 300
""")
        for name in ("tiny", "other"):
            _cli("import", str(root / name), "--policy", str(node / "policy.toml"),
                 "--name", name)
    return out


def _digest(files: Files, name: str) -> str:
    from appliance import signing

    return signing.verify(files.root / name, files.root / "sign.pub").root_digest


class Node:
    def __init__(self, net: Net, files: Files, rank: int, model: str, tag: str) -> None:
        self.key = f"n{rank}"
        self.log = files.root / f"serve-{tag}-{rank}.log"
        argv = [PY, "-m", "appliance.cli", "serve", "--model", model, "--policy",
                str(files.root / f"node{rank}" / "policy.toml"), "--node-rank", str(rank),
                "--api-key-file", str(files.root / "api-keys")]
        self.proc = net.popen(self.key, argv, self.log, _env())

    def output(self) -> str:
        return self.log.read_text("utf-8", "replace")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        return self.proc.returncode


def _http(net: Net, files: Files, path: str, body: dict[str, object] | None = None,
          timeout: float = 120) -> tuple[int, str]:
    cmd = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-m", str(int(timeout)),
           "-H", f"authorization: Bearer {files.api_key}"]
    if body is not None:
        cmd += ["-H", "content-type: application/json", "-d", json.dumps(body)]
    proc = net.ex("n0", *cmd, f"http://{HEAD}:{GATEWAY_PORT}{path}", check=False,
                  timeout=timeout + 10)
    text, _, code = proc.stdout.rpartition("\n")
    return int(code or 0), text


def _chat(max_tokens: int = 8, stream: bool = False) -> dict[str, object]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "Say hi"}],
            "max_tokens": max_tokens, "stream": stream}


def _wait(predicate, timeout_s: float, what: str, nodes: list[Node]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        for node in nodes:
            if node.proc.poll() is not None:
                raise AssertionError(f"{node.key} exited ({node.proc.returncode}) while "
                                     f"waiting for {what}:\n{node.output()[-4000:]}")
        time.sleep(1)
    raise AssertionError(f"timeout waiting for {what}:\n" +
                         "\n".join(n.output()[-3000:] for n in nodes))


def test_worker_with_a_different_model_is_refused_on_both_sides(net: Net,
                                                                files: Files) -> None:
    head = Node(net, files, 0, "tiny", "mismatch")
    worker = Node(net, files, 1, "other", "mismatch")
    try:
        for node in (head, worker):
            node.proc.wait(timeout=400)
    finally:
        head.stop()
        worker.stop()
    good, bad = _digest(files, "tiny"), _digest(files, "other")
    for node in (head, worker):
        out = node.output()
        assert node.proc.returncode != 0, out[-3000:]
        assert "cluster_model_mismatch" in out, out[-3000:]
        assert good in out and bad in out, out[-3000:]
    assert "appliance_cluster" not in net.ex("n0", "nft", "list", "tables").stdout


def _listening(net: Net, key: str) -> list[tuple[str, int]]:
    out = net.ex(key, "ss", "-ltnH").stdout
    found = []
    for line in out.splitlines():
        local = line.split()[3]
        host, _, port = local.rpartition(":")
        found.append((host, int(port)))
    return found


_PROBE = """
import json, socket, sys
answered = []
for host, port in json.loads(sys.argv[1]):
    s = socket.socket()
    s.settimeout(1.5)
    try:
        s.connect((host, port))
        answered.append([host, port])
    except OSError:
        pass
    finally:
        s.close()
print(json.dumps(answered))
"""


def test_cluster_serves_only_the_gateway_answers_and_survives_a_worker_death(
        net: Net, files: Files) -> None:
    head = Node(net, files, 0, "tiny", "serve")
    worker = Node(net, files, 1, "tiny", "serve")
    nodes = [head, worker]
    try:
        started = time.monotonic()
        _wait(lambda: _http(net, files, "/health/ready", timeout=5)[0] == 200, 600,
              "the cluster to be ready", nodes)
        ready_s = time.monotonic() - started
        status, body = _http(net, files, "/v1/chat/completions", _chat())
        assert status == 200, body
        assert json.loads(body)["choices"][0]["message"] is not None

        # every TCP port of both nodes, probed from n9: only the gateway's answers
        targets = []
        listing = {}
        for key in ("n0", "n1"):
            listing[key] = _listening(net, key)
            for host, port in listing[key]:
                if host.startswith("127.") or host == "[::1]":
                    continue
                targets.append((net.addr[key], port))
        assert len(targets) >= 3, listing
        probe = net.ex("n9", PY, "-c", _PROBE, json.dumps(sorted(set(targets))),
                       timeout=300)
        answered = [tuple(x) for x in json.loads(probe.stdout)]
        assert answered == [(HEAD, GATEWAY_PORT)], (answered, listing)
        # the peers still reach each other (the engine works, so they must); and the
        # same probe from the worker reaches the head's engine ports
        peer = net.ex("n1", PY, "-c", _PROBE, json.dumps(
            [(HEAD, p) for h, p in listing["n0"] if not h.startswith("127.")]), timeout=300)
        assert len(json.loads(peer.stdout)) > 1

        # kill the worker's engine in the middle of a streamed request
        client = net.popen_text("n0", [PY, "-c", _STREAM, f"http://{HEAD}:{GATEWAY_PORT}",
                                       files.api_key])
        assert client.stdout is not None
        first = client.stdout.readline()
        assert first.startswith("FIRST"), first + (client.stdout.read() or "")
        engine_pid = _child_engine(worker.proc.pid)
        assert engine_pid is not None, worker.output()[-3000:]
        killed_at = time.monotonic()
        os.killpg(engine_pid, signal.SIGKILL)
        try:
            summary = json.loads(client.communicate(timeout=240)[0].strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            client.kill()
            raise AssertionError("the in-flight request hung after the worker died") from None
        ended_s = time.monotonic() - killed_at
        # it was in flight (began, had not finished) and ended without a normal finish
        assert summary["status"] == 200 and summary["chunks"] >= 1, summary
        assert summary["finish"] != "length" and not summary["done_ok"], summary
        _wait(lambda: _http(net, files, "/health/ready", timeout=5)[0] != 200, 60,
              "the head to turn not ready", nodes)
        _wait(lambda: _http(net, files, "/v1/chat/completions", _chat(), timeout=60)[0]
              == 200, 600, "the cluster to serve again", nodes)
        recovered_s = time.monotonic() - killed_at
        print(f"\ncluster: ready after {ready_s:.0f} s; in-flight stream ({summary['chunks']} "
              f"chunks) ended {ended_s:.1f} s after the worker engine was killed "
              f"({summary['ending']}); serving again {recovered_s:.0f} s after the kill; "
              f"listening: {listing}")
    finally:
        codes = [node.stop() for node in nodes]
    # both nodes drained and stopped: 128 + SIGTERM (issue 36)
    assert codes == [143, 143], [n.output()[-3000:] for n in nodes]
    for key in ("n0", "n1"):
        assert "appliance_cluster" not in net.ex(key, "nft", "list", "tables").stdout


_STREAM = """
import http.client, json, sys, time
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=200)
body = {"model": "tiny", "messages": [{"role": "user", "content": "Tell a long story"}],
        "max_tokens": 1000, "stream": True}
conn.request("POST", "/v1/chat/completions", json.dumps(body),
             {"authorization": "Bearer " + sys.argv[2], "content-type": "application/json"})
resp = conn.getresponse()
out = {"status": resp.status, "chunks": 0, "finish": None, "done_ok": False, "ending": ""}
try:
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            out["done_ok"] = out["finish"] is not None
            out["ending"] += " [DONE]"
            continue
        event = json.loads(data)
        if "error" in event:
            out["ending"] += "error event: " + json.dumps(event["error"])[:200]
            continue
        out["chunks"] += 1
        if out["chunks"] == 1:
            print("FIRST", flush=True)
        for choice in event.get("choices", []):
            out["finish"] = choice.get("finish_reason") or out["finish"]
except Exception as exc:
    out["ending"] += " connection: " + type(exc).__name__
if not out["ending"]:
    out["ending"] = "stream closed"
if out["chunks"] == 0:
    print("FIRST-NOT-REACHED", flush=True)
print(json.dumps(out), flush=True)
"""


def _child_engine(appliance_pid: int) -> int | None:
    """The headless engine's pid: a process running vLLM's run_headless whose
    process group is its own (the supervisor starts it in a new session)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if any(b"run_headless" in part for part in cmdline) and int(stat[2]) == int(entry) and \
                _descends(int(entry), appliance_pid):
            return int(entry)
    return None


def _descends(pid: int, ancestor: int) -> bool:
    for _ in range(20):
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
        if pid <= 1:
            return False
    return False
