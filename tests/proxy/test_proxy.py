"""The aggregator with in-process downstream servers: naming, passthrough, validation, timeouts,
progress, cancellation, concurrency, list_changed, prompts and resources."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from omega_mcp._sdk import Streams
from omega_mcp.errors import DownstreamRefusedError
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import Notifications, client, downstream, downstream_spec, echo_tool, gated, hub
from waits import deadline

BUILTINS = ["bash", "read", "write", "edit", "bash_output", "kill_shell"]
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])


async def test_downstream_tools_follow_the_builtins_in_config_then_server_order(rwx_policy: SandboxPolicy):
    a = downstream("a", [echo_tool("zeta"), echo_tool("alpha")])
    b = downstream("b", [echo_tool("get.weather")])
    async with hub(rwx_policy, downstream_spec("b", b), downstream_spec("a", a)) as (_, _, server):
        async with client(server) as c:
            names = [t.name for t in (await c.list_tools()).tools]
    assert names == [*BUILTINS, "mcp__b__get_weather", "mcp__a__zeta", "mcp__a__alpha"]


@MODES
async def test_every_tool_field_passes_through_unchanged(rwx_policy: SandboxPolicy, mode: str):
    tool = types.Tool(
        name="fancy",
        title="Fancy tool",
        description="Does fancy things.",
        input_schema={"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]},
        output_schema={"type": "object", "properties": {"double": {"type": "integer"}}},
        annotations=types.ToolAnnotations(title="Fancy", read_only_hint=True, idempotent_hint=True),
        _meta={"vendor/flag": {"x": 1}},
    )
    async with hub(rwx_policy, downstream_spec("d", downstream("d", [tool]))) as (_, _, server):
        async with client(server, mode) as c:
            listed = {t.name: t for t in (await c.list_tools()).tools}["mcp__d__fancy"]
    dump = dict(exclude={"name"}, by_alias=True, exclude_none=True)
    assert listed.model_dump(**dump) == tool.model_dump(**dump)  # type: ignore[arg-type]


RICH = types.CallToolResult(
    content=[
        types.TextContent(text="hello", annotations=types.Annotations(priority=0.5)),
        types.ImageContent(data=base64.b64encode(b"\x89PNG").decode(), mime_type="image/png"),
        types.AudioContent(data=base64.b64encode(b"RIFF").decode(), mime_type="audio/wav"),
        types.ResourceLink(name="doc", uri="file:///doc.txt", mime_type="text/plain"),
        types.EmbeddedResource(resource=types.TextResourceContents(uri="file:///e.txt", text="embedded")),
        types.EmbeddedResource(resource=types.BlobResourceContents(uri="file:///b.bin", blob="AAEC")),
    ],
    structured_content={"double": 4},
    _meta={"vendor/trace": "t-1"},
)


@MODES
async def test_every_content_block_structured_content_and_meta_come_back_unchanged(
    rwx_policy: SandboxPolicy, mode: str
):
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return RICH

    tool = types.Tool(name="rich", input_schema={"type": "object"}, output_schema={"type": "object"})
    async with hub(rwx_policy, downstream_spec("d", downstream("d", [tool], call))) as (_, _, server):
        async with client(server, mode) as c:
            result = await c.call_tool("mcp__d__rich", {})
    dump = dict(by_alias=True, exclude_none=True, exclude={"meta"})
    assert result.model_dump(**dump) == RICH.model_dump(**dump)  # type: ignore[arg-type]
    assert result.meta is not None and result.meta["vendor/trace"] == "t-1"


@MODES
async def test_an_is_error_result_of_a_downstream_comes_back_as_is(rwx_policy: SandboxPolicy, mode: str):
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="tool said no")], is_error=True)

    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
    assert result.is_error and result.content[0].text == "tool said no"  # type: ignore[union-attr]


@MODES
async def test_arguments_are_checked_against_the_downstream_schema_before_forwarding(
    rwx_policy: SandboxPolicy, mode: str
):
    calls: list[str] = []

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        calls.append(params.name)
        return types.CallToolResult(content=[])

    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode) as c:
            wrong_type = await c.call_tool("mcp__d__echo", {"text": 5})
            missing = await c.call_tool("mcp__d__echo", {})
    assert wrong_type.is_error and "`text`" in wrong_type.content[0].text  # type: ignore[union-attr]
    assert "not of type 'string'" in wrong_type.content[0].text  # type: ignore[union-attr]
    assert missing.is_error and "'text' is a required property" in missing.content[0].text  # type: ignore[union-attr]
    assert calls == []


@MODES
async def test_an_optional_argument_given_as_null_is_forwarded_as_it_is(rwx_policy: SandboxPolicy, mode: str):
    """As a direct client would send it: the server judges a null it did not require (a required one is refused)."""
    seen: list[dict[str, Any]] = []
    tool = types.Tool(
        name="region",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string"}, "region": {"type": "string"}},
            "required": ["name"],
        },
    )

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        seen.append(dict(params.arguments or {}))
        return types.CallToolResult(content=[])

    async with hub(rwx_policy, downstream_spec("d", downstream("d", [tool], call=call))) as (_, _, server):
        async with client(server, mode) as c:
            passed = await c.call_tool("mcp__d__region", {"name": "x", "region": None})
            refused = await c.call_tool("mcp__d__region", {"name": None})
    assert not passed.is_error and seen == [{"name": "x", "region": None}]
    assert refused.is_error and "`name`" in refused.content[0].text  # type: ignore[union-attr]


async def test_a_schema_that_cannot_be_checked_offline_is_left_to_the_downstream(
    rwx_policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
):
    import urllib.request

    fetched: list[object] = []

    def urlopen(request: object, *args: object, **kwargs: object) -> object:
        fetched.append(request)
        raise OSError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)  # what jsonschema retrieves remote refs with
    remote = {"type": "object", "properties": {"a": {"$ref": "http://schemas.example/never-fetched.json"}}}
    bad_pattern = {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}
    tools = [
        types.Tool(name="remote", input_schema=remote),
        types.Tool(name="pattern", input_schema=bad_pattern),
    ]
    async with hub(rwx_policy, downstream_spec("d", downstream("d", tools))) as (_, toolbox, _):
        results = [await toolbox.call_tool(f"mcp__d__{t.name}", {"a": "x"}) for t in tools]
    assert fetched == []  # a tool's schema never makes omega fetch a URL
    assert [r.content[0].text for r in results] == ["remote:", "pattern:"]  # type: ignore[union-attr]


async def test_aliases_reach_the_downstream_tool(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, downstream_spec("d", downstream("d"))) as (_, toolbox, _):
        for name in ("mcp__d__echo", "d.echo", "d__echo"):
            result = await toolbox.call_tool(name, {"text": "hi"})
            assert result.content[0].text == "echo:hi"  # type: ignore[union-attr]


async def test_an_unknown_tool_of_a_connected_server_is_unknown_tool_with_suggestions(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, downstream_spec("d", downstream("d"))) as (_, _, server):
        async with client(server) as c:
            with pytest.raises(MCPError) as info:
                await c.call_tool("mcp__d__ecko", {"text": "x"})
    assert "Unknown tool" in info.value.message and "mcp__d__echo" in info.value.message


async def test_a_json_rpc_error_from_the_downstream_reaches_a_client_as_is_and_the_agent_as_a_sentence(
    rwx_policy: SandboxPolicy,
):
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        raise MCPError(code=types.INVALID_PARAMS, message="no such widget")

    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (_, toolbox, server):
        async with client(server) as c:
            with pytest.raises(MCPError) as caught:
                await c.call_tool("mcp__d__echo", {"text": "x"})
        with pytest.raises(DownstreamRefusedError) as refused:  # the agent loop and `call` get its sentence
            await toolbox.call_tool("mcp__d__echo", {"text": "x"})
    assert (caught.value.code, caught.value.message) == (types.INVALID_PARAMS, "no such widget")
    assert "server d" in str(refused.value) and "no such widget" in str(refused.value)


async def test_tools_and_exclude_tools_globs_filter_the_exported_tools(rwx_policy: SandboxPolicy):
    tools = [echo_tool("get_time"), echo_tool("get_secret"), echo_tool("set_time")]
    spec = downstream_spec("d", downstream("d", tools), tools=("get_*",), exclude_tools=("*secret*",))
    async with hub(rwx_policy, spec) as (_, toolbox, _):
        names = [t.name for t in await toolbox.list_tools()]
        with pytest.raises(Exception, match="Unknown tool"):
            await toolbox.call_tool("mcp__d__set_time", {"text": "x"})
    assert names == [*BUILTINS, "mcp__d__get_time"]


@MODES
async def test_request_meta_is_passed_downstream_without_the_per_hop_keys(rwx_policy: SandboxPolicy, mode: str):
    seen: list[dict[str, Any]] = []

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        seen.append(dict(params.meta or {}))
        return types.CallToolResult(content=[])

    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode) as c:
            await c.call_tool("mcp__d__echo", {"text": "x"}, meta={"vendor/tool-use-id": "tu-1"})
    assert seen[0]["vendor/tool-use-id"] == "tu-1"
    reserved = {k: v for k, v in seen[0].items() if k.startswith("io.modelcontextprotocol/")}
    if mode == "legacy":  # a handshake-era client's call goes over a handshake-era link: no envelope
        assert reserved == {}
    else:  # a 2026-era one's carries this hop's envelope: the client's own info and capabilities
        assert reserved["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert reserved["io.modelcontextprotocol/clientInfo"]["name"] == "mcp"
        assert set(reserved) == {
            f"io.modelcontextprotocol/{k}" for k in ("protocolVersion", "clientInfo", "clientCapabilities")
        }


@MODES
async def test_a_timeout_cancels_the_downstream_request_and_is_an_is_error_result(rwx_policy: SandboxPolicy, mode: str):
    started, cancelled = anyio.Event(), anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    spec = downstream_spec("d", downstream("d", call=call), timeout_seconds=0.3)
    async with hub(rwx_policy, spec) as (_, _, server):
        async with client(server, mode) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"})
            with deadline(5):
                await cancelled.wait()
    assert started.is_set()
    assert result.is_error and "timed out after 0.3 s" in result.content[0].text  # type: ignore[union-attr]


@MODES
async def test_progress_notifications_reach_the_calling_client(rwx_policy: SandboxPolicy, mode: str):
    received: list[tuple[float, float | None, str | None]] = []
    forwarded = anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        await ctx.session.report_progress(1, 4, "quarter")
        with deadline(5):  # return only once the progress has arrived upstream
            await forwarded.wait()
        return types.CallToolResult(content=[types.TextContent(text="done")])

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((progress, total, message))
        forwarded.set()

    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode) as c:
            result = await c.call_tool("mcp__d__echo", {"text": "x"}, progress_callback=on_progress)
    assert not result.is_error
    assert received == [(1.0, 4.0, "quarter")]


@MODES
async def test_a_client_cancellation_is_forwarded_to_the_downstream(rwx_policy: SandboxPolicy, mode: str):
    started, cancelled = anyio.Event(), anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode) as c, anyio.create_task_group() as tg:
            tg.start_soon(c.call_tool, "mcp__d__echo", {"text": "x"})
            with deadline(5):
                await started.wait()
            tg.cancel_scope.cancel()
        with deadline(5):
            await cancelled.wait()


@MODES
async def test_two_calls_to_one_server_run_concurrently(rwx_policy: SandboxPolicy, mode: str):
    first_waiting, second_done = anyio.Event(), anyio.Event()

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = (params.arguments or {})["text"]
        if text == "first":
            first_waiting.set()
            with deadline(5):  # only finishes if the second call runs meanwhile
                await second_done.wait()
        else:
            with deadline(5):
                await first_waiting.wait()
            second_done.set()
        return types.CallToolResult(content=[types.TextContent(text=text)])

    results: dict[str, types.CallToolResult] = {}
    async with hub(rwx_policy, downstream_spec("d", downstream("d", call=call))) as (_, _, server):
        async with client(server, mode) as c:

            async def run(text: str) -> None:
                results[text] = await c.call_tool("mcp__d__echo", {"text": text})

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "first")
                tg.start_soon(run, "second")
    assert not results["first"].is_error and not results["second"].is_error


async def test_a_downstream_tools_list_changed_is_followed_and_sent_upstream(rwx_policy: SandboxPolicy):
    tools = [echo_tool("one")]
    sessions: list[Any] = []
    notes = Notifications()
    spec = downstream_spec("d", downstream("d", tools, sessions=sessions), era="handshake")  # notifies the session
    async with hub(rwx_policy, spec) as (ds, _, server):
        await ds.wait_ready()  # no startup announcements: the one notification below is the change
        async with client(server, message_handler=notes) as c:
            assert "mcp__d__one" in [t.name for t in (await c.list_tools()).tools]
            tools.append(echo_tool("two"))
            await sessions[0].send_tool_list_changed()
            await notes.next()
            names = [t.name for t in (await c.list_tools()).tools]
    assert names[-2:] == ["mcp__d__one", "mcp__d__two"]


async def test_a_modern_client_hears_of_tool_changes_through_subscriptions_listen(rwx_policy: SandboxPolicy):
    gate = anyio.Event()
    spec = downstream_spec("late", gated(downstream("late"), gate))
    async with hub(rwx_policy, spec, startup_wait_seconds=0.1) as (_, _, server):
        async with client(server, "auto") as c:
            assert "mcp__late__echo" not in [t.name for t in (await c.list_tools()).tools]
            async with c.listen(tools_list_changed=True) as subscription:
                gate.set()
                with deadline(10):
                    async for _ in subscription:
                        break
            assert "mcp__late__echo" in [t.name for t in (await c.list_tools()).tools]


async def test_by_default_the_first_tools_list_waits_for_a_server_that_is_still_starting(rwx_policy: SandboxPolicy):
    gate = anyio.Event()
    listed: list[str] = []
    async with hub(rwx_policy, downstream_spec("slow", gated(downstream("slow"), gate))) as (_, _, server):
        async with client(server) as c:

            async def list_now() -> None:
                listed.extend(t.name for t in (await c.list_tools()).tools)

            async with anyio.create_task_group() as tg:
                tg.start_soon(list_now)
                await anyio.wait_all_tasks_blocked()
                assert listed == []  # still waiting for the slow server
                gate.set()
    assert listed[-1] == "mcp__slow__echo"


async def test_a_server_arriving_after_the_startup_wait_is_announced_with_list_changed(rwx_policy: SandboxPolicy):
    gate = anyio.Event()
    notes = Notifications()
    specs = (downstream_spec("fast", downstream("fast")), downstream_spec("late", gated(downstream("late"), gate)))
    async with hub(rwx_policy, *specs, startup_wait_seconds=0.1) as (downstreams, _, server):
        await downstreams.wait_settled(["fast"])  # on a busy machine 0.1 s may not be enough for it
        async with client(server, message_handler=notes) as c:
            first = [t.name for t in (await c.list_tools()).tools]
            gate.set()
            second = first
            while "mcp__late__echo" not in second:  # the fast server may have been announced too
                await notes.next()
                second = [t.name for t in (await c.list_tools()).tools]
    assert "mcp__fast__echo" in first and "mcp__late__echo" not in first
    assert second[-2:] == ["mcp__fast__echo", "mcp__late__echo"]


async def test_after_the_startup_wait_a_listing_answers_at_once_while_a_server_is_still_starting(
    rwx_policy: SandboxPolicy,
):
    gate = anyio.Event()
    specs = (downstream_spec("fast", downstream("fast")), downstream_spec("slow", gated(downstream("slow"), gate)))
    async with hub(rwx_policy, *specs, startup_wait_seconds=0) as (downstreams, _, server):
        await downstreams.wait_settled(["fast"])
        async with client(server) as c:
            tools = [t.name for t in (await c.list_tools()).tools]
            prompts = await c.list_prompts()
            resources = await c.list_resources()
        assert not gate.is_set() and downstreams.starting("mcp__slow__echo") == ["slow"]
    assert tools == [*BUILTINS, "mcp__fast__echo"]
    assert prompts.prompts == [] and resources.resources == []


@MODES
async def test_a_call_to_a_starting_server_waits_for_it_without_holding_up_other_calls(
    rwx_policy: SandboxPolicy, mode: str
):
    gate = anyio.Event()
    specs = (downstream_spec("fast", downstream("fast")), downstream_spec("slow", gated(downstream("slow"), gate)))
    order: list[str] = []
    async with hub(rwx_policy, *specs, startup_wait_seconds=0) as (_, _, server):
        async with client(server, mode) as c:

            async def slow_call() -> None:
                result = await c.call_tool("mcp__slow__echo", {"text": "late"})
                order.append(f"slow: {result.content[0].text}")  # type: ignore[union-attr]

            async with anyio.create_task_group() as tg:
                tg.start_soon(slow_call)
                await anyio.wait_all_tasks_blocked()
                fast = await c.call_tool("mcp__fast__echo", {"text": "now"})
                order.append(f"fast: {fast.content[0].text}")  # type: ignore[union-attr]
                builtin = await c.call_tool("bash", {"command": "echo built-in"})
                order.append(f"bash: {builtin.content[0].text.strip()}")  # type: ignore[union-attr]
                gate.set()
    assert order == ["fast: echo:now", "bash: built-in", "slow: echo:late"]


async def test_a_call_to_a_starting_server_that_fails_gets_its_failure(rwx_policy: SandboxPolicy):
    @asynccontextmanager
    async def broken() -> AsyncIterator[Streams]:
        raise OSError("no such program")
        yield  # pragma: no cover

    async with hub(rwx_policy, downstream_spec("gone", broken), startup_wait_seconds=0, backoff_seconds=30) as (
        _,
        toolbox,
        _,
    ):
        result = await toolbox.call_tool("mcp__gone__echo", {"text": "x"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert result.is_error and "server gone is down" in text and "no such program" in text


async def test_a_server_that_never_answers_initialize_is_skipped_after_its_connect_timeout(
    rwx_policy: SandboxPolicy,
):
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def silent() -> AsyncIterator[Streams]:
        read_send, read_recv = anyio.create_memory_object_stream[Any](0)
        write_send, write_recv = anyio.create_memory_object_stream[Any](100)
        async with read_send, read_recv, write_send, write_recv:
            yield read_recv, write_send

    specs = (downstream_spec("mute", silent, connect_timeout_seconds=0.3), downstream_spec("ok", downstream("ok")))
    async with hub(rwx_policy, *specs, backoff_seconds=30) as (downstreams, toolbox, _):
        names = [t.name for t in await toolbox.list_tools()]
        down = await toolbox.call_tool("mcp__mute__anything", {})
        ok = await toolbox.call_tool("mcp__ok__echo", {"text": "fine"})
        status = {s.server_name: s for s in downstreams.statuses()}
    assert "mcp__ok__echo" in names
    assert not ok.is_error
    assert status["mute"].state == "failed" and "connect_timeout (0.3 s)" in (status["mute"].reason or "")
    text = down.content[0].text  # type: ignore[union-attr]
    assert down.is_error and "server mute is down" in text and "omega will retry in" in text


async def test_a_disabled_server_is_listed_as_disabled_and_its_tools_say_so(rwx_policy: SandboxPolicy):
    spec = downstream_spec("off", downstream("off"), enabled=False)
    async with hub(rwx_policy, spec) as (downstreams, toolbox, _):
        result = await toolbox.call_tool("mcp__off__echo", {"text": "x"})
        assert [s.state for s in downstreams.statuses()] == ["disabled"]
    assert result.is_error and "disabled" in result.content[0].text  # type: ignore[union-attr]


def _prompt_server(name: str, prompt: str) -> Any:
    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[types.Prompt(name=prompt, description="Say hi", arguments=[types.PromptArgument(name="who")])]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        who = (params.arguments or {}).get("who", "?")
        return types.GetPromptResult(
            messages=[types.PromptMessage(role="user", content=types.TextContent(text=f"{name} says hi to {who}"))]
        )

    return downstream(name, on_list_prompts=list_prompts, on_get_prompt=get_prompt)


async def test_getting_a_prompt_of_a_starting_server_waits_for_that_server(rwx_policy: SandboxPolicy):
    gate = anyio.Event()
    got: list[str] = []
    spec = downstream_spec("slow", gated(_prompt_server("slow", "greet"), gate))
    async with hub(rwx_policy, spec, startup_wait_seconds=0) as (_, _, server):
        async with client(server) as c:
            assert (await c.list_prompts()).prompts == []  # at once: the server is not up yet

            async def get() -> None:
                result = await c.get_prompt("slow__greet", {"who": "bo"})
                got.append(result.messages[0].content.text)  # type: ignore[union-attr]

            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                await anyio.wait_all_tasks_blocked()
                assert got == []  # waiting for the server, not refused
                gate.set()
    assert got == ["slow says hi to bo"]


@MODES
async def test_downstream_prompts_are_exported_as_server__prompt(rwx_policy: SandboxPolicy, mode: str):
    specs = (downstream_spec("a", _prompt_server("a", "greet")), downstream_spec("b", _prompt_server("b", "greet")))
    async with hub(rwx_policy, *specs) as (_, _, server):
        async with client(server, mode) as c:
            names = [p.name for p in (await c.list_prompts()).prompts]
            got = await c.get_prompt("b__greet", {"who": "ana"})
            with pytest.raises(MCPError, match="Unknown prompt"):
                await c.get_prompt("c__greet", {})
    assert names == ["a__greet", "b__greet"]
    assert got.messages[0].content.text == "b says hi to ana"  # type: ignore[union-attr]


def _resource_server(name: str, uris: list[str], template: str | None = None) -> Any:
    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(name=u, uri=u) for u in uris])

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        listed = [types.ResourceTemplate(name="t", uri_template=template)] if template else []
        return types.ListResourceTemplatesResult(resource_templates=listed)

    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text=f"{name} has {params.uri}")]
        )

    return downstream(
        name, on_list_resources=list_resources, on_list_resource_templates=list_templates, on_read_resource=read
    )


@MODES
async def test_resources_keep_their_uris_and_the_first_server_in_config_order_wins(
    rwx_policy: SandboxPolicy, mode: str
):
    specs = (
        downstream_spec("a", _resource_server("a", ["file:///shared", "file:///only-a"])),
        downstream_spec("b", _resource_server("b", ["file:///shared", "file:///only-b"], "note://{id}")),
    )
    async with hub(rwx_policy, *specs) as (_, _, server):
        async with client(server, mode) as c:
            uris = [str(r.uri) for r in (await c.list_resources()).resources]
            templates = [t.uri_template for t in (await c.list_resource_templates()).resource_templates]
            shared = await c.read_resource("file:///shared")
            only_b = await c.read_resource("file:///only-b")
            by_template = await c.read_resource("note://7")
            with pytest.raises(MCPError, match="Unknown resource") as nowhere:
                await c.read_resource("file:///nowhere")
    assert (nowhere.value.code, nowhere.value.data) == (types.INVALID_PARAMS, {"uri": "file:///nowhere"})  # SEP-2164
    assert uris == ["file:///shared", "file:///only-a", "file:///only-b"]
    assert templates == ["note://{id}"]
    assert shared.contents[0].text == "a has file:///shared"  # type: ignore[union-attr]
    assert only_b.contents[0].text == "b has file:///only-b"  # type: ignore[union-attr]
    assert by_template.contents[0].text == "b has note://7"  # type: ignore[union-attr]


async def test_a_client_prefix_keeps_every_name_within_64_characters_and_the_long_tool_callable(
    rwx_policy: SandboxPolicy,
):
    from omega_mcp.names import Naming
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.server.server import build_server
    from omega_mcp.toolbox import Toolbox

    long_tool = "get_repository_pull_request_review_comments_for_thread"
    server = downstream("long", [echo_tool(long_tool), echo_tool("echo")])
    naming = Naming(client_prefix="mcp__omega__")
    async with (
        Downstreams([downstream_spec("my-very-long-server-name", server)]) as downstreams,
        Toolbox(rwx_policy, downstreams, naming=naming) as toolbox,
        client(build_server(toolbox, catalog=downstreams)) as c,
    ):
        names = [t.name for t in (await c.list_tools()).tools]
        assert all(len("mcp__omega__" + name) <= 64 for name in names), names
        (exported,) = [n for n in names if n.startswith("mcp__my-very-long-server-name__get_")]
        result = await c.call_tool(exported, {"text": "hi"})
        assert not result.is_error
        assert result.content[0].text == f"{long_tool}:hi"  # type: ignore[union-attr]


@MODES
async def test_a_full_name_over_64_characters_is_accepted_in_calls(rwx_policy: SandboxPolicy, mode: str):
    from omega_mcp.names import Naming
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.server.server import build_server
    from omega_mcp.toolbox import Toolbox

    server_name, tool = "my-very-long-server-name", "get_repository_pull_request_review_comments_for_thread"
    spec = downstream_spec(server_name, downstream(server_name, [echo_tool(tool)]))
    async with (
        Downstreams([spec]) as downstreams,
        Toolbox(rwx_policy, downstreams, naming=Naming("mcp__omega__")) as box,
    ):
        async with client(build_server(box, catalog=downstreams), mode) as c:
            listed = [t.name for t in (await c.list_tools()).tools][-1]
            full = await c.call_tool(f"mcp__{server_name}__{tool}", {"text": "full"})
            shown = await c.call_tool(listed, {"text": "shown"})
    assert listed == "mcp__my-very-long-server-name__get_reposito_535e993a"
    assert not full.is_error and full.content[0].text == f"{tool}:full"  # type: ignore[union-attr]
    assert not shown.is_error and shown.content[0].text == f"{tool}:shown"  # type: ignore[union-attr]
