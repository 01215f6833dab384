"""The MCP server's handlers for downstream prompts, resources, completions and resource subscriptions.

Lists are served in pages (pages.py). `prompts/get` and `resources/read` go to their server as the
client's own requests (`OmegaServer.as_caller`): a handshake-era client is asked what the server
asks mid-request, a 2026-era client gets input-required rounds (the server's own, or omega's
bridge over a handshake-era server). Subscriptions (proxy/subscriptions.py) come from
`resources/subscribe` (handshake era; dropped when the connection closes) and from the URIs of a
`subscriptions/listen` filter (2026 era; dropped when the stream ends); a server's
`resources/updated` reaches exactly the connections and streams that asked for that URI.
A hub client (its profile, `ClientOf`) sees all of this only of the servers whose tools its profile allows some
of, narrowed by its `prompts`/`resources` globs; a hidden prompt or resource is, to it, an unknown one
(the same error).
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
from omega_mcp.calling import Caller
from omega_mcp.names import server_of_prompt
from omega_mcp.proxy.apps import unknown_resource
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.server.bridge import Run, ours
from omega_mcp.server.pages import page
from omega_mcp.server.profiles import ClientProfile

__all__ = ["AsCaller", "CatalogHandlers", "ClientOf", "Raw"]

logger = logging.getLogger(__name__)

_NOTIFY_SECONDS = 2.0
_FORGETS = "omega_mcp.subscriptions"
"""`Connection.state` key: the connection's subscriptions are dropped when it closes."""
Raw = dict[str, Any]
AsCaller = Callable[[Any, str | None, types.InputResponses | None, Run], Awaitable[Raw | types.InputRequiredResult]]
"""`as_caller(ctx, request_state, input_responses, run)`: a client's request run as that client (server.py)."""
ClientOf = Callable[[Any], ClientProfile | None]
"""`client_of(ctx)`: the hub client a request comes from (server.py); None: every prompt and resource."""


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
        self,
        catalog: Downstreams,
        as_caller: AsCaller,
        bus: SubscriptionBus,
        remember: Callable[[Any], None],
        client_of: ClientOf,
    ) -> None:
        self.catalog = catalog
        self._as_caller = as_caller
        self._client_of = client_of
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

    # -- the calling client's view (server/profiles.py) ----------------------------------------

    def _prompt_visible(self, profile: ClientProfile | None, name: str) -> bool:
        if profile is None:
            return True
        server = next((s for s in self.catalog.specs() if server_of_prompt(s, name) is not None), None)
        return server is not None and profile.allows_prompt(self.catalog, server, name)

    def _resource_visible(self, profile: ClientProfile | None, uri: str, *, template: bool = False) -> bool:
        if profile is None:
            return True
        exports = self.catalog.exports
        owner = exports.template_owner(uri) if template else next(iter(exports.owner_of(uri) or ()), None)
        return isinstance(owner, str) and profile.allows_resource(self.catalog, owner, uri)

    def _check_prompt(self, profile: ClientProfile | None, name: str) -> None:
        if not self._prompt_visible(profile, name):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name!r}")

    def _check_resource(self, profile: ClientProfile | None, uri: str, *, template: bool = False) -> None:
        if not self._resource_visible(profile, uri, template=template):
            raise unknown_resource(uri)

    async def list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        self._remember(ctx.session)
        await self.catalog.wait_ready()
        profile = self._client_of(ctx)
        visible = [p for p in self.catalog.exports.prompts() if self._prompt_visible(profile, p.name)]
        prompts, cursor = page(visible, params, "prompts")
        return types.ListPromptsResult(prompts=prompts, next_cursor=cursor)

    async def get_prompt(
        self, ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        await self.catalog.wait_settled(self.catalog.starting(params.name))  # its server may still be starting
        self._check_prompt(self._client_of(ctx), params.name)
        sent = {**_forwarded(params), **({"arguments": params.arguments} if params.arguments is not None else {})}

        async def run(progress: ProgressFnT, caller: Caller) -> Raw:
            return await self.catalog.exports.get_prompt(params.name, sent, caller)

        return _result(
            await self._as_caller(ctx, params.request_state, params.input_responses, run), types.GetPromptResult
        )

    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        self._remember(ctx.session)
        await self.catalog.wait_ready()
        profile = self._client_of(ctx)
        visible = [r for r in self.catalog.exports.resources() if self._resource_visible(profile, r.uri)]
        resources, cursor = page(visible, params, "resources")
        return types.ListResourcesResult(resources=resources, next_cursor=cursor)

    async def list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        await self.catalog.wait_ready()
        exported = self.catalog.exports.resource_templates()
        profile = self._client_of(ctx)
        visible = [t for t in exported if self._resource_visible(profile, t.uri_template, template=True)]
        templates, cursor = page(visible, params, "resources/templates")
        return types.ListResourceTemplatesResult(resource_templates=templates, next_cursor=cursor)

    async def read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        await self.catalog.wait_ready()  # its server may still be starting
        self._check_resource(self._client_of(ctx), params.uri)

        async def run(progress: ProgressFnT, caller: Caller) -> Raw:
            return await self.catalog.exports.read_resource(params.uri, _forwarded(params), caller)

        raw = await self._as_caller(ctx, params.request_state, params.input_responses, run)
        return _result(raw, types.ReadResourceResult)

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        await self.catalog.wait_ready()
        ref, profile = params.ref, self._client_of(ctx)
        if isinstance(ref, types.PromptReference):
            self._check_prompt(profile, ref.name)
        elif not self._resource_visible(profile, ref.uri, template=True):
            self._check_resource(profile, ref.uri)
        return await self.catalog.exports.complete(params)

    # -- subscriptions -----------------------------------------------------------------------

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        await self.catalog.wait_ready()
        self._check_resource(self._client_of(ctx), params.uri)
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
        stream, profile = _Stream(), self._client_of(ctx)
        subscriptions = self.catalog.subscriptions
        try:
            for uri in params.notifications.resource_subscriptions or ():
                if not self._resource_visible(profile, uri):
                    continue  # to this client an unknown URI: honored, never fires
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
