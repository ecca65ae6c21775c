"""The route-table row type and its matcher (exact paths; one trailing ``{param}``).

A :class:`Route` declares everything the app needs to answer a path: the methods it accepts
(``HEAD`` listed wherever ``GET`` is; a ``HEAD`` answer is the ``GET`` one without the
body), whether it needs an API key, whether engine admission applies, and whether it is
recorded in metrics and the audit log. :class:`RouteTable` matches the routed path
(``scope["path"]``) exactly; a path declared as ``/prefix/{param}`` matches ``/prefix/``
followed by any non-empty rest (``/`` included: a served model name is free text).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from starlette.types import Receive, Scope, Send

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
GET = ("GET", "HEAD")
POST = ("POST",)


@dataclass(frozen=True, slots=True)
class Route:
    """One row: ``path`` (exact, or ending in ``{param}``), ``methods`` it answers,
    ``handler`` (an ASGI coroutine), ``public`` (no API key), ``engine`` (engine admission:
    readiness, key limits, global bound), ``recorded`` (metrics and audit log)."""

    path: str
    methods: tuple[str, ...]
    handler: Handler
    public: bool = False
    engine: bool = False
    recorded: bool = True

    @property
    def prefix(self) -> str | None:
        """``/prefix/`` for a ``/prefix/{param}`` route, else ``None``."""
        if self.path.endswith("}"):
            return self.path[:self.path.rindex("{")]
        return None

    @property
    def allow(self) -> bytes:
        """The ``Allow`` header value of a 405 (``GET, HEAD``)."""
        return ", ".join(self.methods).encode()


class RouteTable:
    """Lookup over declared routes. Raises ``ValueError`` for a path declared twice, a
    ``{param}`` anywhere but at the end, or ``GET`` without ``HEAD``."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        self._exact: dict[str, Route] = {}
        self._prefixed: list[tuple[str, Route]] = []
        for route in self.routes:
            prefix = route.prefix
            if "{" in (prefix if prefix is not None else route.path):
                raise ValueError(f"{route.path}: only one trailing {{param}} is supported")
            if "GET" in route.methods and "HEAD" not in route.methods:
                raise ValueError(f"{route.path}: a GET route answers HEAD too")
            if route.path in self._exact or any(r.path == route.path for _, r in self._prefixed):
                raise ValueError(f"{route.path}: declared twice")
            if prefix is None:
                self._exact[route.path] = route
            else:
                self._prefixed.append((prefix, route))

    def match(self, path: str) -> Route | None:
        """The route for a routed path, or ``None``."""
        route = self._exact.get(path)
        if route is None:
            for prefix, candidate in self._prefixed:
                if path.startswith(prefix) and len(path) > len(prefix):
                    return candidate
        return route
