"""The gateway's shared state: one object per app, built from :class:`GatewaySettings`.

Everything a route handler needs lives here — settings, key store (:mod:`.auth.keystore`),
schema cache (:mod:`.schema.subset`), metrics and audit log (:mod:`.telemetry.metrics`),
admission (:mod:`.admission.registry`: backend and start gate), engine status
(:mod:`appliance.engine.state`) and the shared engine session (:mod:`.models.engine_client`) —
so handlers import this module, never the app (no import cycle: :mod:`.http.app` builds the
state and the route table, handlers only receive it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

import aiohttp

from appliance.engine.state import EngineStatus

from .admission.registry import build_admission
from .auth.keystore import KeyStore
from .auth.oidc import OidcVerifier
from .auth.source_address import SourcePolicy
from .models.table import Upstream, upstreams
from .schema.subset import SchemaCache
from .settings import GatewaySettings
from .telemetry.advisory_metrics import AdvisoryCollector
from .telemetry.metrics import AuditLog, Metrics

if TYPE_CHECKING:
    from .telemetry.tracing import Tracing

LOG = logging.getLogger("appliance.gateway")


class GatewayState:
    """Per-app state: settings, key digests, schema cache, metrics, audit, engine session."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.sources = SourcePolicy(settings)  # source-address allow-lists
        self.keys = KeyStore(settings.api_key_sha256, settings.default_limits,
                             settings.keys_file)
        self.oidc = OidcVerifier(settings.auth) \
            if settings.auth is not None and settings.auth.oidc is not None else None
        self.cache = SchemaCache(max_depth=settings.max_schema_depth,
                                 max_nodes=settings.max_schema_nodes)
        telemetry = settings.telemetry
        self.metrics = Metrics(telemetry is not None and telemetry.metrics_by_key,
                               telemetry.metrics_max_keys if telemetry is not None else 100)
        self.audit = AuditLog(settings.audit_log, settings.audit) if settings.audit_log \
            else None
        self.tracing: Tracing | None = None
        if settings.telemetry is not None and settings.telemetry.enabled:
            from .telemetry.tracing import Tracing  # the SDK is imported only when tracing is on

            self.tracing = Tracing(settings.telemetry, settings.default_model.name)
            self.metrics.genai.attach_otlp(settings.telemetry)
        self.loop: asyncio.AbstractEventLoop | None = None
        # The routing table (served name -> engine; .model_table), default model first.
        self.upstreams: dict[str, Upstream] = upstreams(settings)
        self.default = self.upstreams[settings.default_model.name]
        self._tick: asyncio.TimerHandle | None = None
        self.metrics.watch_engine(lambda: self.engine)
        self.metrics.watch_models(lambda: {n: u.engine for n, u in self.upstreams.items()})
        if settings.advisory_list is not None:
            self.metrics.registry.register(AdvisoryCollector(settings.advisory_list))
        self.admission, self.gate = build_admission(settings, self.metrics.registry)
        created = int(time.time())
        self.model_bodies = {name: json.dumps({
            "id": name, "object": "model", "created": created, "owned_by": "appliance"},
        ).encode() for name in self.upstreams}

    @property
    def engine(self) -> EngineStatus:
        """The default model's engine status (the only one with one model)."""
        return self.default.engine

    @property
    def session(self) -> aiohttp.ClientSession:
        """The default model's engine session (created lazily if the lifespan did not
        run)."""
        return self.default.session

    def serving(self) -> bool:
        """True while at least one model's engine is ready (else engine routes are refused
        before the body is read)."""
        return any(up.engine.ready for up in self.upstreams.values())

    def models_body(self, names: list[str]) -> bytes:
        """The OpenAI model list of ``names``."""
        return b'{"object": "list", "data": [' + b", ".join(
            self.model_bodies[n] for n in names) + b"]}"

    async def start(self) -> None:
        """Open the engine sessions (lifespan startup); with a signed audit log, start its
        idle checkpoints."""
        self.loop = asyncio.get_running_loop()
        for upstream in self.upstreams.values():
            _ = upstream.session
        await self.admission.start()
        if self.audit is not None and self.audit.chain.key is not None:
            self._checkpoint_tick()

    def _checkpoint_tick(self) -> None:
        """Sign what the audit log holds every ``checkpoint_interval_s`` even when no new
        record arrives (else the last records stay unsigned until traffic resumes); runs on
        the gateway loop, the log's one writer."""
        if self.audit is None or self.loop is None:
            return
        chain = self.audit.chain
        chain.checkpoint()
        self._tick = self.loop.call_later(chain.interval_s, self._checkpoint_tick)

    def attach_engine(self, status: EngineStatus, model: str | None = None) -> None:
        """Follow the supervised engine of ``model`` (default: the default model) from any
        thread, after start: its deaths turn that model's readiness and admission off;
        after each restart its engine session is renewed (no pooled connection to the dead
        engine is reused)."""
        if self.loop is None:
            raise RuntimeError("attach_engine before the gateway started")
        self.upstreams[model or self.settings.default_model.name].attach(status, self.loop)

    def reload_threadsafe(self) -> None:
        """Schedule :meth:`reload` on the gateway loop (signal handlers, other threads)."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.reload)

    def reload(self) -> None:
        """SIGHUP: re-read the keys file and reopen the audit log (after logrotate);
        connections are kept."""
        self.keys.reload()
        if self.oidc is not None:
            self.oidc.reload()
        if self.audit is not None:
            self.audit.reopen()
        LOG.warning("reloaded: keys file re-read, audit log reopened")

    async def close(self) -> None:
        """Close the engine session and the audit log (lifespan shutdown)."""
        if self.oidc is not None:
            self.oidc.close()
        for upstream in self.upstreams.values():
            await upstream.close()
        if self._tick is not None:
            self._tick.cancel()
        await self.admission.close()
        if self.audit is not None:
            self.audit.close()
        if self.tracing is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.tracing.shutdown)
        if self.metrics.genai.otlp is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, self.metrics.genai.otlp.shutdown)
