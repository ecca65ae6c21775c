"""The one shared aiohttp client session to the engine, and upstream error mapping.

aiohttp rather than httpx: at 64 concurrent requests httpx 0.28's connection pool costs
1.9-8 ms of CPU per request (encode/httpx#3215: every pool pass polls each idle
connection; pool rewrite encode/httpcore#1035), aiohttp ~0.3 ms, measured side by side in
front of a fake engine on a 2-core host. The pool is raised to ``upstream_pool_limit`` connections,
idle connections expire before the engine's 5 s keep-alive (no reuse/close race), the
total timeout is ``request_timeout_s`` (no hidden 5 s read timeout; public bug
upstream-read-timeout), ``trust_env`` is off (no proxy from the environment), and cookies
are never kept (``DummyCookieJar``): the session is shared by every client, so a cookie
the engine (or anything between) set in one user's answer would otherwise ride along on
the next user's request.

Fixed request headers: ``Accept-Encoding: identity`` (the gateway never decompresses, so
it must not invite the ``gzip, deflate`` aiohttp asks for by default: a compressed answer
would only fail its checks) and ``User-Agent: appliance-gateway`` (no client library
version sent). Both are session headers rather than ``skip_auto_headers``, which makes
aiohttp rebuild a header set on every request.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from ..errors import GatewayError
from ..settings import GatewaySettings
from .upstream_config import UpstreamModel


def make_session(settings: GatewaySettings,
                 model: UpstreamModel | None = None) -> aiohttp.ClientSession:
    """Create the session to ``model``'s engine (default: the first row of
    ``settings.models``); call inside the running event loop."""
    model = model or settings.models[0]
    connector: aiohttp.BaseConnector
    if model.upstream_uds is not None:
        connector = aiohttp.UnixConnector(
            path=str(model.upstream_uds), limit=settings.upstream_pool_limit,
            keepalive_timeout=settings.upstream_keepalive_s,
        )
    else:
        connector = aiohttp.TCPConnector(
            limit=settings.upstream_pool_limit, limit_per_host=0,
            keepalive_timeout=settings.upstream_keepalive_s,
        )
    timeout = aiohttp.ClientTimeout(
        total=settings.request_timeout_s, connect=settings.connect_timeout_s,
        sock_read=settings.upstream_read_timeout_s,
    )
    headers = {"Accept-Encoding": "identity", "User-Agent": "appliance-gateway"}
    if model.upstream_api_key is not None:
        headers["Authorization"] = f"Bearer {model.upstream_api_key.get_secret_value()}"
    return aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=headers, auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False, raise_for_status=False,
    )


def transport_error(exc: BaseException) -> GatewayError:
    """Map an aiohttp / timeout exception to 504 ``upstream_timeout`` or 502."""
    if isinstance(exc, TimeoutError):
        return GatewayError.of("upstream_timeout", "the engine did not answer in time "
                               f"({type(exc).__name__})")
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionError):
        return GatewayError.of("upstream_unavailable", "the engine is not reachable")
    return GatewayError.of("upstream_error", f"the engine connection failed "
                           f"({type(exc).__name__})")


def status_error(status: int, raw: bytes) -> GatewayError:
    """Map a non-200 engine answer. 4xx (but 401/403) keep their status with the engine's
    message (truncated); auth failures and 5xx become 502 without engine details."""
    message = ""
    try:
        obj: Any = json.loads(raw)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict):
            message = str(err.get("message", ""))
        elif isinstance(obj, dict):
            message = str(obj.get("message") or obj.get("detail") or "")
    except (ValueError, RecursionError):
        message = ""
    if status in (401, 403):
        return GatewayError.of("upstream_error", "the engine refused the gateway's "
                               "credentials (check upstream_api_key)")
    if 400 <= status < 500:
        return GatewayError(status, "upstream_rejected",
                            message[:500] or f"the engine refused the request ({status})")
    if status == 503:
        return GatewayError.of("engine_unavailable", "the engine is not ready")
    return GatewayError.of("upstream_error", f"the engine failed ({status})")


async def read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """Read a whole response body, refusing more than ``limit`` bytes (502)."""
    length = resp.content_length
    if length is not None and length <= limit:
        return await resp.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise GatewayError.of("upstream_error", f"the engine's answer exceeds {limit} "
                                  "bytes")
        chunks.append(chunk)
    return b"".join(chunks)
