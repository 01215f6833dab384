"""The hub in search mode (SPEC "Tool search"), through the SDK client: the listing and its token
budget, `search_tools` (keywords, `select:`, no match), the found tools joining the session's list
with `list_changed`, `call_tool`, direct calls by name, and the index following a server's changes.

Token counts use one fixed approximation, stated here: tokens = characters of the JSON of the tool
definitions (as tools/list returns them) / 4.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from omega_mcp.builtin.schemas import BUILTIN_TOOLS
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.server import OmegaServer, build_server
from omega_mcp.server.tool_search import SessionTools
from omega_mcp.toolbox import Toolbox
from omega_mcp.toolsearch import CALL_TOOL, SEARCH_TOOLS, ToolSearchMode
from proxy_support import Notifications, client, downstream, downstream_spec, echo_tool, gated
from search_support import catalog_servers
from waits import deadline

BUILTINS = [tool.name for tool, _ in BUILTIN_TOOLS]
BUDGET_TOKENS = 1_500


def tokens(tools: list[types.Tool]) -> int:
    """The approximation of this file: characters of the tools' JSON / 4."""
    return len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools])) // 4


@asynccontextmanager
async def search_hub(
    policy: SandboxPolicy,
    servers: dict[str, Any],
    mode: ToolSearchMode = "on",
    era: str = "auto",
    **options: Any,
) -> AsyncIterator[tuple[Downstreams, Toolbox, OmegaServer]]:
    specs = [downstream_spec(name, server, era=era) for name, server in servers.items()]
    async with Downstreams(specs, backoff_seconds=0.05) as downstreams, Toolbox(policy, downstreams) as toolbox:
        search = SessionTools(toolbox, mode=mode, **options)
        await downstreams.wait_ready()  # so that no list_changed of the first connection round arrives later
        yield downstreams, toolbox, build_server(toolbox, catalog=downstreams, tool_search=search)


def real_tools(count: int) -> dict[str, Any]:
    """`count` real tools (the harvested catalog, repeated), as in-process servers of at most 500 tools."""
    # The SDK's server refuses a schema without "type" (one harvested server lists such a tool).
    pool = [
        tool if "type" in tool.input_schema else tool.model_copy(update={"input_schema": {"type": "object"}})
        for _, tools in catalog_servers()
        for tool in tools
    ]
    servers: dict[str, Any] = {}
    for start in range(0, count, 500):
        chunk = [
            pool[i % len(pool)].model_copy(update={"name": f"{pool[i % len(pool)].name}_{i}"})
            for i in range(start, min(count, start + 500))
        ]
        servers[f"srv{start // 500}"] = downstream(f"srv{start // 500}", chunk)
    return servers


def text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


@pytest.mark.parametrize("count", [50, 500, 5_000])
async def test_search_mode_lists_the_builtins_and_two_tools_under_the_budget_whatever_the_size(
    rwx_policy: SandboxPolicy, count: int
):
    async with search_hub(rwx_policy, real_tools(count), mode="auto") as (_, toolbox, server):
        everything = await toolbox.list_tools()
        assert len(everything) == len(BUILTINS) + count
        async with client(server) as c:
            listed = (await c.list_tools()).tools
    assert [t.name for t in listed] == [*BUILTINS, SEARCH_TOOLS, CALL_TOOL]
    beyond = [t for t in listed if t.name not in BUILTINS]
    assert tokens(beyond) < BUDGET_TOKENS
    assert tokens(everything) > 5 * tokens(beyond)  # what the client would otherwise get


async def test_auto_lists_everything_while_the_definitions_are_small(rwx_policy: SandboxPolicy):
    async with search_hub(rwx_policy, {"down": downstream()}, mode="auto") as (_, _toolbox, server):
        async with client(server) as c:
            names = [t.name for t in (await c.list_tools()).tools]
    assert names == [*BUILTINS, "mcp__down__echo"]


async def test_a_search_adds_the_found_tools_to_the_session_list_with_list_changed_and_they_can_be_called(
    rwx_policy: SandboxPolicy,
):
    tools = [echo_tool("echo"), echo_tool("reverse_words"), echo_tool("shout")]
    tools[1].description = "Reverse the order of the words in a sentence"
    notes = Notifications()
    async with search_hub(rwx_policy, {"down": downstream(tools=tools)}) as (_, _toolbox, server):
        async with client(server, message_handler=notes) as c:
            before = [t.name for t in (await c.list_tools()).tools]
            result = await c.call_tool(SEARCH_TOOLS, {"query": "reverse the words of a sentence", "limit": 1})
            await notes.next()
            after = [t.name for t in (await c.list_tools()).tools]
            called = await c.call_tool("mcp__down__reverse_words", {"text": "a b"})
    assert before == [*BUILTINS, SEARCH_TOOLS, CALL_TOOL]
    assert not result.is_error
    assert text(result).startswith("mcp__down__reverse_words: Reverse the order of the words in a sentence")
    assert result.structured_content == {
        "tools": [
            {
                "name": "mcp__down__reverse_words",
                "server": "down",
                "description": "Reverse the order of the words in a sentence",
                "inputSchema": tools[1].input_schema,
            }
        ]
    }
    assert after == [*before, "mcp__down__reverse_words"]  # appended: the earlier entries never move
    assert text(called) == "reverse_words:a b"


async def test_a_tool_called_by_name_joins_the_list_and_each_session_keeps_its_own(rwx_policy: SandboxPolicy):
    notes = Notifications()
    async with search_hub(rwx_policy, {"down": downstream()}) as (_, _toolbox, server):
        async with client(server, message_handler=notes) as first, client(server) as second:
            result = await first.call_tool("down.echo", {"text": "hi"})  # an alias: any name a call accepts
            await notes.next()
            first_names = [t.name for t in (await first.list_tools()).tools]
            second_names = [t.name for t in (await second.list_tools()).tools]
    assert text(result) == "echo:hi"
    assert first_names[-1] == "mcp__down__echo"
    assert "mcp__down__echo" not in second_names


async def test_call_tool_calls_exactly_as_a_direct_call_would(rwx_policy: SandboxPolicy):
    async with search_hub(rwx_policy, {"down": downstream()}) as (_, _toolbox, server):
        async with client(server) as c:
            direct = await c.call_tool("mcp__down__echo", {"text": "x"})
            through = await c.call_tool(CALL_TOOL, {"name": "mcp__down__echo", "arguments": {"text": "x"}})
            invalid = await c.call_tool(CALL_TOOL, {"name": "mcp__down__echo", "arguments": {"text": 5}})
            builtin = await c.call_tool(CALL_TOOL, {"name": "BASH", "arguments": {"command": "echo hi"}})
            no_name = await c.call_tool(CALL_TOOL, {"arguments": {}})
            with pytest.raises(MCPError) as unknown:
                await c.call_tool(CALL_TOOL, {"name": "mcp__down__nope", "arguments": {}})
    assert through.model_dump() == direct.model_dump()
    assert invalid.is_error and "`text`" in text(invalid)
    assert not builtin.is_error and text(builtin).strip() == "hi"
    assert no_name.is_error and "`name`" in text(no_name)
    assert unknown.value.error.code == types.INVALID_PARAMS
    assert "Unknown tool" in unknown.value.error.message


async def test_select_picks_exact_names_in_order_beyond_the_limit_and_reports_unknown_ones(
    rwx_policy: SandboxPolicy,
):
    tools = [echo_tool(f"tool_{i}") for i in range(8)]
    async with search_hub(rwx_policy, {"down": downstream(tools=tools)}) as (_, _toolbox, server):
        async with client(server) as c:
            names = "mcp__down__tool_7,down.tool_2,down__tool_5,missing,READ,mcp__down__tool_1,mcp__down__tool_3"
            result = await c.call_tool(SEARCH_TOOLS, {"query": f"select:{names}", "limit": 2})
    found = [tool["name"] for tool in (result.structured_content or {})["tools"]]
    assert found == [
        "mcp__down__tool_7",
        "mcp__down__tool_2",
        "mcp__down__tool_5",
        "read",
        "mcp__down__tool_1",
        "mcp__down__tool_3",
    ]
    assert "Unknown tool name: missing" in text(result)
    assert not result.is_error


async def test_a_query_sharing_nothing_with_any_tool_is_an_empty_list_with_a_hint(rwx_policy: SandboxPolicy):
    notes = Notifications()
    async with search_hub(rwx_policy, {"down": downstream()}) as (_, _toolbox, server):
        async with client(server, message_handler=notes) as c:
            result = await c.call_tool(SEARCH_TOOLS, {"query": "pizza with anchovies, delivered hot"})
            listed = [t.name for t in (await c.list_tools()).tools]
    assert not result.is_error
    assert result.structured_content == {"tools": []}
    assert "No tool matches" in text(result)
    assert listed == [*BUILTINS, SEARCH_TOOLS, CALL_TOOL]
    assert notes.tools == 0


async def test_search_tools_arguments_are_checked_and_limit_is_capped(rwx_policy: SandboxPolicy):
    tools = [echo_tool(f"echo_{i}") for i in range(30)]
    async with search_hub(rwx_policy, {"down": downstream(tools=tools)}) as (_, _toolbox, server):
        async with client(server) as c:
            capped = await c.call_tool(SEARCH_TOOLS, {"query": "echo text back", "limit": 100})
            default = await c.call_tool(SEARCH_TOOLS, {"query": "echo text back"})
            empty = await c.call_tool(SEARCH_TOOLS, {"query": "  "})
            zero = await c.call_tool(SEARCH_TOOLS, {"query": "echo", "limit": 0})
    assert len((capped.structured_content or {})["tools"]) == 20
    assert len((default.structured_content or {})["tools"]) == 5
    assert empty.is_error and "`query`" in text(empty)
    assert zero.is_error and "`limit`" in text(zero)


async def test_the_index_follows_a_server_whose_tools_change(rwx_policy: SandboxPolicy):
    tools = [echo_tool("echo")]
    sessions: list[Any] = []
    notes = Notifications()
    # The handshake era: the test notifies the downstream's session (a 2026-era one has none to notify).
    hub = search_hub(rwx_policy, {"down": downstream(tools=tools, sessions=sessions)}, era="handshake")
    async with (
        hub as (
            downstreams,
            _toolbox,
            server,
        )
    ):
        async with client(server, message_handler=notes) as c:
            before = await c.call_tool(SEARCH_TOOLS, {"query": "frobnicate the widgets"})
            version = downstreams.version
            tools.append(
                types.Tool(
                    name="frobnicate",
                    description="Frobnicate widgets in bulk",
                    input_schema={"type": "object"},
                )
            )
            await sessions[0].send_tool_list_changed()
            with deadline(10):
                while downstreams.version == version:
                    await downstreams.wait_changed()
            after = await c.call_tool(SEARCH_TOOLS, {"query": "frobnicate the widgets"})
    assert (before.structured_content or {})["tools"] == []
    assert [t["name"] for t in (after.structured_content or {})["tools"]] == ["mcp__down__frobnicate"]


async def test_always_visible_globs_choose_what_is_listed_besides_the_two(rwx_policy: SandboxPolicy):
    servers = {"down": downstream(tools=[echo_tool("echo"), echo_tool("other")])}
    async with search_hub(rwx_policy, servers, always_visible=["read", "mcp__down__e*"]) as (_, _toolbox, server):
        async with client(server) as c:
            names = [t.name for t in (await c.list_tools()).tools]
    assert names == ["read", "mcp__down__echo", SEARCH_TOOLS, CALL_TOOL]


async def test_without_search_the_two_tools_do_not_exist(rwx_policy: SandboxPolicy):
    async with search_hub(rwx_policy, {"down": downstream()}, mode="off") as (_, _toolbox, server):
        async with client(server) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            with pytest.raises(MCPError) as unknown:
                await c.call_tool(SEARCH_TOOLS, {"query": "echo"})
    assert SEARCH_TOOLS not in names and "mcp__down__echo" in names
    assert "Unknown tool" in unknown.value.error.message


async def test_a_hub_clients_search_finds_only_the_tools_its_profile_permits(rwx_policy: SandboxPolicy):
    from omega_mcp.config import ClientConfig
    from omega_mcp.server.profiles import ClientProfile

    tools = [echo_tool("reverse_words"), echo_tool("reverse_lines")]
    tools[0].description = "Reverse the order of the words in a sentence"
    tools[1].description = "Reverse the order of the lines in a text"
    token = "client-token-0123456789abcdef"
    profile = ClientProfile("c", ClientConfig(token=token, exclude_tools=("mcp__down__reverse_words",)), rwx_policy)
    async with search_hub(rwx_policy, {"down": downstream(tools=tools)}) as (_, _toolbox, server):
        assert server.tool_search is not None
        _, everyone = await server.tool_search.search({"query": "reverse the words", "limit": 5})
        _, permitted = await server.tool_search.search({"query": "reverse the words", "limit": 5}, profile)
        _, picked = await server.tool_search.search({"query": "select:mcp__down__reverse_words"}, profile)
    assert "mcp__down__reverse_words" in everyone
    assert "mcp__down__reverse_words" not in permitted and "mcp__down__reverse_lines" in permitted
    assert picked == []


async def test_the_mcp_param_schema_lookup_answers_only_for_tools_the_callers_profile_permits(
    rwx_policy: SandboxPolicy,
):
    from omega_mcp.config import ClientConfig
    from omega_mcp.server.profiles import PROFILE, ClientProfile, input_schema_for_caller

    tools = [echo_tool("reverse_words"), echo_tool("reverse_lines")]
    token = "client-token-0123456789abcdef"
    profile = ClientProfile("c", ClientConfig(token=token, exclude_tools=("mcp__down__reverse_words",)), rwx_policy)
    async with search_hub(rwx_policy, {"down": downstream(tools=tools)}) as (_, toolbox, server):
        assert server.tool_search is not None  # search mode: the SDK used to run tools/list per call
        assert server.get_tool_input_schema is not None
        everyone = server.get_tool_input_schema("mcp__down__reverse_words")
        entered = PROFILE.set(profile)
        try:
            hidden = input_schema_for_caller(toolbox, "mcp__down__reverse_words")
            permitted = input_schema_for_caller(toolbox, "mcp__down__reverse_lines")
        finally:
            PROFILE.reset(entered)
        words, lines = (
            toolbox.input_schema("mcp__down__reverse_words"),
            toolbox.input_schema("mcp__down__reverse_lines"),
        )
    assert words is not None and lines is not None
    assert everyone == words and hidden is None and permitted == lines


async def test_search_tools_takes_a_server_filter_and_says_when_no_server_has_that_name(rwx_policy: SandboxPolicy):
    servers = {"alpha": downstream("alpha", [echo_tool("echo")]), "beta": downstream("beta", [echo_tool("echo")])}
    async with search_hub(rwx_policy, servers) as (_, _toolbox, server):
        async with client(server) as c:
            definition = next(t for t in (await c.list_tools()).tools if t.name == SEARCH_TOOLS)
            narrowed = await c.call_tool(SEARCH_TOOLS, {"query": "echo the text back", "server": "beta"})
            builtins = await c.call_tool(SEARCH_TOOLS, {"query": "run a shell command", "server": "omega"})
            unknown = await c.call_tool(SEARCH_TOOLS, {"query": "echo", "server": "gamma"})
            wrong = await c.call_tool(SEARCH_TOOLS, {"query": "echo", "server": 7})
    assert definition.input_schema["properties"]["server"]["type"] == "string"
    assert [t["name"] for t in (narrowed.structured_content or {})["tools"]] == ["mcp__beta__echo"]
    rows = (builtins.structured_content or {})["tools"]
    assert rows[0]["name"] == "bash" and {row["server"] for row in rows} == {"omega"}
    assert not unknown.is_error and (unknown.structured_content or {})["tools"] == []
    assert "No connected server is named 'gamma'" in text(unknown)
    assert wrong.is_error and "`server`" in text(wrong)


async def test_a_downstream_copy_of_bash_does_not_outrank_bash_and_each_result_names_its_server(
    rwx_policy: SandboxPolicy,
):
    bash = next(tool for tool, _ in BUILTIN_TOOLS if tool.name == "bash")
    copy = bash.model_copy(update={"name": "run_shell_command"})  # the description, title and schema copied
    async with search_hub(rwx_policy, {"helper": downstream("helper", [copy, echo_tool("echo")])}) as (
        _,
        _toolbox,
        server,
    ):
        async with client(server) as c:
            result = await c.call_tool(SEARCH_TOOLS, {"query": "run a shell command"})
    rows = (result.structured_content or {})["tools"]
    assert [row["name"] for row in rows[:2]] == ["bash", "mcp__helper__run_shell_command"]
    assert [row["server"] for row in rows[:2]] == ["omega", "helper"]
    lines = text(result).splitlines()
    assert lines[0].startswith("bash: ") and lines[0].endswith("[omega built-in]")
    assert lines[1].endswith("[server helper]")


async def test_a_search_waits_for_a_server_still_starting_as_a_call_would(rwx_policy: SandboxPolicy):
    """`serve` lists at once while a server starts (its tools come with list_changed), but a search result
    is read once: answered without that server, it would tell the model that no tool fits."""
    gate = anyio.Event()
    spec = downstream_spec("slow", gated(downstream("slow", [echo_tool()]), gate))
    async with (
        Downstreams([spec], backoff_seconds=0.05, startup_wait_seconds=0) as downstreams,
        Toolbox(rwx_policy, downstreams) as toolbox,
    ):
        server = build_server(toolbox, catalog=downstreams, tool_search=SessionTools(toolbox, mode="on"))
        async with client(server) as session:
            answered = anyio.Event()
            results: list[types.CallToolResult] = []

            async def search() -> None:
                results.append(await session.call_tool(SEARCH_TOOLS, {"query": "echo the text back"}))
                answered.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(search)
                with anyio.move_on_after(0.5):  # unscaled: this asserts that something does not happen
                    await answered.wait()
                assert not answered.is_set(), f"answered while slow was still starting: {text(results[0])}"
                gate.set()
                with deadline(10):
                    await answered.wait()
    assert text(results[0]).startswith("mcp__slow__echo"), text(results[0])
