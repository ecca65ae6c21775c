"""The deployment policy: one strict pydantic model per TOML table, and the loader.

Holds: :mod:`.policy` (``Policy``, ``load_policy`` and the ``[model]``, ``[scan]``,
``[engine]``, ``[preflight]``, ``[gateway]`` tables), :mod:`.trust` (``[store]``, ``[trust]``),
:mod:`.reliability` (``[supervisor]``, ``[admission]``), :mod:`.tls` (``[gateway.tls]``),
:mod:`.keys` (the named API keys file, ``appliance keys``), :mod:`.cluster` (``[cluster]``).

May import: :mod:`appliance.errors`, :mod:`appliance.resources` and third-party libraries;
nothing else of the appliance (every other layer reads the policy, the policy reads no layer).
"""
