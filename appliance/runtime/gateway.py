"""The gateway's runtime settings from the policy: :func:`gateway_settings`, the one bridge.

``gateway_settings(policy, specs=..., api_keys=..., quirks=..., advisory_list=...)`` ->
:class:`~appliance.gateway.GatewaySettings` for one gateway process of ``appliance serve``:

* ``[gateway]`` (:class:`~appliance.config.gateway.GatewayLimits`), ``[admission]``'s
  ``keys_file`` / ``max_pending`` / ``default_limits``
  (:class:`~appliance.config.admission.KeyAdmission`) and ``[supervisor] drain_timeout_s``
  (:class:`~appliance.config.reliability.Drain`): the settings inherit these classes, and
  every field they declare is handed over by name (:func:`_declared`), so a key added to one
  of them reaches the gateway with no edit here; ``keys_file`` gets
  ``${CREDENTIALS_DIRECTORY}`` expanded.
* ``[admission]``'s backend keys (:class:`~appliance.config.admission.AdmissionBackend`) ->
  ``settings.admission`` (:func:`admission_settings`): ``max_queue_wait_s`` / ``adaptive``
  as they are, ``max_running`` (default: the engines' ``max_num_seqs`` summed) split evenly
  over ``[gateway] workers`` (at least 1 each), ``quota_state_file`` resolved (local backend
  only; default ``$STATE_DIRECTORY/quotas.json``), ``[admission.redis]`` with its files
  resolved and the password read from ``password_file``.
* ``[auth]``, ``[audit]``, ``[telemetry]``: the loaded tables themselves.
* ``[preflight] advisories_max_age_days`` -> ``advisory_list.max_age_days``
  (:func:`advisory_list_info`); the engine quirks in force (``quirks``,
  :func:`appliance.preflight.engine_quirks.engine_quirk_settings`).
* The engines (``specs``): one routing-table row each (served name, Unix socket, the
  engine's API key), the first the default model; ``vocab_size`` the smallest of their
  ``config.json`` vocabularies (``None`` unless every one is known: ``logit_bias`` refused).

Which policy key lands where (or why none does) is one table,
``tests/runtime/test_policy_to_runtime.py``. Errors: ``PolicyError`` naming
``admission.<key>`` for a credential or password file it cannot read;
``pydantic.ValidationError`` if the settings refuse a value (the checks live in the classes
that declare the fields, once).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from appliance.config.admission import (
    AdmissionPolicy,
    KeyAdmission,
    QueueWait,
    RedisConnection,
    RedisPolicy,
    credential_path,
    default_state_file,
)
from appliance.config.gateway import GatewayLimits
from appliance.config.policy import Policy
from appliance.config.reliability import Drain
from appliance.engine.launcher import EngineSpec
from appliance.errors import PolicyError
from appliance.gateway.admission.settings import AdmissionSettings, RedisSettings
from appliance.gateway.models.upstream_config import UpstreamModel
from appliance.gateway.settings import GatewaySettings, hash_api_key
from appliance.gateway.telemetry.advisory_metrics import AdvisoryListInfo
from appliance.preflight.engine_quirks import EngineQuirks
from appliance.preflight.feed import ListInForce


def _declared(table: BaseModel, declared_by: type[BaseModel]) -> dict[str, Any]:
    """``table``'s values of the fields ``declared_by`` declares (a class the policy table
    and the runtime settings both inherit: same names, bounds and defaults). The only
    untyped step, and local: each value is read from an instance of the class that declares
    its field, so it has that field's type by construction; the names are the class's, so
    a key added there needs no edit here."""
    return {name: getattr(table, name) for name in declared_by.model_fields}


def _redis_settings(pol: RedisPolicy, base: Path | None) -> RedisSettings:
    """``[admission.redis]`` with its TLS files resolved and the password read."""
    password = None
    secret = credential_path(base, pol.password_file, "redis.password_file")
    if secret is not None:
        try:
            password = secret.read_text("utf-8").strip()
        except OSError as exc:
            raise PolicyError(f"cannot read the Redis password file: {exc.strerror}",
                              where=f"admission.redis.password_file: {secret}",
                              fix="point password_file at a readable file") from None
    files = {name: credential_path(base, getattr(pol, name), f"redis.{name}")
             for name in ("ca_file", "cert_file", "key_file")}
    return RedisSettings(**_declared(pol.model_copy(update=files), RedisConnection),
                         password=None if password is None else SecretStr(password))


def admission_settings(adm: AdmissionPolicy, *, base: Path | None, workers: int,
                       max_num_seqs: int) -> AdmissionSettings:
    """``settings.admission`` for the ``[admission]`` table ``adm`` (relative paths against
    ``base``, the policy's folder) in one of ``workers`` gateway processes; ``max_num_seqs``
    is the engines' (the default of ``max_running``). Raises ``PolicyError`` naming the
    file it cannot read."""
    running = adm.max_running if adm.max_running is not None else max_num_seqs
    state_file = None
    if adm.backend == "local":
        state_file = credential_path(base, adm.quota_state_file, "quota_state_file") \
            or default_state_file()
    return AdmissionSettings(
        **_declared(adm, QueueWait), backend=adm.backend,
        redis=None if adm.redis is None else _redis_settings(adm.redis, base),
        max_running=max(1, running // workers), quota_state_file=state_file)


def advisory_list_info(policy: Policy, in_force: ListInForce) -> AdvisoryListInfo:
    """The advisory list in force and the policy's staleness threshold, for ``/metrics``."""
    return AdvisoryListInfo(timestamp=in_force.advisories.date.timestamp(),
                            serial=in_force.advisories.serial,
                            max_age_days=policy.preflight.advisories_max_age_days)


def vocab_size(model_dir: Path) -> int | None:
    """``vocab_size`` from the (verified, staged) ``config.json``, for logit_bias bounds."""
    try:
        value = json.loads((model_dir / "config.json").read_text("utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def gateway_settings(policy: Policy, *, specs: Sequence[EngineSpec], api_keys: Sequence[str],
                     quirks: EngineQuirks, advisory_list: AdvisoryListInfo | None
                     ) -> GatewaySettings:
    """The settings of one gateway process in front of the engines of ``specs`` (the first:
    the default model) for ``policy`` (see the module docstring). ``api_keys``: plaintext
    keys (only their SHA-256 is kept). Raises ``PolicyError``, ``ValueError`` (a bad API
    key, :func:`~appliance.gateway.settings.hash_api_key`) or ``pydantic.ValidationError``."""
    adm = policy.admission
    base = policy.source and policy.source.parent
    keys_file = credential_path(None, adm.keys_file, "keys_file")
    vocab = [vocab_size(spec.model_dir) for spec in specs]
    known = [size for size in vocab if size is not None]
    return GatewaySettings(
        models=tuple(UpstreamModel(name=spec.served_name, upstream_uds=spec.socket_path,
                                   upstream_api_key=SecretStr(spec.api_key)) for spec in specs),
        api_key_sha256=tuple(hash_api_key(key) for key in api_keys),
        **_declared(policy.gateway, GatewayLimits),
        **_declared(adm.model_copy(update={"keys_file": keys_file}), KeyAdmission),
        **_declared(policy.supervisor, Drain),
        admission=admission_settings(adm, base=base, workers=policy.gateway.workers,
                                     max_num_seqs=sum(s.engine.max_num_seqs for s in specs)),
        auth=policy.auth, audit=policy.audit, telemetry=policy.telemetry,
        advisory_list=advisory_list,
        engine_quirks=quirks["engine_quirks"], engine_name=quirks["engine_name"],
        # logit_bias ids: below every model's vocabulary (none known: refused)
        tools_enabled=True, vocab_size=min(known) if len(known) == len(vocab) else None)
