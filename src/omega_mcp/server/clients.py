"""omega's handshake-era MCP clients as the proxy sees them: where a downstream's requests go.

A `SessionCaller` is one request of a client (a tools/call), or the client itself for requests
made outside any call. What a downstream asks during a call goes out request-scoped, so that on
streamable HTTP it rides the call's own response stream; when that stream cannot carry it (a
JSON-response POST), or outside a call, it goes on the connection's standalone channel. Routing
is `proxy/client_requests.py`; 2026-07-28 clients have no back-channel and are reached through
the input-required round trips of `bridge.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import anyio
from mcp import types
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.message import ServerMessageMetadata

from omega_mcp._sdk import connection_of
from omega_mcp.loglevels import allows
from omega_mcp.proxy.client_requests import InputRequest

__all__ = ["SessionCaller", "client_name"]

logger = logging.getLogger(__name__)

_R = TypeVar("_R", bound=types.Result)
_NOTIFY_SECONDS = 2.0


def client_name(session: ServerSession) -> str:
    """The name the client gave in its `clientInfo` ("unnamed" without one)."""
    params = session.client_params
    return params.client_info.name if params is not None else "unnamed"


LevelOf = Callable[[object], types.LoggingLevel | None]
"""The log level a connection asked for with `logging/setLevel` (None: it asked for none)."""


def _no_level(connection: object) -> types.LoggingLevel | None:
    return None


class SessionCaller:
    """One request of a handshake-era client (`request_id`), or the client outside calls (None)."""

    __slots__ = ("_level_of", "_request_id", "_session")

    def __init__(
        self, session: ServerSession, request_id: types.RequestId | None, level_of: LevelOf = _no_level
    ) -> None:
        self._session = session
        self._request_id = request_id
        self._level_of = level_of

    @property
    def client(self) -> object:
        return connection_of(self._session)

    @property
    def name(self) -> str:
        return client_name(self._session)

    @property
    def capabilities(self) -> types.ClientCapabilities | None:
        return self._session.client_capabilities

    @property
    def modern(self) -> bool:
        return False

    @property
    def client_info(self) -> types.Implementation | None:
        params = self._session.client_params
        return params.client_info if params is not None else None

    @property
    def log_level(self) -> types.LoggingLevel | None:
        return self._level_of(connection_of(self._session))

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not allows(self.log_level, params.level):  # as a direct server would: at the level it set
            return
        with anyio.move_on_after(_NOTIFY_SECONDS):
            try:  # on the call's own response stream over HTTP, as the server sent it
                notification = types.LoggingMessageNotification(params=params)
                await self._session.send_notification(notification, related_request_id=self._request_id)
            except Exception as exc:  # boundary: a client that went away just misses it
                logger.debug("a log message was not delivered: %s", exc)

    async def ask(
        self, request: InputRequest, result_type: type[_R], *, timeout_seconds: float, progress: ProgressFnT | None
    ) -> _R:
        related = self._request_id if self._session.can_send_request else None
        return await self._session.send_request(
            request,
            result_type,
            request_read_timeout_seconds=timeout_seconds,
            metadata=ServerMessageMetadata(related_request_id=related) if related is not None else None,
            progress_callback=progress,
        )

    async def notify(self, notification: types.ServerNotification) -> None:
        with anyio.move_on_after(_NOTIFY_SECONDS):
            try:
                await self._session.send_notification(notification)
            except Exception as exc:  # boundary: a client that went away just misses it
                logger.debug("%s not delivered: %s", notification.method, exc)
