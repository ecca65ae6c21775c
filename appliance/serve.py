"""The serving spine: verify -> scan -> preflight -> launch vLLM -> gateway.

Every step runs before the engine starts and any refusal stops ``serve`` with a clear
``ApplianceError``. The engine loads only the verified, read-only staged copy of the model
(``signing.verify_and_stage``), and the scan is ``scanner.api.scan_paths`` — the same code
path as ``appliance scan``.
"""

from __future__ import annotations

import gc
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance import sdnotify, signing
from appliance.errors import ApplianceError, ScanRefused, SigningError
from appliance.launcher import Engine, EngineSpec, check_tool_config
from appliance.policy import Policy
from appliance.preflight import require_preflight


def say(message: str) -> None:
    print(f"appliance: {message}", file=sys.stderr, flush=True)
    sdnotify.status(message)  # systemd (Type=notify): `systemctl status` shows the step


def scan_model(model_dir: Path, deep: bool) -> None:
    """Run the pre-deploy scan; raise ``ScanRefused`` unless the verdict is clean."""
    from scanner._context import Limits
    from scanner.api import scan_paths

    report = scan_paths([model_dir], limits=Limits(deep=deep))
    result = report.targets[0]
    verdict = result.verdict
    if verdict is None or verdict.label != "clean":
        lines = [f"  {f.rule_id} {f.path}: {f.message}" for f in result.findings[:20]]
        label = verdict.label if verdict is not None else "no verdict"
        raise ScanRefused(f"scan verdict is {label}:\n" + "\n".join(lines),
                          where=str(model_dir),
                          fix="run `appliance scan` on the model folder and remove what it flags")


def _check_api_keys(keys: list[str]) -> None:
    """At least one key, each acceptable to the gateway (16-512 printable ASCII chars)."""
    from appliance.gateway import hash_api_key

    if not keys:
        raise ApplianceError("no API key configured", code="no_api_key",
                             fix="pass --api-key-file with at least one key")
    for number, key in enumerate(keys, 1):
        try:
            hash_api_key(key)
        except ValueError as exc:
            raise ApplianceError(f"API key #{number} rejected: {exc}", code="invalid_api_key",
                                 fix="use random keys, e.g. `openssl rand -hex 32`") from None


def _vocab_size(model_dir: Path) -> int | None:
    """``vocab_size`` from the (verified, staged) ``config.json``, for logit_bias bounds."""
    try:
        value = json.loads((model_dir / "config.json").read_text("utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


@dataclass
class Timings:
    verify_s: float = 0.0
    scan_s: float = 0.0
    preflight_s: float = 0.0
    engine_ready_s: float = 0.0


@dataclass
class Appliance:
    """One served model. ``start()`` runs the spine; ``stop()`` tears it down."""

    policy: Policy
    model_dir: Path
    public_key: Path
    api_keys: list[str]
    host: str = "127.0.0.1"
    port: int = 8000
    timings: Timings = field(default_factory=Timings)
    engine: Engine | None = None
    gateway: Any = None
    runtime_dir: Path | None = None
    watchdog: sdnotify.Watchdog | None = None

    def check(self) -> Path:
        """Verify, stage, scan and preflight. Returns the staged model folder."""
        _check_api_keys(self.api_keys)
        check_tool_config(self.policy.engine)
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="appliance-"))
        staged = self.runtime_dir / "model"
        t0 = time.monotonic()
        manifest = signing.verify_and_stage(self.model_dir, self.public_key, staged)
        signing.require_servable(manifest)
        if self.policy.engine.chat_template not in manifest:
            raise SigningError(f"chat template {self.policy.engine.chat_template!r} is not "
                               "in the signed manifest", code="chat_template_unsigned",
                               where=str(self.model_dir),
                               fix="add the vetted chat template to the folder and re-sign")
        self.timings.verify_s = time.monotonic() - t0
        say(f"verify: ok ({len(manifest)} signed files, {self.timings.verify_s:.2f} s)")
        t0 = time.monotonic()
        scan_model(staged, self.policy.scan.deep)
        self.timings.scan_s = time.monotonic() - t0
        say(f"scan: clean ({self.timings.scan_s:.2f} s)")
        t0 = time.monotonic()
        require_preflight(self.policy.preflight.advisories, self.policy.preflight.packages)
        self.timings.preflight_s = time.monotonic() - t0
        say("preflight: ok")
        return staged

    def start(self) -> None:
        """Run the whole spine; on any failure everything started is stopped again."""
        self.watchdog = sdnotify.Watchdog(self._gateway_alive).start()
        try:
            staged = self.check()
            if self.runtime_dir is None:  # pragma: no cover - set by check()
                raise ApplianceError("runtime directory missing")
            spec = EngineSpec(model_dir=staged, served_name=self.policy.model.served_name,
                              engine=self.policy.engine, runtime_dir=self.runtime_dir / "run")
            self.engine = Engine(spec)
            say("engine: starting vLLM")
            self.engine.start()
            self.timings.engine_ready_s = self.engine.wait_ready(
                self.policy.engine.startup_timeout_s)
            say(f"engine: ready after {self.timings.engine_ready_s:.1f} s")
            self.gateway = self._start_gateway(spec)
            gc.freeze()  # start-up objects out of the collector's way (p99, bench/README.md)
            say(f"gateway: listening on http://{self.host}:{self.port}")
            sdnotify.ready(self.host, self.port)  # READY=1 once /health/ready answers 200
        except BaseException:
            self.stop()
            raise

    def _start_gateway(self, spec: EngineSpec) -> Any:
        from appliance.gateway import GatewaySettings, start_in_thread

        gw = self.policy.gateway
        settings = GatewaySettings.model_validate({
            "upstream_uds": spec.socket_path, "upstream_api_key": spec.api_key,
            "served_model_name": self.policy.model.served_name, "api_keys": self.api_keys,
            "max_body_bytes": gw.max_body_bytes, "max_messages": gw.max_messages,
            "max_tokens_cap": gw.max_tokens_cap, "request_timeout_s": gw.request_timeout_s,
            "tools_enabled": True, "audit_log": gw.audit_log,
            "vocab_size": _vocab_size(spec.model_dir),
        })
        handle = start_in_thread(settings, self.host, self.port)
        self.port = handle.port
        return handle

    def wait(self) -> int:
        """Serve until SIGTERM/SIGINT or until the engine dies. Returns an exit status."""
        stop = threading.Event()
        received: list[int] = []

        def _on_signal(signum: int, _frame: object) -> None:
            received.append(signum)
            stop.set()

        old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not stop.wait(0.5):
                if self.engine is not None and self.engine.proc is not None \
                        and self.engine.proc.poll() is not None:
                    say(f"engine exited unexpectedly; last log lines:\n{self.engine.log_tail()}")
                    return 1
            say(f"received signal {received[0]}, shutting down")
            return 0
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
            self.stop()

    def _gateway_alive(self) -> bool:
        """Watchdog check: true while starting, then while the gateway answers /health/live."""
        return self.gateway is None or sdnotify.probe(
            sdnotify.health_url(self.host, self.port, "live"))

    def stop(self) -> None:
        if self.gateway is not None or self.engine is not None:
            sdnotify.stopping()  # STOPPING=1: the drain begins
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        if self.engine is not None:
            self.engine.stop()
            self.engine = None
        if self.runtime_dir is not None:
            signing.discard_stage(self.runtime_dir / "model")
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            self.runtime_dir = None
