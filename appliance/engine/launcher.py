"""Launch vLLM as a hardened child process and wait until it serves.

The argument list is built here and nowhere else (tests parse it with vLLM's own parser):

- ``--load-format safetensors`` (no ``.bin``/``.pt`` fallback; GHSA-rh4j-5rhw-hr54) and never
  ``--trust-remote-code`` (GHSA-2pc9-4j83-qjmr, GHSA-8fr4-5q9j-m8gm);
- ``--structured-outputs-config {"backend":"xgrammar"}`` (never ``auto``: it silently falls
  back to ``guidance``/``outlines``, which ignore or reject other schema keywords);
- ``--enable-auto-tool-choice --tool-call-parser P`` with P from ``VETTED_TOOL_PARSERS``
  and ``--tool-strict-level parameter`` (every tool call grammar-constrained: with the default
  ``auto`` and ``tool_choice="auto"`` vLLM applies no grammar at all);
- the model's vetted chat template from the signed folder, a served model name,
  ``--disable-fastapi-docs``, ``--fingerprint-mode none``, ``--generation-config vllm``;
- listening only on a Unix socket in a private 0700 directory, with a random internal API
  key passed through the environment (never on the command line);
- the parallel, quantization and cache keys (:func:`appliance.engine.parallel.parallel_flags`)
  and, in a ``[cluster]``, ``--nnodes/--node-rank/--master-addr/--master-port``; a worker
  (node rank > 0) runs vLLM's headless path (:mod:`appliance.engine.headless`) with
  ``--headless`` and no API.

The environment is rebuilt from scratch: offline (``HF_HUB_OFFLINE=1``), no usage stats,
``VLLM_PLUGINS`` empty, no ``PYTHONOPTIMIZE``/``PYTHONPATH``; CPU settings when the policy's
device is ``cpu``; in a cluster every engine socket is bound to the cluster address and
interface (``VLLM_HOST_IP``, ``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``); the gateway's
request bounds where the installed vLLM reads a bound variable (:mod:`.request_bounds`).
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from appliance.config.policy import EnginePolicy
from appliance.engine.headless import HEADLESS_CODE
from appliance.engine.parallel import parallel_flags
from appliance.engine.reaper import spawn_group, stop_group
from appliance.engine.request_bounds import RequestBounds, bound_env
from appliance.engine.stopping import SIGNALS
from appliance.errors import LaunchError, PolicyError

# Parsers whose tool-call envelope vLLM enforces with an xgrammar structural tag
# (vLLM 0.33: the parser class sets ``structural_tag_model``), minus parsers with past
# RCE/ReDoS advisories unless the pinned floor covers them (qwen3_coder eval:
# CVE-2025-9141, fixed 0.10.1.1; pythonic ReDoS: CVE-2025-48887 — pythonic is not
# structural-tag based and stays off the list).
VETTED_TOOL_PARSERS: frozenset[str] = frozenset({
    "hermes", "llama3_json", "llama4_json", "qwen3_json", "qwen3_xml", "qwen3_coder",
})
STRUCTURED_OUTPUTS_BACKEND = "xgrammar"
LOG_TAIL_LINES = 40
STARTING_GRACE_S = 5.0  # SIGTERM -> SIGKILL for an engine never ready (Engine.stop)


@dataclass(frozen=True)
class ClusterRole:
    """This node's place in a ``[cluster]``: rank 0 runs the API rank, others headless."""

    node_rank: int
    nodes: tuple[str, ...]  # cluster addresses, rank order
    port: int  # rendezvous (torch.distributed store on the head)
    interface: str  # the interface holding this node's cluster address

    @property
    def address(self) -> str:
        return self.nodes[self.node_rank]

    @property
    def head(self) -> str:
        return self.nodes[0]


@dataclass(frozen=True)
class EngineSpec:
    """What to launch: a verified, staged model folder and the engine policy."""

    model_dir: Path
    served_name: str
    engine: EnginePolicy
    runtime_dir: Path  # private 0700 directory for the socket and the log
    api_key: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    cluster: ClusterRole | None = None
    bounds: RequestBounds = RequestBounds()  # the gateway's, repeated to the engine

    @property
    def headless(self) -> bool:
        """A cluster worker: vLLM's headless path, no API, no socket."""
        return self.cluster is not None and self.cluster.node_rank > 0

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / "engine.sock"

    @property
    def log_path(self) -> Path:
        return self.runtime_dir / "engine.log"


def check_tool_config(engine: EnginePolicy) -> None:
    """Refuse a missing parser (``incomplete_tool_config``: without one vLLM silently
    degrades ``tool_choice="required"`` to plain text, vllm-project/vllm#29432) and any
    parser outside the vetted list (``parser_not_vetted``)."""
    if not engine.tool_call_parser.strip():
        raise PolicyError(
            "no tool-call parser configured: tool requests would not be grammar-constrained",
            code="incomplete_tool_config", where="engine.tool_call_parser",
            fix=f"set engine.tool_call_parser to one of: {', '.join(sorted(VETTED_TOOL_PARSERS))}")
    if engine.tool_call_parser not in VETTED_TOOL_PARSERS:
        raise PolicyError(
            f"tool-call parser {engine.tool_call_parser!r} is not vetted",
            code="parser_not_vetted", where="engine.tool_call_parser",
            fix=f"use one of: {', '.join(sorted(VETTED_TOOL_PARSERS))}")


def structured_outputs_config(engine: EnginePolicy) -> dict[str, object]:
    """vLLM's ``--structured-outputs-config``: the xgrammar backend, and
    ``disable_any_whitespace`` when the policy sets it (xgrammar then compiles JSON-schema and
    JSON-object grammars with compact separators; vLLM 0.32 does not pass it to structural
    tags, the grammar of every tool call under ``--tool-strict-level parameter``)."""
    config: dict[str, object] = {"backend": STRUCTURED_OUTPUTS_BACKEND}
    if engine.disable_any_whitespace:
        config["disable_any_whitespace"] = True
    return config


ENGINE_MODULE = "vllm.entrypoints.openai.api_server"
# The flags that make the appliance's engine the appliance's: the tool-call and
# structured-output grammar settings and the closed surface. The raw-vLLM comparison engine
# (appliance.toolbench.raw_vllm) is this command line without exactly these.
HARDENING_FLAGS: frozenset[str] = frozenset({
    "--structured-outputs-config", "--tool-strict-level", "--disable-fastapi-docs",
    "--fingerprint-mode",
})
Flag = tuple[str, str | None]  # (flag, value) or (flag, None) for a switch


def engine_flags(spec: EngineSpec) -> list[Flag]:
    """Every engine flag for ``spec`` in command-line order, declared once (the listener is
    ``--uds``; :func:`build_argv` and the raw-vLLM argv are built from this list)."""
    engine = spec.engine
    flags: list[Flag] = [
        ("--model", str(spec.model_dir)),
        ("--served-model-name", spec.served_name),
        ("--uds", str(spec.socket_path)),
        ("--load-format", "safetensors"),
        ("--structured-outputs-config", json.dumps(structured_outputs_config(engine))),
        ("--enable-auto-tool-choice", None),
        ("--tool-call-parser", engine.tool_call_parser),
        ("--tool-strict-level", "parameter"),
        ("--chat-template", str(spec.model_dir / engine.chat_template)),
        ("--max-model-len", str(engine.max_model_len)),
        ("--max-num-seqs", str(engine.max_num_seqs)),
        ("--dtype", engine.dtype),
        ("--generation-config", "vllm"),
        ("--disable-fastapi-docs", None),
        ("--fingerprint-mode", "none"),
    ]
    if engine.enforce_eager:
        flags.append(("--enforce-eager", None))
    if engine.max_num_batched_tokens is not None:
        flags.append(("--max-num-batched-tokens", str(engine.max_num_batched_tokens)))
    if engine.num_kv_blocks is not None:
        flags.append(("--num-gpu-blocks-override", str(engine.num_kv_blocks)))
    flags += parallel_flags(engine)
    role = spec.cluster
    if role is not None:
        flags += [("--nnodes", str(len(role.nodes))), ("--node-rank", str(role.node_rank)),
                  ("--master-addr", role.head), ("--master-port", str(role.port))]
        if spec.headless:
            flags.append(("--headless", None))
    return flags


def command_line(flags: list[Flag], headless: bool = False) -> list[str]:
    """``[python, -m, ENGINE_MODULE, flag, value, ...]`` (this interpreter); a cluster
    worker's (``headless``) starts with ``-c HEADLESS_CODE`` instead of ``-m ENGINE_MODULE``."""
    argv = [sys.executable, *(["-c", HEADLESS_CODE] if headless else ["-m", ENGINE_MODULE])]
    for flag, value in flags:
        argv += [flag] if value is None else [flag, value]
    return argv


def build_argv(spec: EngineSpec) -> list[str]:
    """The full engine command line (``argv[0]`` is this interpreter)."""
    check_tool_config(spec.engine)
    return command_line(engine_flags(spec), headless=spec.headless)


def build_env(spec: EngineSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """A scrubbed environment: only what the engine needs, offline and plugin-free."""
    src = os.environ if base is None else base
    env = {k: src[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ") if k in src}
    env.update({
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_PLUGINS": "",
        "VLLM_API_KEY": spec.api_key,
        "VLLM_LOGGING_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        **bound_env(spec.bounds),
    })
    if spec.engine.device == "cpu":
        env.update({
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_OMP_THREADS_BIND": spec.engine.cpu.omp_threads_bind,
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "VLLM_CPU_KVCACHE_SPACE": str(spec.engine.cpu.kvcache_space_gib),
        })
    if spec.engine.device == "gpu" and spec.engine.gpu.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in spec.engine.gpu.devices)
    if spec.cluster is not None:  # every engine socket on the cluster address/interface
        env.update({"VLLM_HOST_IP": spec.cluster.address,
                    "GLOO_SOCKET_IFNAME": spec.cluster.interface,
                    "NCCL_SOCKET_IFNAME": spec.cluster.interface})
    return env


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def engine_get(socket_path: Path, route: str, api_key: str | None = None,
               timeout: float = 5.0) -> tuple[int, bytes]:
    """GET ``route`` from the engine over its Unix socket; returns (status, body)."""
    conn = _UnixHTTPConnection(socket_path, timeout)
    try:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        conn.request("GET", route, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class Engine:
    """A running engine child process (its own process group)."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._reader: threading.Thread | None = None
        self.started_at = 0.0
        self.ready = False  # /health answered 200 once (wait_ready)

    def start(self) -> None:
        self.spec.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.spec.runtime_dir, 0o700)
        self.started_at = time.monotonic()
        with SIGNALS.critical():  # a stop signal waits until self.proc is recorded
            self.proc = spawn_group(  # own session; guarded by the reaper
                build_argv(self.spec), env=build_env(self.spec), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.spec.runtime_dir,
            )
            self._reader = threading.Thread(target=self._pump, daemon=True)
            self._reader.start()

    def _pump(self) -> None:
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        with open(self.spec.log_path, "ab") as log:
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                self._tail.append(raw.decode("utf-8", "replace").rstrip())

    def log_tail(self) -> str:
        return "\n".join(self._tail)

    def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> float:
        """Block until ``GET /health`` answers 200. Returns seconds since start.

        Raises ``LaunchError`` (``engine_exited`` with the engine's last log lines, or
        ``engine_start_timeout``)."""
        if self.proc is None:
            raise LaunchError("engine was never started", code="engine_not_started")
        deadline = self.started_at + timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                if self._reader is not None:
                    self._reader.join(timeout=2)
                raise LaunchError(
                    f"engine exited with status {code} before it was ready; last log lines:\n"
                    f"{self.log_tail()}", code="engine_exited", where=str(self.spec.log_path),
                    fix="read the engine log; check the model folder and the engine stack")
            if self.spec.socket_path.exists():
                try:
                    status, _ = engine_get(self.spec.socket_path, "/health", timeout=2.0)
                    if status == 200:
                        self.ready = True
                        return time.monotonic() - self.started_at
                except OSError:
                    pass
            time.sleep(poll_s)
        self.stop()
        raise LaunchError(
            f"engine not ready after {timeout_s:.0f} s; last log lines:\n{self.log_tail()}",
            code="engine_start_timeout", where=str(self.spec.log_path),
            fix="raise engine.startup_timeout_s in the policy or check the engine log")

    def signal(self, signum: int) -> None:
        """Forward a signal to the engine's whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the whole process group, SIGKILL after ``grace_s`` what is left of it
        (the leader or any EngineCore/Worker), and wait until the group is empty
        (:func:`appliance.engine.reaper.stop_group`). An engine never ready has nothing
        to finish: it gets ``STARTING_GRACE_S`` at most (vLLM still loading may not act
        on SIGTERM for 20 s and more). Returns the leader's exit status."""
        if self.proc is None:
            return None
        stop_group(self.proc, grace_s if self.ready else min(grace_s, STARTING_GRACE_S))
        if self._reader is not None:
            self._reader.join(timeout=5)
        return self.proc.returncode
