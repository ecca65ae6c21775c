"""Small raw-ASGI helpers: JSON responses, error responses, bounded body reading."""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from .errors import GatewayError

INFO_KEY = "appliance.gateway.info"
JSON = b"application/json"


async def send_json(send: Send, status: int, body: bytes, *,
                    headers: tuple[tuple[bytes, bytes], ...] = (),
                    content_type: bytes = JSON) -> None:
    """Send a complete response with ``Content-Length``."""
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(send: Send, error: GatewayError) -> None:
    """Send ``error`` as an OpenAI-shaped JSON error response."""
    await send_json(send, error.status, error.body(), headers=error.headers)


def too_large(limit: int) -> GatewayError:
    """413 ``request_too_large``; the connection is closed after the answer."""
    return GatewayError.of("request_too_large", f"request body exceeds {limit} bytes",
                           headers=((b"connection", b"close"),))


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """Read the request body, never buffering more than ``limit`` bytes.

    Returns ``None`` if the client disconnected. Raises :class:`GatewayError` 413
    ``request_too_large`` (declared ``Content-Length`` over the limit is refused before
    reading) or 400 ``invalid_request`` for a malformed ``Content-Length``.
    """
    for name, value in scope["headers"]:
        if name == b"content-length":
            if not value.isdigit() or len(value) > 18:
                raise GatewayError.of("invalid_request", "malformed Content-Length")
            if int(value) > limit:
                raise too_large(limit)
    message = await receive()
    if message["type"] != "http.request":
        return None
    body: bytes = message.get("body", b"")
    if len(body) > limit:
        raise too_large(limit)
    if not message.get("more_body", False):
        return body
    chunks = [body]
    size = len(body)
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
