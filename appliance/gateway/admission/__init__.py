"""Admission control: who may start a request now, how long one waits, token quotas.

Modules::

    backend   AdmissionBackend: the one interface every backend implements, Ticket
    local     LocalAdmission (``backend = "local"``): per-key limits on the event loop
    redis     RedisAdmission (``backend = "redis"``): the same limits shared by processes
    gate      StartGate: bounded waiting (``max_queue_wait_s``) before the engine
    quotas    QuotaLedger: daily / monthly token quotas of the local backend
    registry  build_admission: which backend serves a gateway, one line per backend
    settings  AdmissionSettings / RedisSettings: the gateway's admission settings

May import: :mod:`appliance.gateway.errors`, :mod:`appliance.gateway.settings`,
:mod:`appliance.config`; never the HTTP side, the chat handler or the state.
"""
