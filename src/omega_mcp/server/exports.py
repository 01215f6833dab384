"""The MCP server's handlers for downstream prompts, resources, completions and resource subscriptions.

Lists are served in pages (pages.py). `prompts/get` and `resources/read` go to their server as the
client's own requests (`OmegaServer.as_caller`): a handshake-era client is asked what the server
asks mid-request, a 2026-era client gets input-required rounds (the server's own, or omega's
bridge over a handshake-era server). Subscriptions (proxy/subscriptions.py) come from
`resources/subscribe` (handshake era; dropped when the connection closes) and from the URIs of a
`subscriptions/listen` filter (2026 era; dropped when the stream ends); a server's
`resources/updated` reaches exactly the connections and streams that asked for that URI.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import types
from mcp.server.connection import Connection
from mcp.server.subscriptions import ListenHandler, ResourceUpdated, SubscriptionBus
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from omega_mcp._sdk import connection_of
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.server.bridge import ours
from omega_mcp.server.pages import page

__all__ = ["AsCaller", "CatalogHandlers", "Raw"]

logger = logging.getLogger(__name__)

_NOTIFY_SECONDS = 2.0
_FORGETS = "omega_mcp.subscriptions"
"""`Connection.state` key: the connection's subscriptions are dropped when it closes."""
Raw = dict[str, Any]
AsCaller = Callable[
    [Any, str | None, types.InputResponses | None, Callable[[ProgressFnT], Awaitable[Raw]]],
    Awaitable[Raw | types.InputRequiredResult],
]
"""`as_caller(ctx, request_state, input_responses, run)`: a client's request run as that client (server.py)."""


class _Stream:
    """One `subscriptions/listen` stream as a subscriber."""


def _forwarded(params: types.GetPromptRequestParams | types.ReadResourceRequestParams) -> dict[str, Any]:
    """A 2026-era retry's fields for the server, unless the round is omega's own."""
    if ours(params.request_state):
        return {}
    return params.model_dump(
        by_alias=True, mode="json", exclude_none=True, include={"input_responses", "request_state"}
    )


def _result(raw: Raw | types.InputRequiredResult, model: type[Any]) -> Any:
    if isinstance(raw, types.InputRequiredResult):
        return raw
    if raw.get("resultType") == "input_required":
        return types.InputRequiredResult.model_validate(raw, by_name=False)
    return model.model_validate(raw, by_name=False)


class CatalogHandlers:
    """What the hub serves of its downstreams besides tools."""

    def __init__(
        self, catalog: Downstreams, as_caller: AsCaller, bus: SubscriptionBus, remember: Callable[[Any], None]
    ) -> None:
        self.catalog = catalog
        self._as_caller = as_caller
        self._bus = bus
        self._listen = ListenHandler(bus)
        self._remember = remember
        catalog.resources_updated = self._updated

    def handlers(self) -> dict[str, Any]:
        """The lowlevel `Server` constructor arguments for them."""
        return {
            "on_list_prompts": self.list_prompts,
            "on_get_prompt": self.get_prompt,
            "on_list_resources": self.list_resources,
            "on_list_resource_templates": self.list_resource_templates,
            "on_read_resource": self.read_resource,
            "on_completion": self.complete,
            "on_subscribe_resource": self.subscribe,
            "on_unsubscribe_resource": self.unsubscribe,
            "on_subscriptions_listen": self.listen,
        }

    async def list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        self._remember(ctx.session)
        await self.catalog.wait_ready()
        prompts, cursor = page(self.catalog.exports.prompts(), params, "prompts")
        return types.ListPromptsResult(prompts=prompts, next_cursor=cursor)

    async def get_prompt(
        self, ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        await self.catalog.wait_settled(self.catalog.starting(params.name))  # its server may still be starting
        sent = {**_forwarded(params), **({"arguments": params.arguments} if params.arguments is not None else {})}

        async def run(progress: ProgressFnT) -> Raw:
            return await self.catalog.exports.get_prompt(params.name, sent)

        return _result(
            await self._as_caller(ctx, params.request_state, params.input_responses, run), types.GetPromptResult
        )

    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        self._remember(ctx.session)
        await self.catalog.wait_ready()
        resources, cursor = page(self.catalog.exports.resources(), params, "resources")
        return types.ListResourcesResult(resources=resources, next_cursor=cursor)

    async def list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        await self.catalog.wait_ready()
        templates, cursor = page(self.catalog.exports.resource_templates(), params, "resources/templates")
        return types.ListResourceTemplatesResult(resource_templates=templates, next_cursor=cursor)

    async def read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        await self.catalog.wait_ready()  # its server may still be starting

        async def run(progress: ProgressFnT) -> Raw:
            return await self.catalog.exports.read_resource(params.uri, _forwarded(params))

        raw = await self._as_caller(ctx, params.request_state, params.input_responses, run)
        return _result(raw, types.ReadResourceResult)

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        await self.catalog.wait_ready()
        return await self.catalog.exports.complete(params)

    # -- subscriptions -----------------------------------------------------------------------

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        await self.catalog.wait_ready()
        connection = connection_of(ctx.session)
        if not connection.state.get(_FORGETS):
            connection.state[_FORGETS] = True
            connection.exit_stack.push_async_callback(self.catalog.subscriptions.forget, connection)
        await self.catalog.subscriptions.subscribe(connection, params.uri)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        await self.catalog.subscriptions.unsubscribe(connection_of(ctx.session), params.uri)
        return types.EmptyResult()

    async def listen(self, ctx: Any, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        """A 2026-era listen stream; its URIs are subscribed downstream while it lasts."""
        stream = _Stream()
        subscriptions = self.catalog.subscriptions
        try:
            for uri in params.notifications.resource_subscriptions or ():
                try:
                    await subscriptions.subscribe(stream, uri, modern=True)
                except MCPError as exc:  # honored anyway, as a server honors any URI: it just never fires
                    logger.debug("listen: %s is not subscribed downstream: %s", uri, exc.message)
            return await self._listen(ctx, params)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_NOTIFY_SECONDS):
                await subscriptions.forget(stream)

    async def _updated(self, uri: str, subscribers: set[object]) -> None:
        if any(isinstance(s, _Stream) for s in subscribers):
            await self._bus.publish(ResourceUpdated(uri=uri))
        for subscriber in subscribers:
            if isinstance(subscriber, Connection):
                with anyio.move_on_after(_NOTIFY_SECONDS):
                    try:
                        await subscriber.notify("notifications/resources/updated", {"uri": uri})
                    except Exception as exc:  # boundary: a gone client must not stop the others
                        logger.debug("resources/updated not delivered: %s", exc)
