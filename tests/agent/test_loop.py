"""The agent loop against the scripted provider and an in-memory tool host."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
from mcp import types

from omega_mcp.agent.loop import AgentResult, AgentToolSearch, TextEvent, ToolCallEvent, ToolResultEvent, run_agent
from omega_mcp.errors import MaxTurnsExceededError, ProviderHTTPError, ToolError, UnknownToolError
from omega_mcp.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolCallPart,
    ToolResultsMessage,
    Usage,
    UserMessage,
)
from omega_mcp.providers.openai import OpenAIProvider
from omega_mcp.providers.scripted import ScriptedProvider, ScriptedRequest, call, reply, turns
from proxy_support import FIXTURES, downstream_spec, hub
from waits import deadline

Handler = Callable[[dict[str, Any]], Awaitable[types.CallToolResult]]


def text_result(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


class FakeHost:
    """A ToolHost whose tools are async functions; records every call."""

    def __init__(self, handlers: dict[str, Handler]) -> None:
        self.handlers = handlers
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.listed = 0

    async def list_tools(self) -> list[types.Tool]:
        self.listed += 1
        schema = {"type": "object", "properties": {"value": {"type": "string"}}}
        return [types.Tool(name=name, description=f"tool {name}", input_schema=schema) for name in self.handlers]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        self.calls.append((name, arguments))
        if name not in self.handlers:
            raise UnknownToolError(name)
        return await self.handlers[name](arguments)


async def echo(arguments: dict[str, Any]) -> types.CallToolResult:
    return text_result(f"echo {arguments.get('value')}")


def last_results(request: ScriptedRequest) -> ToolResultsMessage:
    message = request.messages[-1]
    assert isinstance(message, ToolResultsMessage)
    return message


async def test_a_plain_answer_ends_the_loop_after_one_turn() -> None:
    provider = ScriptedProvider(turns(["The answer is 4."]))
    result = await run_agent("2+2?", provider=provider, tools=FakeHost({"echo": echo}), model="m", system="Be exact.")
    assert result.output == "The answer is 4."
    assert result.turns == 1
    assert result.usage == Usage(input_tokens=10, output_tokens=5)
    assert [type(m) for m in result.messages] == [UserMessage, AssistantMessage]
    request = provider.requests[0]
    assert (request.model, request.system) == ("m", "Be exact.")
    assert [spec.name for spec in request.tools] == ["echo"]


async def test_tool_results_go_back_with_their_ids_and_usage_is_summed() -> None:
    provider = ScriptedProvider(
        turns([reply("Let me check.", call("echo", {"value": "hi"}, id="c1")), "Done: echo hi"])
    )
    host = FakeHost({"echo": echo})
    result = await run_agent("go", provider=provider, tools=host, model="m")
    assert result.output == "Done: echo hi"
    assert result.turns == 2
    assert result.usage.input_tokens == 20 and result.usage.output_tokens == 10
    assert host.calls == [("echo", {"value": "hi"})]
    results = last_results(provider.requests[1]).results
    assert [(r.call_id, r.name, r.text(), r.is_error) for r in results] == [("c1", "echo", "echo hi", False)]
    assert result.to_json()["messages"][2]["content"][0]["text"] == "echo hi"


async def test_several_calls_in_one_turn_run_concurrently_and_results_keep_call_order() -> None:
    first_started, second_finished = anyio.Event(), anyio.Event()

    async def slow(arguments: dict[str, Any]) -> types.CallToolResult:
        first_started.set()
        with deadline(5):  # deadlocks (and fails) unless `fast` runs meanwhile
            await second_finished.wait()
        return text_result("slow done")

    async def fast(arguments: dict[str, Any]) -> types.CallToolResult:
        with deadline(5):
            await first_started.wait()
        second_finished.set()
        return text_result("fast done")

    finished: list[str] = []
    provider = ScriptedProvider(turns([reply("", call("slow", id="a"), call("fast", id="b")), "ok"]))
    result = await run_agent(
        "go",
        provider=provider,
        tools=FakeHost({"slow": slow, "fast": fast}),
        model="m",
        on_event=lambda e: finished.append(e.name) if isinstance(e, ToolResultEvent) else None,
    )
    assert result.output == "ok"
    assert finished == ["fast", "slow"]  # completion order...
    results = last_results(provider.requests[1]).results
    assert [(r.call_id, r.text()) for r in results] == [
        ("a", "slow done"),
        ("b", "fast done"),
    ]  # ...but call order back


async def test_tool_failures_of_every_kind_go_back_to_the_model_as_error_results() -> None:
    async def is_error(arguments: dict[str, Any]) -> types.CallToolResult:
        return text_result("exit code 2", error=True)

    async def raises_tool_error(arguments: dict[str, Any]) -> types.CallToolResult:
        raise ToolError("denied: /etc/passwd: outside the write roots")

    async def crashes(arguments: dict[str, Any]) -> types.CallToolResult:
        raise RuntimeError("kaboom")

    calls = (
        call("is_error", id="1"),
        call("raises_tool_error", id="2"),
        call("crashes", id="3"),
        call("ecko", id="4"),
        ToolCallPart("5", "echo", None, 'the arguments are not valid JSON (Expecting value): {"value": '),
    )
    provider = ScriptedProvider(turns([reply("", *calls), "recovered"]))
    host = FakeHost({"is_error": is_error, "raises_tool_error": raises_tool_error, "crashes": crashes, "echo": echo})
    result = await run_agent("go", provider=provider, tools=host, model="m")
    assert result.output == "recovered"
    results = last_results(provider.requests[1]).results
    assert all(r.is_error for r in results)
    texts = [r.text() for r in results]
    assert texts[0] == "exit code 2"
    assert texts[1] == "denied: /etc/passwd: outside the write roots"
    assert texts[2] == "crashes failed: RuntimeError: kaboom"
    assert texts[3].startswith("Unknown tool: 'ecko'.") and "echo" in texts[3]
    assert "not valid JSON" in texts[4] and "JSON object matching its input schema" in texts[4]
    assert [name for name, _ in host.calls] == ["is_error", "raises_tool_error", "crashes"]  # nothing else ran


async def test_an_unknown_tool_error_from_the_host_is_fed_back() -> None:
    class Vanishing(FakeHost):
        async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            raise UnknownToolError(name, ["echo2"])

    provider = ScriptedProvider(turns([reply("", call("echo")), "ok"]))
    await run_agent("go", provider=provider, tools=Vanishing({"echo": echo}), model="m")
    (result,) = last_results(provider.requests[1]).results
    assert result.is_error and "Unknown tool: 'echo'. Did you mean: echo2?" in result.text()


async def test_a_hanging_tool_times_out_into_an_error_result() -> None:
    async def hangs(arguments: dict[str, Any]) -> types.CallToolResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    provider = ScriptedProvider(turns([reply("", call("hangs")), "ok"]))
    await run_agent("go", provider=provider, tools=FakeHost({"hangs": hangs}), model="m", tool_timeout_seconds=0.01)
    (result,) = last_results(provider.requests[1]).results
    assert result.is_error and "timed out" in result.text()


async def test_the_turn_limit_ends_the_loop_with_a_clear_error_and_the_partial_conversation() -> None:
    provider = ScriptedProvider(lambda request: reply("again", call("echo", {"value": str(len(request.messages))})))
    host = FakeHost({"echo": echo})
    with pytest.raises(MaxTurnsExceededError, match="stopped after 3 turns") as info:
        await run_agent("loop forever", provider=provider, tools=host, model="m", max_turns=3)
    assert len(provider.requests) == 3
    assert len(host.calls) == 2  # the calls of the last allowed turn are not run
    partial = info.value.result
    assert isinstance(partial, AgentResult)
    assert partial.turns == 3 and partial.usage.input_tokens == 30


async def test_max_turns_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        await run_agent("x", provider=ScriptedProvider(turns([])), tools=FakeHost({}), model="m", max_turns=0)


async def test_empty_allowed_tools_offers_nothing_and_refuses_calls() -> None:
    provider = ScriptedProvider(turns([reply("", call("echo")), "fine"]))
    host = FakeHost({"echo": echo})
    await run_agent("go", provider=provider, tools=host, model="m", allowed_tools=[])
    assert provider.requests[0].tools == ()
    assert host.listed == 0 and host.calls == []
    (result,) = last_results(provider.requests[1]).results
    assert result.is_error and "No tools are available" in result.text()


async def test_no_tools_sends_no_tools_key_on_the_wire() -> None:
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        message = {"role": "assistant", "content": "plain"}
        return httpx2.Response(200, json={"choices": [{"index": 0, "finish_reason": "stop", "message": message}]})

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handle))
    async with OpenAIProvider(api_key="k", client=client) as provider:
        result = await run_agent("hi", provider=provider, tools=FakeHost({"echo": echo}), model="m", allowed_tools=[])
    assert result.output == "plain"
    assert "tools" not in bodies[0] and "tool_choice" not in bodies[0]


async def test_allowed_globs_limit_the_namespace_and_calls_outside_it() -> None:
    host = FakeHost(
        {"bash": echo, "read": echo, "mcp__fs__read_file": echo, "mcp__fs__write_file": echo, "mcp__git__log": echo}
    )
    provider = ScriptedProvider(turns([reply("", call("bash"), call("mcp__fs__write_file")), "ok"]))
    await run_agent("go", provider=provider, tools=host, model="m", allowed_tools=["mcp__fs__*", "read"])
    assert [s.name for s in provider.requests[0].tools] == ["read", "mcp__fs__read_file", "mcp__fs__write_file"]
    bash_result, write_result = last_results(provider.requests[1]).results
    assert bash_result.is_error and "Unknown tool: 'bash'" in bash_result.text()
    assert not write_result.is_error
    assert host.calls == [("mcp__fs__write_file", {})]


async def test_names_providers_reject_are_offered_safely_and_routed_back() -> None:
    weird = "mcp__srv__get.item/by id"
    long = "mcp__" + "x" * 80
    host = FakeHost({weird: echo, long: echo, "9lives": echo})
    provider = ScriptedProvider(
        lambda request: (
            "names"
            if len(request.messages) > 1
            else reply("", *(call(s.name, {"value": s.name}) for s in request.tools))
        )
    )
    await run_agent("go", provider=provider, tools=host, model="m")
    names = [s.name for s in provider.requests[0].tools]
    assert all(re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_-]{0,63}", name) for name in names), names
    assert len(set(names)) == 3
    assert [name for name, _ in host.calls] == [weird, long, "9lives"]


async def test_events_arrive_in_chronological_order_with_the_text_around_tool_calls() -> None:
    events: list[Any] = []
    provider = ScriptedProvider(turns([reply("Checking.", call("echo", {"value": "v"}, id="c")), "All good."]))
    await run_agent("go", provider=provider, tools=FakeHost({"echo": echo}), model="m", on_event=events.append)
    assert events == [
        TextEvent("Checking.", final=False),
        ToolCallEvent("c", "echo", {"value": "v"}),
        ToolResultEvent("c", "echo", "echo v", False),
        TextEvent("All good.", final=True),
    ]


async def test_provider_errors_propagate() -> None:
    provider = ScriptedProvider(turns([]))
    with pytest.raises(ProviderHTTPError, match="no more scripted replies"):
        await run_agent("go", provider=provider, tools=FakeHost({}), model="m")


async def test_the_real_toolbox_is_a_tool_host(toolbox, rwx_policy) -> None:
    from omega_mcp.toolbox import Toolbox

    assert isinstance(toolbox, Toolbox)
    script = turns(
        [
            reply("", call("write", {"file_path": "n.txt", "content": "abc"}, id="w")),
            reply(
                "",
                call("read", {"file_path": "n.txt"}, id="r"),
                call("nope", id="x"),
                call("edit", {"file_path": 1}, id="e"),
            ),
            "done",
        ]
    )
    provider = ScriptedProvider(script)
    result = await run_agent("go", provider=provider, tools=toolbox, model="m")
    assert result.output == "done"
    assert (rwx_policy.workspace / "n.txt").read_text() == "abc"
    assert {"bash", "read", "write", "edit"} <= {s.name for s in provider.requests[0].tools}
    read, unknown, invalid = last_results(provider.requests[2]).results
    assert not read.is_error and "abc" in read.text()
    assert unknown.is_error and "Unknown tool" in unknown.text()
    assert invalid.is_error


async def test_a_huge_tool_result_is_cut_in_the_middle_for_the_model_with_the_total_size() -> None:
    huge = "HEAD-ü" + "x" * 200_000 + "-TAIL"

    async def flood(arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(
            content=[
                types.TextContent(type="text", text=huge),
                types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
            ]
        )

    provider = ScriptedProvider(turns([reply("", call("flood", id="f"), call("echo", {"value": "v"}, id="e")), "ok"]))
    await run_agent("go", provider=provider, tools=FakeHost({"flood": flood, "echo": echo}), model="m")
    flooded, normal = last_results(provider.requests[1]).results
    text = flooded.content[0]
    assert isinstance(text, TextPart)
    assert len(text.text) < 101_000
    assert text.text.startswith("HEAD-ü") and text.text.endswith("-TAIL")
    assert f"{len(huge):,} characters" in text.text and "truncated" in text.text
    assert isinstance(flooded.content[1], ImagePart)  # images are not text: kept
    assert normal.text() == "echo v"


async def test_a_large_but_reasonable_tool_result_reaches_the_model_whole() -> None:
    big = "y" * 90_000

    async def large(arguments: dict[str, Any]) -> types.CallToolResult:
        return text_result(big)

    provider = ScriptedProvider(turns([reply("", call("large", id="l")), "ok"]))
    await run_agent("go", provider=provider, tools=FakeHost({"large": large}), model="m")
    assert last_results(provider.requests[1]).results[0].text() == big


def _app_server(name: str) -> Any:
    """tests/fixtures/app_server.py's server `name`: a tool `show` for the model, `refresh` for its app alone."""
    spec = importlib.util.spec_from_file_location("app_server_fixture", FIXTURES / "app_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app_server(name)._lowlevel_server


@pytest.mark.parametrize("search", ["off", "on"])
async def test_a_tool_for_its_app_alone_is_never_offered_to_the_model_nor_run(rwx_policy, search: str) -> None:
    """MCP Apps: a tool whose `_meta.ui.visibility` leaves out "model" is the host's, not the model's."""
    async with hub(rwx_policy, downstream_spec("alpha", _app_server("alpha"))) as (downstreams, toolbox, _):
        await downstreams.wait_ready()
        calls = reply("", call("mcp__alpha__refresh", id="r"), call("mcp__alpha__show", id="s"))
        searched = reply("", call("search_tools", {"query": "refresh the widget's data", "limit": 20}, id="q"))
        provider = ScriptedProvider(turns([searched, calls, "done"] if search == "on" else [calls, "done"]))
        settings = AgentToolSearch("on" if search == "on" else "off")
        await run_agent("go", provider=provider, tools=toolbox, model="m", tool_search=settings)
    offered = {spec.name for request in provider.requests for spec in request.tools}
    assert "mcp__alpha__refresh" not in offered
    if search == "on":
        found = last_results(provider.requests[1]).results[0].text()
        assert "mcp__alpha__show" in found and "mcp__alpha__refresh" not in found
    else:
        assert "mcp__alpha__show" in offered
    refused, shown = last_results(provider.requests[-1]).results
    assert refused.is_error and "app's interface only" in refused.text()
    assert not shown.is_error and shown.text() == "shown by alpha"
