"""The policy read into runtime settings, once: the typed bridge from ``appliance.config``
(the policy's tables) to the settings of the running parts.

Why a package of its own, beside ``config/``: the bridge must import both the policy's
tables (``config``) and the settings it builds (``gateway``'s
:class:`~appliance.gateway.GatewaySettings`), and ``gateway`` imports ``config``; so it sits
one layer above ``gateway`` (``serve > runtime > gateway`` in the import-linter contracts),
where ``config`` could not.

Map::

    gateway     gateway_settings(policy, specs=..., ...) -> GatewaySettings: every policy
                key the gateway reads, with the values resolved at serve time (credential
                files read, paths expanded, ``max_running`` split per gateway process);
                admission_settings(...) -> AdmissionSettings, its ``[admission]`` part;
                advisory_list_info(policy, in_force) -> AdvisoryListInfo (``/metrics``)

Rules kept here: every shared key is declared once, in the ``config`` class the runtime
settings inherit (nothing copied); every cross-field rule is checked once, by the class that
declares its fields; no ``dict[str, Any]`` crosses a module on the way.
"""

from appliance.runtime.gateway import admission_settings, advisory_list_info, gateway_settings

__all__ = ["admission_settings", "advisory_list_info", "gateway_settings"]
