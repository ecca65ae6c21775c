"""Which admission backend serves a gateway: one registry line per backend.

:func:`build_admission` returns the :class:`~.backend.AdmissionBackend` named by
``settings.admission.backend`` (``local``: :class:`~.local.LocalAdmission`; ``redis``:
:class:`~.redis.RedisAdmission`, imported only when chosen) and the start gate
(:class:`~.gate.StartGate`) in front of the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from prometheus_client import CollectorRegistry

from ..settings import GatewaySettings
from .backend import AdmissionBackend
from .gate import StartGate
from .local import LocalAdmission
from .settings import RedisSettings


def _local(settings: GatewaySettings, registry: CollectorRegistry) -> AdmissionBackend:
    return LocalAdmission(settings.max_pending, registry,
                          settings.admission.quota_state_file)


def _redis(settings: GatewaySettings, registry: CollectorRegistry) -> AdmissionBackend:
    from .redis import RedisAdmission

    # backend = "redis" has redis: AdmissionBackend's check (appliance.config.admission)
    return RedisAdmission(settings.max_pending, registry,
                          cast(RedisSettings, settings.admission.redis))


BACKENDS: dict[str, Callable[[GatewaySettings, CollectorRegistry], AdmissionBackend]] = {
    "local": _local,
    "redis": _redis,
}


def build_admission(settings: GatewaySettings, registry: CollectorRegistry
                    ) -> tuple[AdmissionBackend, StartGate]:
    """The backend and the start gate for ``settings`` (metrics in ``registry``)."""
    backend = BACKENDS[settings.admission.backend](settings, registry)
    gate = StartGate(settings.admission.max_running, settings.admission.max_queue_wait_s,
                     settings.admission.adaptive, backend.metrics, registry)
    return backend, gate
