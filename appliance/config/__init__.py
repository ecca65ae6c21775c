"""The deployment policy: one strict pydantic model per TOML table, and the loader.

Holds: :mod:`.policy` (``Policy``, ``load_policy`` and the ``[model]``, ``[scan]``,
``[engine]``, ``[preflight]``, ``[gateway]`` tables), :mod:`.trust` (``[store]``, ``[trust]``),
:mod:`.reliability` (``[supervisor]``), :mod:`.admission` (``[admission]``,
``[admission.redis]``: keys file, limits, quotas, the shared backend, bounded waiting),
:mod:`.tls` (``[gateway.tls]``), :mod:`.keys` (the named API keys file, ``appliance keys``),
:mod:`.auth` (``[auth]``: OIDC tokens, group limits), :mod:`.audit` (``[audit]``: the audit
chain's key, checkpoints and copies), :mod:`.telemetry` (``[telemetry]``: OpenTelemetry
export),
:mod:`.cluster` (``[cluster]``: the nodes of one model across hosts), :mod:`.models`
(``[[models]]``: several models, each with its own engine).

May import: :mod:`appliance.errors`, :mod:`appliance.resources` and third-party libraries;
nothing else of the appliance (every other layer reads the policy, the policy reads no layer).
"""
