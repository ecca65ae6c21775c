"""What the gateway reports: Prometheus metrics, the audit log, OpenTelemetry traces.

Modules::

    metrics           RequestInfo, Metrics (``/metrics``) and AuditLog (JSON lines)
    genai_metrics     GenAI series (OpenTelemetry GenAI semantic conventions)
    advisory_metrics  the advisory list in force, on ``/metrics``
    tracing           OpenTelemetry traces over OTLP/HTTP (the SDK, only when enabled)
    spans             the calls handlers make on spans, without importing the SDK

May import: :mod:`appliance.audit`, :mod:`appliance.config`, :mod:`appliance.engine`
(``EngineStatus``); nothing else of the gateway.
"""
