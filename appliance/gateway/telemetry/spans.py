"""The calls request handlers make on a trace's spans (:mod:`.tracing`), without importing
the OpenTelemetry SDK: with tracing off (the default) the gateway never imports it; every
function here is a no-op for a ``None`` span. ``span``: an ``opentelemetry.trace.Span``;
``info``: the request's ``observability.RequestInfo``."""

from __future__ import annotations

from typing import Any


def usage(info: Any) -> dict[str, int]:
    """``gen_ai.usage.input_tokens`` / ``output_tokens`` when the engine reported them."""
    found: dict[str, int] = {}
    if info.input_tokens is not None:
        found["gen_ai.usage.input_tokens"] = info.input_tokens
    if info.output_tokens is not None:
        found["gen_ai.usage.output_tokens"] = info.output_tokens
    return found


def end(span: Any, error: str | None = None) -> None:
    """End ``span`` (no-op for ``None`` or an ended span); ``error``: the refusal code
    (``error.type``, status ERROR)."""
    if span is None or not span.is_recording():
        return
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def end_engine(span: Any, info: Any) -> None:
    """End the engine span with the usage and outcome in ``info``."""
    if span is None or not span.is_recording():
        return
    span.set_attributes({"gen_ai.response.model": info.model or "", **usage(info)})
    end(span, info.error)
