"""The vLLM engine process: hardened launch, supervision and its shared status.

Holds: :mod:`.launcher` (``EngineSpec``, the one engine argv and environment, ``Engine``),
:mod:`.supervisor` (restarts, hung-engine probe, rotated logs), :mod:`.state`
(``EngineStatus``, what the gateway reads), :mod:`.sdnotify` (systemd notify/watchdog).

May import: :mod:`appliance.config`, :mod:`appliance.errors`; never the gateway, the CLI or the
spine (:mod:`appliance.serve`), which sit above it.
"""
