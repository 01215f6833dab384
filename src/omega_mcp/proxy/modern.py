"""A 2026-07-28 connection to a downstream: every request carries its client's own envelope.

The 2026 era has no handshake: each request names the protocol version, the client and its
capabilities in `_meta` (plus a log level when the client wants logs), and over HTTP the same in
headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and `Mcp-Param-*` for the arguments a
tool's schema marks with `x-mcp-header`). So omega forwards each request with the envelope of the
client it is for (`Envelope.of` a `Caller`): a downstream's capability checks see exactly what
that client declared, and its logs reach exactly the request that asked for them. Requests that
belong to no client (the agent, `omega-mcp call`) carry omega's own envelope. List changes and
resource updates come from one `subscriptions/listen` stream (`follow`), opened again with a new
filter whenever the set of subscribed URIs changes, and after a drop (with backoff).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    SubscriptionLost,
    ToolsListChanged,
    listen,
)
from mcp.shared.dispatcher import CallOptions, Dispatcher, ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    x_mcp_header_map,
)

from omega_mcp.narrow import as_object

__all__ = ["RESERVED_META", "Envelope", "ModernChannel"]

logger = logging.getLogger(__name__)

RESERVED_META = "io.modelcontextprotocol/"
"""The `_meta` key prefix of the per-hop envelope: never copied from one hop to the next."""
_VERSION = f"{RESERVED_META}protocolVersion"
_CLIENT_INFO = f"{RESERVED_META}clientInfo"
_CAPABILITIES = f"{RESERVED_META}clientCapabilities"
_LOG_LEVEL = f"{RESERVED_META}logLevel"
_LISTEN_BACKOFF_SECONDS = (0.5, 30.0)


@dataclass(frozen=True, slots=True)
class Envelope:
    """Who a 2026-era request is for: its client's info, capabilities and log level (wire JSON)."""

    client_info: Mapping[str, Any]
    capabilities: Mapping[str, Any]
    log_level: str | None = None


def _strip_reserved(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if not k.startswith(RESERVED_META)}


class ModernChannel:
    """Requests to a downstream that speaks 2026-07-28, over an SDK session adopted from `server/discover`."""

    def __init__(self, session: ClientSession, dispatcher: Dispatcher[Any], server_name: str) -> None:
        result = session.discover_result
        assert result is not None and session.protocol_version is not None, "adopt a DiscoverResult first"
        self.session = session
        self.version = session.protocol_version
        self.discovered = result
        self.capabilities = result.capabilities
        self.server_info = session.server_info
        self._dispatcher = dispatcher
        self._server_name = server_name
        self._header_maps: dict[str, dict[tuple[str, ...], str]] = {}
        self._subscribed: tuple[str, ...] = ()
        self._refilter = anyio.Event()

    # -- tools and their headers -------------------------------------------------------------

    def usable(self, tools: Sequence[types.Tool]) -> list[types.Tool]:
        """The tools a 2026-era client may use (an invalid `x-mcp-header` drops one); learns their headers."""
        kept: list[types.Tool] = []
        maps: dict[str, dict[tuple[str, ...], str]] = {}
        for tool in tools:
            problem = find_invalid_x_mcp_header(tool.input_schema)
            if problem is not None:
                logger.warning(
                    "server %s: skipping tool %r: invalid x-mcp-header (%s)", self._server_name, tool.name, problem
                )
                continue
            header_map = x_mcp_header_map(tool.input_schema)
            if header_map:
                maps[tool.name] = header_map
            kept.append(tool)
        self._header_maps = maps
        return kept

    def param_headers(self, name: str, arguments: Mapping[str, Any]) -> dict[str, str]:
        """The `Mcp-Param-*` headers a call of tool `name` with `arguments` carries (none for an unlisted tool)."""
        header_map = self._header_maps.get(name)
        return mcp_param_headers(header_map, arguments) if header_map else {}

    # -- requests ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        envelope: Envelope,
        *,
        timeout_seconds: float,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send one request with `envelope` and return the raw result (an `input_required` one included).

        Raises:
            MCPError: the server's error, a timeout (REQUEST_TIMEOUT) or a closed connection.
        """
        wire: dict[str, Any] = dict(params or {})
        meta = _strip_reserved(wire.get("_meta") or {})
        meta[_VERSION] = self.version
        meta[_CLIENT_INFO] = dict(envelope.client_info)
        meta[_CAPABILITIES] = dict(envelope.capabilities)
        if envelope.log_level is not None:
            meta[_LOG_LEVEL] = envelope.log_level
        wire["_meta"] = meta
        headers = {MCP_PROTOCOL_VERSION_HEADER: self.version, MCP_METHOD_HEADER: method}
        name_key = NAME_BEARING_METHODS.get(method)
        name = wire.get(name_key) if name_key is not None else None
        if isinstance(name, str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        if method == "tools/call" and isinstance(name, str):
            headers.update(self.param_headers(name, as_object(wire.get("arguments"))))
        opts: CallOptions = {"timeout": timeout_seconds, "headers": headers}
        if progress is not None:
            opts["on_progress"] = progress
        return await self._dispatcher.send_raw_request(method, wire, opts)

    # -- listen ------------------------------------------------------------------------------

    def subscribe_only(self, uris: Sequence[str]) -> None:
        """Listen for updates of exactly these resources from now on (reopens the stream when they changed)."""
        wanted = tuple(sorted(set(uris)))
        if wanted != self._subscribed:
            self._subscribed = wanted
            event, self._refilter = self._refilter, anyio.Event()
            event.set()

    async def follow(self, on_changed: Callable[[str], None], on_updated: Callable[[str], Awaitable[None]]) -> None:
        """Follow the server's list changes and resource updates until cancelled (`on_changed("tools")`, ...)."""
        caps = self.capabilities
        lists = {
            "tools": bool(caps.tools and caps.tools.list_changed),
            "prompts": bool(caps.prompts and caps.prompts.list_changed),
            "resources": bool(caps.resources and caps.resources.list_changed),
        }
        can_subscribe = bool(caps.resources and caps.resources.subscribe)
        delay, ceiling = _LISTEN_BACKOFF_SECONDS
        while True:
            uris = self._subscribed if can_subscribe else ()
            if not any(lists.values()) and not uris:
                await self._refilter.wait()
                continue
            refilter = self._refilter
            try:
                with anyio.CancelScope() as scope:
                    async with listen(
                        self.session,
                        tools_list_changed=lists["tools"],
                        prompts_list_changed=lists["prompts"],
                        resources_list_changed=lists["resources"],
                        resource_subscriptions=uris,
                    ) as subscription:
                        delay = _LISTEN_BACKOFF_SECONDS[0]

                        async with anyio.create_task_group() as watch:
                            watch.start_soon(_cancel_when, refilter, scope)
                            async for event in subscription:
                                await _dispatch(event, on_changed, on_updated)
                            watch.cancel_scope.cancel()
            except MCPError as exc:
                if exc.code == types.METHOD_NOT_FOUND:
                    logger.info("server %s does not serve subscriptions/listen: no list changes", self._server_name)
                    return
                logger.debug("[%s] listen failed: %s", self._server_name, exc)
            except (SubscriptionLost, TimeoutError) as exc:
                logger.debug("[%s] listen stream lost: %s", self._server_name, exc)
            if refilter.is_set():
                continue
            with anyio.move_on_after(delay):
                await refilter.wait()
            delay = min(delay * 2, ceiling)


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _dispatch(
    event: object, on_changed: Callable[[str], None], on_updated: Callable[[str], Awaitable[None]]
) -> None:
    match event:
        case ToolsListChanged():
            on_changed("tools")
        case PromptsListChanged():
            on_changed("prompts")
        case ResourcesListChanged():
            on_changed("resources")
        case ResourceUpdated(uri=uri):
            await on_updated(uri)
        case _:
            pass
