"""The vLLM engine process: hardened launch, supervision and its shared status.

Holds: :mod:`.launcher` (``EngineSpec``, the one engine argv and environment, ``Engine``),
:mod:`.supervisor` (restarts, hung-engine probe, rotated logs), :mod:`.state`
(``EngineStatus``, what the gateway reads), :mod:`.sdnotify` (systemd notify/watchdog,
``say``: a step of ``serve`` on stderr and as the unit's status), :mod:`.runs` (``serve``'s
engines: one ``ModelRun`` per model, start, crash-loop policy, the wait for a stop signal),
:mod:`.parallel` (parallel/GPU engine flags and the layouts refused before launch),
:mod:`.headless` (a cluster worker's vLLM entry), :mod:`.cluster` (``[cluster]``: node roles,
the authenticated same-model handshake, the link-watching supervisor, the nftables table),
:mod:`.stopping` (the stop signals of ``serve``/``demo``: ``Stopped``, held or raised),
:mod:`.reaper` and :mod:`.reaper_child` (child process groups started, stopped whole, and
reaped when the appliance dies without stopping them).

May import: :mod:`appliance.config`, :mod:`appliance.errors`; never the gateway, the CLI or the
spine (:mod:`appliance.serve`), which sit above it.
"""
