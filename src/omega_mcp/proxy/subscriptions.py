"""Resource subscriptions through the hub: who wants updates of which resource, and the server's side.

A client subscribes (`resources/subscribe` in the handshake era, a `subscriptions/listen` filter in
the 2026 era) to a URI of the namespace; the server that owns it (the one `resources/read` would
go to) is asked once for all of omega's clients: `resources/subscribe` on its first subscriber and
`resources/unsubscribe` after its last (handshake era), or its listen filter set to the URIs wanted
(2026 era). A server speaking both eras is asked on the side its subscriber speaks: a handshake-era
client's subscription also goes to the server's handshake link (`resources/subscribe`), the one that
client's calls use (a second process of a stdio server), as a direct connection would have it; its
updates there come back like any other. A reconnected server is asked again for everything still
wanted. A server that does not offer subscriptions refuses them the way it would refuse a direct
client. `subscribers(uri)` says who gets a `resources/updated` for a URI.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from mcp import types
from mcp.shared.exceptions import MCPError

from omega_mcp.proxy.apps import server_uri, unknown_resource
from omega_mcp.proxy.spec import DownstreamSpec

__all__ = ["SubscriptionServer", "Subscriptions"]

logger = logging.getLogger(__name__)


class SubscriptionServer(Protocol):
    """What subscriptions need of a connected server (`DownstreamSession` provides it)."""

    @property
    def era(self) -> str: ...

    @property
    def capabilities(self) -> types.ServerCapabilities: ...

    @property
    def spec(self) -> DownstreamSpec: ...

    async def request(self, method: str, params: dict[str, str], *, timeout_seconds: float) -> dict[str, object]: ...

    async def set_subscriptions(self, uris: list[str]) -> None: ...

    async def handshake_subscription(self, uri: str, *, subscribe: bool) -> None: ...


Owner = Callable[[str], tuple[str, SubscriptionServer] | None]
"""The connected server owning a URI: `(server_name, session)`, or None (`Exports.owner_of`)."""


class Subscriptions:
    """Every client's resource subscriptions, and what each server was asked for."""

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self._wanted: dict[str, dict[str, set[object]]] = {}  # server_name -> uri -> clients
        self._modern: set[int] = set()  # ids of the 2026-era subscribers (listen streams) among the clients

    def _handshake_clients(self, server_name: str, uri: str) -> int:
        return sum(1 for c in self._wanted.get(server_name, {}).get(uri, ()) if id(c) not in self._modern)

    async def subscribe(self, client: object, uri: str, *, modern: bool = False) -> None:
        """`client` (a 2026-era listen stream when `modern`) wants `resources/updated` for `uri` from now on.

        Raises:
            MCPError: no connected server has the URI, or its server refused the subscription.
        """
        owner = self._owner(uri)
        if owner is None:
            raise unknown_resource(uri)
        server_name, session = owner
        resources = session.capabilities.resources
        if resources is None or not resources.subscribe:
            raise MCPError(
                code=types.METHOD_NOT_FOUND, message=f"server {server_name} does not offer resource subscriptions"
            )
        clients = self._wanted.setdefault(server_name, {}).setdefault(uri, set())
        first = not clients
        first_handshake = not modern and self._handshake_clients(server_name, uri) == 0
        clients.add(client)
        if modern:
            self._modern.add(id(client))
        try:
            if first:
                await self._ask(server_name, session, uri, subscribe=True)
            if first_handshake and session.era != "handshake":
                await session.handshake_subscription(server_uri(server_name, uri), subscribe=True)
        except BaseException:
            self._drop(server_name, uri, client)
            raise

    async def unsubscribe(self, client: object, uri: str) -> None:
        """`client` no longer wants updates of `uri` (a URI it never subscribed to is fine)."""
        for server_name, uris in list(self._wanted.items()):
            if client in uris.get(uri, set()):
                await self._release(server_name, uri, client)

    async def forget(self, client: object) -> None:
        """A client went away: everything it subscribed to."""
        for server_name, uris in list(self._wanted.items()):
            for uri in [u for u, clients in uris.items() if client in clients]:
                await self._release(server_name, uri, client)
        self._modern.discard(id(client))

    def subscribers(self, server_name: str, uri: str) -> set[object]:
        """Who wants an update of `uri` from `server_name`."""
        return set(self._wanted.get(server_name, {}).get(uri, set()))

    async def reconnected(self, server_name: str, session: SubscriptionServer) -> None:
        """A server (re)connected: ask it again for every URI still wanted (best effort)."""
        timeout_seconds = session.spec.timeout_seconds
        uris = list(self._wanted.get(server_name, {}))
        if session.era != "handshake":
            await session.set_subscriptions([server_uri(server_name, u) for u in uris])
            return
        for uri in uris:
            try:
                asked = {"uri": server_uri(server_name, uri)}
                await session.request("resources/subscribe", asked, timeout_seconds=timeout_seconds)
            except MCPError as exc:
                logger.warning("server %s: subscribing to %s again failed: %s", server_name, uri, exc.message)

    # -- the server's side -------------------------------------------------------------------

    def _drop(self, server_name: str, uri: str, client: object) -> bool:
        """Remove one subscriber; True when it was the last one of `uri`."""
        uris = self._wanted.get(server_name, {})
        clients = uris.get(uri)
        if clients is None:
            return False
        clients.discard(client)
        if clients:
            return False
        del uris[uri]
        return True

    async def _release(self, server_name: str, uri: str, client: object) -> None:
        """`client` no longer wants `uri` of `server_name`: the server is told what is no longer wanted."""
        handshake_left = id(client) not in self._modern and self._handshake_clients(server_name, uri) == 1
        last = self._drop(server_name, uri, client)
        owner = self._owner(uri)
        if owner is None or owner[0] != server_name:
            return  # gone (or moved): it was asked by a connection that no longer exists
        try:
            if handshake_left and owner[1].era != "handshake":
                await owner[1].handshake_subscription(server_uri(server_name, uri), subscribe=False)
            if last:
                await self._ask(server_name, owner[1], uri, subscribe=False)
        except MCPError as exc:
            logger.debug("server %s: unsubscribing from %s failed: %s", server_name, uri, exc.message)

    async def _ask(self, server_name: str, session: SubscriptionServer, uri: str, *, subscribe: bool) -> None:
        if session.era != "handshake":
            await session.set_subscriptions([server_uri(server_name, u) for u in self._wanted.get(server_name, {})])
            return
        method = "resources/subscribe" if subscribe else "resources/unsubscribe"
        asked = {"uri": server_uri(server_name, uri)}
        await session.request(method, asked, timeout_seconds=session.spec.timeout_seconds)


UpdateSink = Callable[[str, set[object]], Awaitable[None]]
"""Delivers `notifications/resources/updated` for a URI to its subscribers (set by the MCP server)."""
