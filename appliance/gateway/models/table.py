"""The served-model routing table at run time: served name -> :class:`Upstream`.

:class:`Upstream` is one row of ``GatewaySettings.models`` (:class:`.upstreams.UpstreamModel`)
at run time: the engine's :class:`EngineStatus` (a supervised engine's life, per model), its
own pooled aiohttp session (:func:`.upstream.make_session`) and the chat URL. The chat
handler picks the row by the checked request's ``model``
(:func:`appliance.gateway.chat.request_checks.check_chat_request` answers 404
``model_not_found`` for a name that has no row); a row whose engine is down answers 503 for
that model only (:mod:`.engine_refusal`), the other rows keep serving.
"""

from __future__ import annotations

import asyncio

import aiohttp

from appliance.engine.state import EngineStatus

from ..settings import GatewaySettings
from .engine_client import make_session
from .upstream_config import UpstreamModel


class Upstream:
    """One row at run time: ``model`` (its :class:`UpstreamModel`), ``engine`` (its
    status; replaced by :meth:`attach`), ``session`` (its engine session, lazily opened)
    and ``url`` (its chat-completions URL)."""

    def __init__(self, model: UpstreamModel, settings: GatewaySettings) -> None:
        self.model = model
        self.name = model.name
        self.settings = settings
        self.url = model.base + "/v1/chat/completions"
        self.engine = EngineStatus()
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = make_session(self.settings, self.model)
        return self._session

    def attach(self, status: EngineStatus, loop: asyncio.AbstractEventLoop) -> None:
        """Follow a supervised engine: after each restart the session is renewed (no pooled
        connection to the dead engine is reused)."""
        self.engine = status
        status.subscribe(loop, self.renew, "up")

    def renew(self) -> None:
        old, self._session = self._session, None
        if old is not None and not old.closed:
            asyncio.get_running_loop().create_task(old.close())

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def upstreams(settings: GatewaySettings) -> dict[str, Upstream]:
    """The routing table of ``settings`` (insertion order: the policy's)."""
    return {model.name: Upstream(model, settings) for model in settings.models}
