"""Admission settings of the gateway: backend (local or Redis), bounded waiting, quotas.

Part of :class:`~appliance.gateway.settings.GatewaySettings` (``settings.admission``); built
by ``appliance serve`` from the policy's ``[admission]`` table
(:func:`appliance.runtime.gateway_settings`). Every key is declared once, in
:mod:`appliance.config.admission` (:class:`~appliance.config.admission.AdmissionBackend`
with its bounds, defaults and the one check that ``backend = "redis"`` has ``redis``); these
classes only say which Redis table they hold. Times are seconds.

* ``backend``: ``"local"`` (state on the gateway's event loop, one process) or ``"redis"``
  (per-key limits, the global pending bound and quotas held in Redis, exact across gateway
  processes and hosts: :mod:`appliance.gateway.admission.redis`).
* ``max_running``: requests the gateway lets into the engine at once (per gateway process:
  the policy's value divided by ``[gateway] workers``); ``None`` = no start gate.
* ``max_queue_wait_s``: a request that cannot start within this long is answered 503
  ``overloaded`` (:mod:`appliance.gateway.admission.gate`).
* ``adaptive``: refuse at once a request that, at the measured service rate, would not
  start within ``max_queue_wait_s`` anyway (the pending bound follows the rate).
* ``quota_state_file``: where the local backend keeps daily / monthly token use
  (:mod:`appliance.gateway.admission.quotas`); ``None`` = in memory only (tests).
"""

from __future__ import annotations

from pydantic import SecretStr

from appliance.config.admission import AdmissionBackend, RedisConnection


class RedisSettings(RedisConnection):
    """Where the shared admission state lives (:class:`RedisConnection`: url, TLS files,
    prefix, timeouts, checked there) and the password (read from a file by the policy
    layer; never in the url)."""

    password: SecretStr | None = None


class AdmissionSettings(AdmissionBackend[RedisSettings]):
    """See the module docstring."""
