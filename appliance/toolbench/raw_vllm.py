"""The same model on a raw vLLM engine, for comparison: **without** the appliance's guarantees.

The appliance's engine command line (``appliance.engine.launcher.engine_flags``: same model
folder, chat template, tool parser, dtype, scheduler bounds and CPU settings) without its
``HARDENING_FLAGS``, i.e. as a plain operator would start it:

- no ``--tool-strict-level parameter`` (vLLM's default ``auto``: ``tool_choice`` auto and
  non-strict tools get no grammar, required/named get the envelope only: vLLM 0.33
  ``tool_parsers/structural_tag_registry.py`` ``resolve_tool_strictness``);
- no ``--structured-outputs-config`` (backend ``auto``: on an xgrammar validation error it
  silently falls back to ``guidance``/``outlines``, ``sampling_params.py``);
- no ``--disable-fastapi-docs`` / ``--fingerprint-mode none`` (vLLM's defaults);
- no gateway: the answers reach the client unchecked; listening on 127.0.0.1 TCP with an
  API key (``VLLM_API_KEY`` in the environment, never on the command line).

``RawVLLM(model_dir, served_name, engine, runtime_dir)`` is an ``appliance.engine.launcher.Engine``
(process group, log pump, stop) with this command line; ``base_url`` is ``http://127.0.0.1:
<port>/v1``. ``spawned(kind, policy)`` starts either target for ``appliance bench tools
--spawn`` and yields ``(base_url, api_key, model)``.
"""

from __future__ import annotations

import contextlib
import http.client
import secrets
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from appliance.config.policy import EnginePolicy
from appliance.engine.launcher import (
    HARDENING_FLAGS,
    Engine,
    EngineSpec,
    Flag,
    build_env,
    command_line,
    engine_flags,
)
from appliance.errors import LaunchError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def raw_argv(spec: EngineSpec, port: int) -> list[str]:
    """The appliance engine's command line (:func:`~appliance.engine.launcher.engine_flags`)
    without :data:`~appliance.engine.launcher.HARDENING_FLAGS`, listening on 127.0.0.1:port
    instead of the Unix socket."""
    flags: list[Flag] = []
    for flag, value in engine_flags(spec):
        if flag == "--uds":
            flags += [("--host", "127.0.0.1"), ("--port", str(port))]
        elif flag not in HARDENING_FLAGS:
            flags.append((flag, value))
    return command_line(flags)


class RawVLLM(Engine):
    def __init__(self, model_dir: Path, served_name: str, engine: EnginePolicy,
                 runtime_dir: Path, port: int | None = None) -> None:
        super().__init__(EngineSpec(model_dir=model_dir, served_name=served_name, engine=engine,
                                    runtime_dir=runtime_dir))
        self.port = port or free_port()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        self.spec.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        import threading

        from appliance.engine.reaper import spawn_group
        from appliance.engine.stopping import SIGNALS

        with SIGNALS.critical():  # own session, guarded: gone with this process
            self.proc = spawn_group(
                raw_argv(self.spec, self.port), env=build_env(self.spec),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=self.spec.runtime_dir)
            self._reader = threading.Thread(target=self._pump, daemon=True)
            self._reader.start()

    def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> float:
        if self.proc is None:
            raise LaunchError("engine was never started", code="engine_not_started")
        deadline = self.started_at + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LaunchError(f"raw vLLM exited with status {self.proc.returncode}; last "
                                  f"log lines:\n{self.log_tail()}", code="engine_exited",
                                  where=str(self.spec.log_path), fix="read the engine log")
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    self.ready = True
                    return time.monotonic() - self.started_at
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(poll_s)
        self.stop()
        raise LaunchError(f"raw vLLM not ready after {timeout_s:.0f} s",
                          code="engine_start_timeout", where=str(self.spec.log_path),
                          fix="raise engine.startup_timeout_s or read the engine log")


@contextlib.contextmanager
def spawned(kind: str, policy_path: Path) -> Iterator[tuple[str, str, str]]:
    """Start ``appliance`` (the full spine on the built-in model, as ``appliance demo``) or
    ``raw-vllm`` (this module) on loopback; yield (base_url, api_key, model); stop it after."""
    from appliance.builtin.model import prepare
    from appliance.config.policy import load_policy
    from appliance.serve import say

    model = prepare()
    policy = load_policy(policy_path)
    if kind in ("raw-vllm", "raw-vllm-unconstrained"):  # the mode is the client's (cli)
        with tempfile.TemporaryDirectory(prefix="raw-vllm-") as tmp:
            raw = RawVLLM(model.model_dir, policy.model.served_name, policy.engine, Path(tmp))
            raw.start()
            try:
                ready = raw.wait_ready(policy.engine.startup_timeout_s)
                say(f"raw vLLM (no --tool-strict-level, backend auto) ready in {ready:.1f} s "
                    f"at {raw.base_url}")
                yield raw.base_url, raw.spec.api_key, policy.model.served_name
            finally:
                raw.stop()
        return
    from appliance.serve import Appliance

    api_key = secrets.token_urlsafe(32)
    app = Appliance(policy=policy, model_dir=model.model_dir, public_key=model.public_key,
                    api_keys=[api_key], host="127.0.0.1", port=0)
    app.start()
    try:
        yield f"http://127.0.0.1:{app.port}/v1", api_key, policy.model.served_name
    finally:
        app.stop()
