"""Server→client requests through the hub: sampling, elicitation and roots from a handshake-era
downstream reach the client whose call caused them (handshake-era clients directly, 2026-07-28
clients through input-required round trips), with capabilities, declines, progress, cancellation
and roots/list_changed. These servers ask mid-call, which only the handshake era can carry, so they
are spoken to in it (`era = "handshake"`); 2026-era servers' own rounds are in test_eras.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from cli_support import cli_env
from hub_support import hub_client
from omega_mcp.proxy.client_requests import ClientRequests
from omega_mcp.proxy.declared import declared_capabilities
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server import bridge
from proxy_support import FIXTURES, client, downstream, downstream_spec, hub, listed, wait_until
from waits import deadline

MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])
FORM: types.ElicitRequestedSchema = {"type": "object", "properties": {"color": {"type": "string"}}}
WEATHER = types.Tool(name="weather", input_schema={"type": "object", "properties": {"city": {"type": "string"}}})


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def sample(ctx: Any, text: str, **options: Any) -> types.CreateMessageResult:
    """What a downstream tool does to sample: a request scoped to its own call (not the deprecated helper)."""
    message = types.SamplingMessage(role="user", content=types.TextContent(text=text))
    params = types.CreateMessageRequestParams(messages=[message], max_tokens=64, **options)
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    result_type = types.CreateMessageResultWithTools if options.get("tools") else types.CreateMessageResult
    return await ctx.session.send_request(types.CreateMessageRequest(params=params), result_type, metadata=metadata)


async def list_roots(ctx: Any) -> list[str]:
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    result = await ctx.session.send_request(types.ListRootsRequest(), types.ListRootsResult, metadata=metadata)
    return [str(root.uri) for root in result.roots]


async def answer_sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    asked = params.messages[0].content
    assert isinstance(asked, types.TextContent)
    return types.CreateMessageResult(role="assistant", content=types.TextContent(text=f"LLM<{asked.text}>"), model="m1")


async def answer_form(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert isinstance(params, types.ElicitRequestFormParams) and params.message == "favourite color?"
    return types.ElicitResult(action="accept", content={"color": "teal"})


async def client_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root.model_validate({"uri": "file:///client/project"})])


def legacy_spec(name: str, server: Server[Any], **options: Any) -> Any:
    """A downstream spoken to in the handshake era only."""
    return downstream_spec(name, server, era="handshake", **options)


def asking_server(name: str = "d") -> Server[Any]:
    """A downstream whose tool samples, elicits and lists roots during the call, and reports what it got."""

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        sampled = await sample(ctx, "hello", system_prompt="be brief")
        assert isinstance(sampled.content, types.TextContent)
        form = await ctx.session.elicit_form("favourite color?", FORM, related_request_id=ctx.request_id)
        roots = await list_roots(ctx)
        return types.CallToolResult(
            content=[types.TextContent(text=f"{sampled.content.text} {form.action}:{form.content} {roots}")]
        )

    return downstream(name, call=call)


@MODES
async def test_a_client_with_the_callbacks_answers_sampling_elicitation_and_roots(rwx_policy: SandboxPolicy, mode: str):
    callbacks = {"sampling_callback": answer_sampling, "elicitation_callback": answer_form}
    async with hub(rwx_policy, legacy_spec("d", asking_server())) as (_, _, server):
        async with client(server, mode, list_roots_callback=client_roots, **callbacks) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
    assert not result.is_error
    assert text_of(result) == "LLM<hello> accept:{'color': 'teal'} ['file:///client/project']"


@MODES
async def test_sampling_with_tools_passes_tool_use_and_the_request_through(rwx_policy: SandboxPolicy, mode: str):
    seen: list[types.CreateMessageRequestParams] = []

    async def with_tools(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResultWithTools:
        seen.append(params)
        use = types.ToolUseContent(id="tu_1", name="weather", input={"city": "Oslo"})
        return types.CreateMessageResultWithTools(role="assistant", content=[use], model="m2", stop_reason="toolUse")

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = await sample(ctx, "weather?", tools=[WEATHER], tool_choice=types.ToolChoice(mode="required"))
        assert isinstance(result, types.CreateMessageResultWithTools)
        use = result.content_as_list[0]
        assert isinstance(use, types.ToolUseContent)
        return types.CallToolResult(content=[types.TextContent(text=f"{use.name} {use.input} {result.stop_reason}")])

    tools = types.SamplingCapability(tools=types.SamplingToolsCapability())
    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode, sampling_callback=with_tools, sampling_capabilities=tools) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
    assert text_of(result) == "weather {'city': 'Oslo'} toolUse"
    assert seen[0].tools == [WEATHER] and seen[0].tool_choice == types.ToolChoice(mode="required")


@MODES
async def test_a_client_without_the_callbacks_is_declined_cleanly_and_omega_stays_up(
    rwx_policy: SandboxPolicy, mode: str
):
    errors: list[str] = []

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        for ask in (lambda: sample(ctx, "hi"), lambda: ctx.session.elicit_form("q?", FORM, ctx.request_id)):
            try:
                await ask()
            except MCPError as exc:
                errors.append(exc.message)
        return types.CallToolResult(content=[types.TextContent(text=f"roots={await list_roots(ctx)}")])

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode) as c:
            first = await c.call_tool("mcp__d__echo", {"text": "x"})
            second = await c.call_tool("mcp__d__echo", {"text": "y"})
    assert text_of(first) == text_of(second) == "roots=[]"  # no client roots, and no workspace given here
    assert len(errors) == 4
    assert "does not support sampling; set [sampling] in servers.toml" in errors[0]
    assert "does not support form elicitation" in errors[1]


async def test_without_client_roots_the_downstream_sees_the_roots_omega_was_given(rwx_policy: SandboxPolicy):
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=" ".join(await list_roots(ctx)))])

    requests = ClientRequests(roots=[rwx_policy.workspace])
    spec = legacy_spec("d", downstream("d", call=call))
    async with hub(rwx_policy, spec, client_requests=requests) as (_, _, server), client(server) as c:
        result = await c.call_tool("mcp__d__echo", {"text": "x"})
    assert text_of(result) == rwx_policy.workspace.as_uri()


async def test_url_elicitation_and_its_completion_reach_the_client(rwx_policy: SandboxPolicy):
    asked: list[types.ElicitRequestParams] = []
    completed = anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = await ctx.session.elicit_url("sign in", "https://example.com/login", "el-1", ctx.request_id)
        await ctx.session.send_elicit_complete("el-1")
        return types.CallToolResult(content=[types.TextContent(text=result.action)])

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept")

    async def messages(message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification) and message.params.elicitation_id == "el-1":
            completed.set()

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, elicitation_callback=elicit, message_handler=messages) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
            with deadline(5):
                await completed.wait()
    assert text_of(result) == "accept"
    assert isinstance(asked[0], types.ElicitRequestURLParams) and asked[0].url == "https://example.com/login"


class NoSampler:
    always = False

    async def sample(self, server_name: str, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=-1, message="no")


@pytest.mark.parametrize(("serving", "sampling"), [(True, False), (False, False), (False, True), (True, True)])
async def test_the_capabilities_declared_downstream_follow_what_omega_can_route(
    rwx_policy: SandboxPolicy, serving: bool, sampling: bool
):
    declared: list[dict[str, Any]] = []

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        declared.append(ctx.session.client_capabilities.model_dump(by_alias=True, exclude_none=True, mode="json"))
        return types.CallToolResult(content=[])

    requests = ClientRequests(serving=serving, sampler=NoSampler() if sampling else None)
    spec = legacy_spec("d", downstream("d", call=call))
    async with hub(rwx_policy, spec, client_requests=requests) as (_, toolbox, _):
        await toolbox.call_tool("mcp__d__echo", {"text": "x"})
    # The same JSON an `initialize` written before the SDK loads declares (proxy/declared.py).
    assert declared == [declared_capabilities(serving=serving, sampling=sampling)]
    assert "roots" in declared[0]  # always: a client's roots, else none
    assert ("elicitation" in declared[0]) == serving and ("sampling" in declared[0]) == (serving or sampling)


async def test_two_clients_each_get_only_their_own_calls_requests(rwx_policy: SandboxPolicy):
    both_running = anyio.Event()
    running: list[str] = []

    def server(name: str) -> Server[Any]:
        async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            running.append(name)
            if len(running) == 2:
                both_running.set()
            with deadline(5):
                await both_running.wait()  # both calls are in flight before either samples
            result = await sample(ctx, f"from {name}")
            assert isinstance(result.content, types.TextContent)
            return types.CallToolResult(content=[types.TextContent(text=result.content.text)])

        return downstream(name, call=call)

    seen: dict[str, list[str]] = {"A": [], "B": []}

    def sampler(who: str) -> Any:
        async def answer(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
            asked = params.messages[0].content
            assert isinstance(asked, types.TextContent)
            seen[who].append(asked.text)
            return types.CreateMessageResult(role="assistant", content=types.TextContent(text=who), model="m")

        return answer

    results: dict[str, str] = {}
    specs = legacy_spec("s1", server("s1")), legacy_spec("s2", server("s2"))
    async with hub(rwx_policy, *specs) as (_, _, omega):
        async with (
            client(omega, sampling_callback=sampler("A")) as a,
            client(omega, sampling_callback=sampler("B")) as b,
        ):

            async def run(c: Any, who: str, tool: str) -> None:
                results[who] = text_of(await c.call_tool(tool, {"text": "x"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, a, "A", "mcp__s1__echo")
                tg.start_soon(run, b, "B", "mcp__s2__echo")
    assert seen == {"A": ["from s1"], "B": ["from s2"]}
    assert results == {"A": "A", "B": "B"}


@MODES
async def test_calls_of_two_clients_on_one_server_at_once_each_ask_their_own_client(
    rwx_policy: SandboxPolicy, mode: str
):
    """A server's request rides the stream of the call that caused it (in process as over HTTP), so
    omega knows whose it is: concurrent clients never wait on, nor answer for, each other."""
    both_running = anyio.Event()
    running: list[int] = []

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        running.append(1)
        if len(running) == 2:
            both_running.set()
        with deadline(5):
            await both_running.wait()
        try:
            sampled = await sample(ctx, "whose?")
        except MCPError as exc:
            return types.CallToolResult(content=[types.TextContent(text=exc.message)])
        assert isinstance(sampled.content, types.TextContent)
        return types.CallToolResult(content=[types.TextContent(text=f"{params.arguments} {sampled.content.text}")])

    def answering(who: str) -> Any:
        async def answer(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
            return types.CreateMessageResult(role="assistant", content=types.TextContent(text=who), model="m")

        return answer

    texts: dict[str, str] = {}
    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with (
            client(omega, mode, sampling_callback=answering("A")) as a,
            client(omega, mode, sampling_callback=answering("B")) as b,
        ):

            async def run(c: Any, who: str) -> None:
                texts[who] = text_of(await c.call_tool("mcp__d__echo", {"text": who}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, a, "A")
                tg.start_soon(run, b, "B")
    assert texts == {"A": "{'text': 'A'} A", "B": "{'text': 'B'} B"}


@MODES
async def test_two_calls_of_one_client_on_one_server_at_once_are_both_answered(rwx_policy: SandboxPolicy, mode: str):
    both_running = anyio.Event()
    running: list[str] = []

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = (params.arguments or {})["text"]
        running.append(text)
        if len(running) == 2:
            both_running.set()
        with deadline(5):
            await both_running.wait()
        result = await sample(ctx, text)
        assert isinstance(result.content, types.TextContent)
        return types.CallToolResult(content=[types.TextContent(text=result.content.text)])

    texts: dict[str, str] = {}
    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with client(omega, mode, sampling_callback=answer_sampling) as c:

            async def run(text: str) -> None:
                texts[text] = text_of(await c.call_tool("mcp__d__echo", {"text": text}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "one")
                tg.start_soon(run, "two")
    assert texts == {"one": "LLM<one>", "two": "LLM<two>"}


async def test_a_request_outside_any_call_goes_to_the_client_that_connected_first(rwx_policy: SandboxPolicy):
    sessions: list[Any] = []

    async def roots_of(uri: str) -> Any:
        async def answer(context: Any) -> types.ListRootsResult:
            return types.ListRootsResult(roots=[types.Root.model_validate({"uri": uri})])

        return answer

    async with hub(rwx_policy, legacy_spec("d", downstream("d", sessions=sessions))) as (_, toolbox, omega):
        await toolbox.list_tools()  # the downstream's session is recorded when omega lists its tools
        first, second = await roots_of("file:///first"), await roots_of("file:///second")
        async with client(omega, list_roots_callback=first), client(omega, list_roots_callback=second):
            result = await sessions[-1].send_request(types.ListRootsRequest(), types.ListRootsResult)
    assert [str(root.uri) for root in result.roots] == ["file:///first"]


async def test_progress_from_the_client_reaches_the_downstream_under_its_token(rwx_policy: SandboxPolicy):
    progress: list[tuple[float, float | None, str | None]] = []
    arrived = anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))
            arrived.set()

        message = types.SamplingMessage(role="user", content=types.TextContent(text="slow"))
        request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[message], max_tokens=10))
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        await ctx.session.send_request(
            request, types.CreateMessageResult, metadata=metadata, progress_callback=on_progress
        )
        with deadline(5):
            await arrived.wait()  # the progress notification may trail the answer
        return types.CallToolResult(content=[])

    async def answer(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        token = (params.meta or {}).get("progress_token")
        assert token is not None  # omega asked for progress under a token of its own
        update = types.ProgressNotificationParams(progress_token=token, progress=1, total=2, message="half")
        await context.session.send_notification(types.ProgressNotification(params=update))
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="ok"), model="m")

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with client(omega, sampling_callback=answer) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
    assert not result.is_error
    assert progress == [(1.0, 2.0, "half")]


async def test_a_client_cancelling_the_call_cancels_the_downstream_waiting_on_sampling(rwx_policy: SandboxPolicy):
    asked, downstream_cancelled, client_cancelled = anyio.Event(), anyio.Event(), anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            await sample(ctx, "wait")
        finally:
            downstream_cancelled.set()
        raise AssertionError("unreachable")

    async def stuck(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.set()
        try:
            await anyio.sleep_forever()
        finally:
            client_cancelled.set()
        raise AssertionError("unreachable")

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with client(omega, sampling_callback=stuck) as c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(c.call_tool, "mcp__d__echo", {"text": "x"})
                with deadline(5):
                    await asked.wait()
                tg.cancel_scope.cancel()
            with deadline(5):
                await downstream_cancelled.wait()  # the call was cancelled downstream...
                await client_cancelled.wait()  # ...which withdrew its sampling request from the client


async def test_a_downstream_withdrawing_its_request_cancels_it_at_the_client(rwx_policy: SandboxPolicy):
    asked, client_cancelled = anyio.Event(), anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sample, ctx, "maybe")
            with deadline(5):
                await asked.wait()
            tg.cancel_scope.cancel()  # the tool gives up on the answer
        return types.CallToolResult(content=[types.TextContent(text="gave up")])

    async def stuck(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.set()
        try:
            await anyio.sleep_forever()
        finally:
            client_cancelled.set()
        raise AssertionError("unreachable")

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with client(omega, sampling_callback=stuck) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
            with deadline(5):
                await client_cancelled.wait()
    assert text_of(result) == "gave up"


async def test_roots_list_changed_reaches_the_downstreams(rwx_policy: SandboxPolicy):
    changes: list[int] = []
    changed = anyio.Event()

    async def on_roots_list_changed(ctx: Any, params: Any) -> None:
        changes.append(1)
        changed.set()

    server = downstream("d")  # (the constructor's on_roots_list_changed warns: roots are deprecated in 2026)
    server.add_notification_handler("notifications/roots/list_changed", types.NotificationParams, on_roots_list_changed)
    async with hub(rwx_policy, legacy_spec("d", server)) as (_, toolbox, omega):
        await toolbox.list_tools()
        async with client(omega, list_roots_callback=client_roots) as c:
            with deadline(5):
                await changed.wait()  # the first client with roots: downstreams no longer see the workspace
            changed = anyio.Event()
            await c.session.send_notification(types.RootsListChangedNotification())
            with deadline(5):
                await changed.wait()
    assert len(changes) >= 2


async def test_a_modern_client_that_never_comes_back_has_its_call_cancelled(
    rwx_policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(bridge, "IDLE_SECONDS", 0.2)
    cancelled = anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            await sample(ctx, "anyone?")
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with client(omega, "auto", sampling_callback=answer_sampling) as c:
            first = await c.session.call_tool("mcp__d__echo", {"text": "x"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult) and first.input_requests
            with deadline(5):
                await cancelled.wait()  # nobody answered within IDLE_SECONDS: the call was cancelled downstream
            with pytest.raises(MCPError) as info:
                await c.session.call_tool(
                    "mcp__d__echo", {"text": "x"}, request_state=first.request_state, allow_input_required=True
                )
    assert "requestState" in info.value.message


async def test_a_modern_clients_unknown_request_state_is_an_invalid_params_error(rwx_policy: SandboxPolicy):
    """Whether it looks like one of omega's rounds or like a server's own: a handshake-era server has none."""
    errors: list[MCPError] = []
    async with hub(rwx_policy, legacy_spec("d", asking_server())) as (_, _, omega):
        async with client(omega, "auto") as c:
            for forged in (f"{bridge.STATE_PREFIX}forged", "forged"):
                with pytest.raises(MCPError) as info:
                    await c.session.call_tool(
                        "mcp__d__echo", {"text": "x"}, request_state=forged, allow_input_required=True
                    )
                errors.append(info.value)
    assert [(e.code, "requestState" in e.message) for e in errors] == [(types.INVALID_PARAMS, True)] * 2


# -- through the real CLI: `omega-mcp serve` on stdio, a stdio downstream, the relay in between ----


def omega_serve(tmp_path: Path, extra: str = "", **env: str) -> StdioServerParameters:
    """`omega-mcp serve` with one stdio server `s` (tests/fixtures/asking_server.py)."""
    ws, markers = tmp_path / "ws", tmp_path / "markers"
    ws.mkdir(exist_ok=True)
    markers.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    script = FIXTURES / "asking_server.py"
    config.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n\n'
        f'[servers.s]\ncommand = "{sys.executable}"\nargs = ["{script}", "{markers}"]\nera = "handshake"\n{extra}'
    )
    command = ["-m", "omega_mcp", "serve", "--config", str(config)]
    return StdioServerParameters(command=sys.executable, args=command, env=cli_env(tmp_path) | env, cwd=tmp_path)


@MODES
@pytest.mark.e2e
async def test_through_the_cli_a_stdio_servers_requests_reach_the_client(tmp_path: Path, mode: str):
    callbacks = {"sampling_callback": answer_sampling, "list_roots_callback": client_roots}
    async with mcp.Client(omega_serve(tmp_path), mode=mode, **callbacks) as c:
        await listed(c, "mcp__s__ask")  # connected: a handshake-era call then takes the relay
        result = await c.call_tool("mcp__s__ask", {"text": "over stdio"})
    answer, roots, request_id = text_of(result).split(" | ")
    assert (answer, roots) == ("LLM<over stdio>", "file:///client/project")
    # A handshake-era call takes the relay (fast path); a 2026-era one the input-required rounds.
    assert request_id.startswith("omega-relay-") == (mode == "legacy")


@MODES
@pytest.mark.e2e
async def test_through_the_cli_a_stdio_servers_request_while_a_prompt_is_got_reaches_the_client(
    tmp_path: Path, mode: str
):
    """Over stdio nothing says whose request it is: the client whose `prompts/get` runs there is asked."""
    async with mcp.Client(omega_serve(tmp_path), mode=mode, sampling_callback=answer_sampling) as c:
        await c.list_prompts()
        got = await c.get_prompt("s__sampled")
    content = got.messages[0].content
    assert isinstance(content, types.TextContent) and content.text == "LLM<prompt>"


@MODES
@pytest.mark.e2e
async def test_through_the_cli_a_client_without_callbacks_gets_a_clean_decline(tmp_path: Path, mode: str):
    async with mcp.Client(omega_serve(tmp_path), mode=mode) as c:
        first = await c.call_tool("mcp__s__ask", {"text": "x"})
        second = await c.call_tool("mcp__s__ask", {"text": "y"})
    assert text_of(first).startswith("error -32600: omega cannot pass on sampling/createMessage from server s")
    assert text_of(second).startswith("error -32600:")


@pytest.mark.e2e
async def test_through_the_cli_cancelling_a_relayed_call_reaches_the_downstream_and_its_request(tmp_path: Path):
    asked, client_cancelled = anyio.Event(), anyio.Event()

    async def stuck(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.set()
        try:
            await anyio.sleep_forever()
        finally:
            client_cancelled.set()
        raise AssertionError("unreachable")

    async with mcp.Client(omega_serve(tmp_path), mode="legacy", sampling_callback=stuck) as c:
        await c.list_tools()
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.call_tool, "mcp__s__ask", {"text": "x"})
            with deadline(30):
                await asked.wait()
            tg.cancel_scope.cancel()
        await wait_until(lambda: (tmp_path / "markers" / "cancelled").exists())
        with deadline(10):
            await client_cancelled.wait()  # the downstream withdrew its request; omega withdrew it here


_HUB_TOKEN = "passthrough-hub-token"


@pytest.fixture
def http_hub(tmp_path: Path) -> Iterator[str]:
    """`omega-mcp serve --http` on a free loopback port with server `s`; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    params = omega_serve(tmp_path)
    command = [params.command, *params.args, "--http", "--port", str(port)]
    with (tmp_path / "hub.log").open("wb") as log:
        env = {**(params.env or {}), "OMEGA_TOKEN": _HUB_TOKEN}
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "hub.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the hub did not listen within 30 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@MODES
@pytest.mark.e2e
async def test_over_the_http_hub_each_client_answers_its_own_calls_requests(http_hub: str, mode: str):
    def answering(who: str) -> Any:
        async def answer(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
            return types.CreateMessageResult(role="assistant", content=types.TextContent(text=who), model="m")

        return answer

    async with (
        hub_client(http_hub, _HUB_TOKEN, mode=mode, sampling_callback=answering("first")) as first,
        hub_client(
            http_hub, _HUB_TOKEN, mode=mode, sampling_callback=answering("second"), list_roots_callback=client_roots
        ) as second,
    ):
        await first.list_tools()
        one = await first.call_tool("mcp__s__ask", {"text": "x"})
        two = await second.call_tool("mcp__s__ask", {"text": "y"})
    assert text_of(one).split(" | ")[0] == "first"
    assert text_of(two).split(" | ")[:2] == ["second", "file:///client/project"]


# -- the bridge's rounds: one state per round, prompts too, clients independent ------------------


async def _name_of(ctx: Any, question: str) -> str:
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    request = types.ElicitRequest(params=types.ElicitRequestFormParams(message=question, requested_schema=FORM))
    answer = await ctx.session.send_request(request, types.ElicitResult, metadata=metadata)
    return str((answer.content or {}).get("color"))


async def test_each_bridged_round_has_a_state_of_its_own_and_a_used_one_is_refused(rwx_policy: SandboxPolicy):
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        first, second = await _name_of(ctx, "one?"), await _name_of(ctx, "two?")
        return types.CallToolResult(content=[types.TextContent(text=f"{first}+{second}")])

    def answer(color: str) -> types.InputResponses:
        return {"k": types.ElicitResult(action="accept", content={"color": color})}

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with client(omega, "auto", elicitation_callback=answer_form) as c:
            one = await c.session.call_tool("mcp__d__echo", {"text": "x"}, allow_input_required=True)
            assert isinstance(one, types.InputRequiredResult) and one.request_state
            key = next(iter(one.input_requests or {}))
            two = await c.session.call_tool(
                "mcp__d__echo",
                {"text": "x"},
                input_responses={key: answer("red")["k"]},
                request_state=one.request_state,
                allow_input_required=True,
            )
            assert isinstance(two, types.InputRequiredResult) and two.request_state
            with pytest.raises(MCPError) as reused:
                await c.session.call_tool(
                    "mcp__d__echo", {"text": "x"}, request_state=one.request_state, allow_input_required=True
                )
            key = next(iter(two.input_requests or {}))
            done = await c.session.call_tool(
                "mcp__d__echo",
                {"text": "x"},
                input_responses={key: answer("blue")["k"]},
                request_state=two.request_state,
                allow_input_required=True,
            )
    assert one.request_state != two.request_state
    assert reused.value.code == types.INVALID_PARAMS
    assert isinstance(done, types.CallToolResult) and text_of(done) == "red+blue"


async def test_a_prompt_that_asks_mid_request_reaches_a_2026_client_as_rounds(rwx_policy: SandboxPolicy):
    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[types.Prompt(name="paint")])

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        color = await _name_of(ctx, "favourite color?")
        message = types.PromptMessage(role="user", content=types.TextContent(text=f"paint it {color}"))
        return types.GetPromptResult(messages=[message])

    server = downstream("d", on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    async with hub(rwx_policy, legacy_spec("d", server)) as (_, _, omega):
        async with client(omega, "auto", elicitation_callback=answer_form) as c:
            result = await c.get_prompt("d__paint")  # the SDK client's own driver answers the round
        async with client(omega, "legacy", elicitation_callback=answer_form) as c:
            direct = await c.get_prompt("d__paint")  # a handshake-era client is simply asked
    for got in (result, direct):
        content = got.messages[0].content
        assert isinstance(content, types.TextContent) and content.text == "paint it teal"


async def test_an_abandoned_round_does_not_hold_up_another_clients_request(rwx_policy: SandboxPolicy):
    """One client never comes back for its round; another client's call on the same server is asked at once."""

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=await _name_of(ctx, "favourite color?"))])

    async with hub(rwx_policy, legacy_spec("d", downstream("d", call=call))) as (_, _, omega):
        async with (
            client(omega, "auto", elicitation_callback=answer_form) as leaving,
            client(omega, "legacy", elicitation_callback=answer_form) as other,
        ):
            abandoned = await leaving.session.call_tool("mcp__d__echo", {"text": "x"}, allow_input_required=True)
            assert isinstance(abandoned, types.InputRequiredResult)
            with deadline(5):
                result = await other.call_tool("mcp__d__echo", {"text": "y"})
    assert text_of(result) == "teal"
