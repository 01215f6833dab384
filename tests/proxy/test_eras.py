"""Downstreams in the era they speak (SPEC "Transparency"), feature by feature: a 2026-only server
connects; input-required rounds, capabilities, logs and resource subscriptions reach each client
as a direct connection would give them, in either client era."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp.shared.message import ServerMessageMetadata

from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import client, downstream, downstream_spec, hub, in_memory, modern_only
from waits import deadline

MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])
NAME: types.ElicitRequestedSchema = {"type": "object", "properties": {"name": {"type": "string"}}}


def _ask(message: str) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=NAME))


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def modern_server(bus: InMemorySubscriptionBus | None = None) -> MCPServer:
    """A server written for 2026-07-28: it asks in input-required rounds, logs per request."""
    server = MCPServer("m", subscriptions=bus if bus is not None else InMemorySubscriptionBus())

    @server.tool()
    async def greet(ctx: Context) -> str | types.InputRequiredResult:
        """Asks for a name in a round of its own (keys and state are the server's)."""
        answer = (ctx.input_responses or {}).get("user_name")
        if answer is None:
            return types.InputRequiredResult(input_requests={"user_name": _ask("name?")}, request_state="s-1")
        assert ctx.request_state == "s-1"
        name = answer.content.get("name") if isinstance(answer, types.ElicitResult) and answer.content else "?"
        return f"Hello, {name}!"

    @server.tool()
    async def capabilities(ctx: Context) -> str:
        """Reports the client capabilities this request carried."""
        caps = ctx.client_capabilities
        declared = caps.model_dump(exclude_none=True) if caps is not None else {}
        return json.dumps(sorted(k for k in declared if k in ("sampling", "elicitation", "roots")))

    @server.tool()
    async def chatty(ctx: Context) -> str:
        """Logs structured data while it runs."""
        await ctx.log("info", {"step": 1, "of": 2}, logger_name="worker")
        await ctx.log("debug", "details", logger_name="worker")
        return "done"

    @server.resource("res://watched")
    def watched() -> str:
        return "v1"

    return server


async def answer_name(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


# -- 1. a 2026-only server ---------------------------------------------------------------------


@MODES
async def test_a_2026_only_server_connects_and_both_client_eras_use_it(rwx_policy: SandboxPolicy, mode: str):
    spec = downstream_spec("m", modern_only(modern_server()._lowlevel_server))  # pyright: ignore[reportPrivateUsage]
    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, _, omega):
        async with client(omega, mode, elicitation_callback=answer_name) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            result = await c.call_tool("mcp__m__greet", {})
        status = downstreams.statuses()[0]
    assert status.state == "connected", status.reason
    assert "mcp__m__greet" in names
    assert text_of(result) == "Hello, Ada!"  # a handshake-era client's round answered by omega, through its client


# -- 7 (2026 side). the server's own rounds reach a 2026 client as they are --------------------


async def test_a_2026_servers_round_reaches_a_2026_client_with_its_own_keys_and_state(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, downstream_spec("m", in_memory(modern_server()._lowlevel_server))) as (_, _, omega):  # pyright: ignore[reportPrivateUsage]
        async with client(omega, "auto", elicitation_callback=answer_name) as c:
            first = await c.session.call_tool("mcp__m__greet", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            again = await c.session.call_tool(
                "mcp__m__greet",
                {},
                input_responses={"user_name": types.ElicitResult(action="accept", content={"name": "Bo"})},
                request_state=first.request_state,
                allow_input_required=True,
            )
            driven = await c.call_tool("mcp__m__greet", {})  # the SDK's own driver, end to end
    assert list((first.input_requests or {}).keys()) == ["user_name"]  # the server's own key
    assert first.request_state is not None and not first.request_state.startswith("omega-round:")  # its own state
    assert isinstance(again, types.CallToolResult) and text_of(again) == "Hello, Bo!"
    assert text_of(driven) == "Hello, Ada!"


# -- 4. per-request capabilities --------------------------------------------------------------


async def test_a_2026_clients_capabilities_reach_a_2026_server_exactly(rwx_policy: SandboxPolicy):
    """omega declares what it can route on a shared handshake-era link; a 2026-era request says who asks."""
    async with hub(rwx_policy, downstream_spec("m", in_memory(modern_server()._lowlevel_server))) as (_, _, omega):  # pyright: ignore[reportPrivateUsage]
        async with client(omega, "auto", elicitation_callback=answer_name) as only_elicitation:
            one = await only_elicitation.call_tool("mcp__m__capabilities", {})
        async with client(omega, "auto") as nothing:
            none = await nothing.call_tool("mcp__m__capabilities", {})
    assert json.loads(text_of(one)) == ["elicitation"]
    assert json.loads(text_of(none)) == []


# -- 5. logs: each client gets its own calls' logs, structured -----------------------------------


class _Logs:
    def __init__(self) -> None:
        self.messages: list[types.LoggingMessageNotificationParams] = []

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append(params)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_2026_client_gets_its_calls_logs_at_the_level_it_asked_with_their_data(rwx_policy: SandboxPolicy):
    asked, silent = _Logs(), _Logs()
    async with hub(rwx_policy, downstream_spec("m", in_memory(modern_server()._lowlevel_server))) as (_, _, omega):  # pyright: ignore[reportPrivateUsage]
        async with (
            client(omega, "auto", logging_callback=asked, log_level="info") as with_level,
            client(omega, "auto", logging_callback=silent) as without,
        ):
            assert text_of(await with_level.call_tool("mcp__m__chatty", {})) == "done"
            assert text_of(await without.call_tool("mcp__m__chatty", {})) == "done"
    assert [(m.level, m.logger, m.data) for m in asked.messages] == [("info", "worker", {"step": 1, "of": 2})]
    assert silent.messages == []


def _logging_handshake_server() -> Server[Any]:
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        data = {"for": (params.arguments or {}).get("text"), "n": [1, 2]}
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level="warning", logger="store", data=data)
        )
        await ctx.session.send_notification(notification, related_request_id=ctx.request_id)
        return types.CallToolResult(content=[types.TextContent(text="ok")])

    return downstream("h", call=call)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_in_the_handshake_era_one_clients_call_logs_never_reach_another_client(rwx_policy: SandboxPolicy):
    a_logs, b_logs = _Logs(), _Logs()
    spec = downstream_spec("h", _logging_handshake_server(), era="handshake")
    async with hub(rwx_policy, spec) as (_, _, omega):
        async with (
            client(omega, "legacy", logging_callback=a_logs) as a,
            client(omega, "legacy", logging_callback=b_logs) as b,
        ):
            await a.set_logging_level("debug")
            await b.set_logging_level("debug")
            await a.call_tool("mcp__h__echo", {"text": "a"})
            await b.send_ping()
            await a.send_ping()
    assert [(m.level, m.logger, m.data) for m in a_logs.messages] == [("warning", "store", {"for": "a", "n": [1, 2]})]
    assert b_logs.messages == []


# -- 2. resource subscriptions ------------------------------------------------------------------


def _subscribable() -> tuple[Server[Any], list[str], list[Any]]:
    subscribed: list[str] = []
    sessions: list[Any] = []

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(name="w", uri="res://watched")])

    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=params.uri, text="v")])

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        subscribed.append(params.uri)
        sessions.append(ctx.session)
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        subscribed.append(f"-{params.uri}")
        return types.EmptyResult()

    server = downstream(
        "r",
        on_list_resources=list_resources,
        on_read_resource=read,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
    )
    return server, subscribed, sessions


class _Updates:
    def __init__(self) -> None:
        self.uris: list[str] = []
        self.arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(message.params.uri)
            self.arrived.set()


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_subscription_is_passed_on_and_only_its_subscriber_hears_of_updates(rwx_policy: SandboxPolicy):
    server, subscribed, sessions = _subscribable()
    subscriber, bystander = _Updates(), _Updates()
    async with hub(rwx_policy, downstream_spec("r", server, era="handshake")) as (_, _, omega):
        async with (
            client(omega, "legacy", message_handler=subscriber) as a,
            client(omega, "legacy", message_handler=bystander) as b,
        ):
            assert (await a.session.list_resources()).resources[0].uri == "res://watched"
            capabilities = a.session.server_capabilities
            assert capabilities is not None and capabilities.resources is not None and capabilities.resources.subscribe
            await a.subscribe_resource("res://watched")
            await sessions[0].send_resource_updated("res://watched")
            with deadline(5):
                await subscriber.arrived.wait()
            await b.send_ping()
            await a.unsubscribe_resource("res://watched")
    assert subscriber.uris == ["res://watched"] and bystander.uris == []
    assert subscribed == ["res://watched", "-res://watched"]


async def test_a_2026_client_listening_for_a_resource_hears_of_a_2026_servers_updates(rwx_policy: SandboxPolicy):
    bus = InMemorySubscriptionBus()
    server = modern_server(bus)
    async with hub(rwx_policy, downstream_spec("m", in_memory(server._lowlevel_server))) as (_, _, omega):  # pyright: ignore[reportPrivateUsage]
        async with client(omega, "auto") as c:
            await c.list_resources()
            async with c.listen(resource_subscriptions=["res://watched"]) as stream:
                assert stream.honored.resource_subscriptions == ["res://watched"]
                with deadline(10):
                    while True:  # until the server's listen filter names the URI: then an update is delivered
                        await bus.publish(ResourceUpdated(uri="res://watched"))
                        with anyio.move_on_after(0.2):
                            event = await stream.__anext__()
                            break
    assert event == ResourceUpdated(uri="res://watched")


# -- 1. a server speaking both eras keeps both sides ---------------------------------------------


async def test_a_handshake_client_of_a_dual_era_server_is_asked_what_it_asks_mid_call(rwx_policy: SandboxPolicy):
    """A handshake-era server design (a request mid-call) on a server that also speaks 2026: a
    handshake-era client gets what it would get directly, over a handshake-era link of its own."""

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        form = await ctx.session.send_request(_ask("name?"), types.ElicitResult, metadata=metadata)
        return types.CallToolResult(content=[types.TextContent(text=f"{form.action}:{form.content}")])

    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (downstreams, _, omega):
        async with client(omega, "legacy", elicitation_callback=answer_name) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
        session = downstreams.connected("d")
    assert session is not None and session[0].era == "modern"
    assert text_of(result) == "accept:{'name': 'Ada'}"
