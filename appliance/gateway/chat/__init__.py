"""``POST /v1/chat/completions``: the handler and the checks on both sides of the engine.

Modules::

    handler          ChatHandler: read, check, forward, validate, relay; cancel on disconnect
    request_checks   check_chat_request(raw, settings, cache) -> ChatRequest (allow-list,
                     bounds, schemas); the forwarded body is rebuilt from checked values
    message_fields   clean_message: per-role message fields forwarded / dropped / refused
    combinations     field combinations the engine cannot honour (``stop`` + grammar)
    response_checks  check_completion: tool calls and structured output of an answer
    regenerate       Regenerator: a refused non-streaming answer asked again, bounded
                     (``[gateway] regenerate_invalid``, time budget, the caller's quotas)
    sse              StreamRelay: the same checks on a stream, call by call
    bounds           ranges and limits of the scalar request fields (checks and OpenAPI)

``/v1/responses`` (:mod:`appliance.gateway.responses`) is mapped onto this handler.

Field bounds (:mod:`.bounds`) are declared once for the checks and the OpenAPI document.
May import: the rest of :mod:`appliance.gateway` below the app (settings, errors, schema,
upstream, state); never :mod:`appliance.gateway.http.app` or :mod:`appliance.gateway.http.openapi`.
"""

from .handler import ChatHandler
from .request_checks import ChatRequest, check_chat_request
from .response_checks import check_completion
from .sse import StreamRelay

__all__ = ["ChatHandler", "ChatRequest", "StreamRelay", "check_chat_request",
           "check_completion"]
