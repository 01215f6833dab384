"""The agent loop's tool search with the scripted provider: when it turns on, what each request
carries, calls by name of tools never listed, a search that finds nothing, and the usage line."""

from __future__ import annotations

from omega_mcp.agent.loop import AgentToolSearch, ToolsInfo, run_agent
from omega_mcp.agent.output import usage_line
from omega_mcp.messages import TextPart, ToolReferencePart, ToolResultsMessage, Usage
from omega_mcp.providers.scripted import ScriptedProvider, ScriptedRequest, call, reply, turns
from search_support import CatalogHost as Host

BUILTINS = ["bash", "read", "write", "edit", "bash_output", "kill_shell"]


def names(request: ScriptedRequest) -> list[str]:
    return [spec.name for spec in request.tools]


async def test_auto_search_starts_small_and_appends_found_and_called_tools() -> None:
    host = Host()  # the whole harvested catalog: far above the auto threshold
    script = turns(
        [
            reply("", call("search_tools", {"query": "take a screenshot of the web page", "limit": 2})),
            reply("", call("mcp__time__get_current_time", {"timezone": "UTC"})),  # never listed: called by name
            "done",
        ]
    )
    provider = ScriptedProvider(script)
    result = await run_agent(
        "x", provider=provider, tools=host, model="m", tool_search=AgentToolSearch(server_of=host.servers.get)
    )
    first, second, third = (names(r) for r in provider.requests)
    assert first == [*BUILTINS, "search_tools"]
    assert second[: len(first)] == first and len(second) == len(first) + 2
    assert all("screenshot" in name for name in second[len(first) :])
    assert third == [*second, "mcp__time__get_current_time"]
    assert provider.requests[1].tools[: len(first)] == provider.requests[0].tools  # the same specs, same order
    assert host.calls == ["mcp__time__get_current_time"]
    search_result = provider.requests[1].messages[-1]
    assert isinstance(search_result, ToolResultsMessage)
    text = search_result.results[0].text()
    assert text.splitlines()[0].startswith(second[len(first)] + ": ")
    assert not any(isinstance(p, ToolReferencePart) for p in search_result.results[0].content)
    assert result.tools == ToolsInfo(offered=len(host.tools), search=True, loaded=len(third))


async def test_auto_keeps_every_tool_for_a_small_catalog_and_off_means_off() -> None:
    small = Host(servers=("time",))
    provider = ScriptedProvider(turns(["done"]))
    await run_agent("x", provider=provider, tools=small, model="m", tool_search=AgentToolSearch("auto"))
    assert names(provider.requests[0]) == [t.name for t in small.tools]
    big = Host()
    provider = ScriptedProvider(turns(["done"]))
    await run_agent("x", provider=provider, tools=big, model="m", tool_search=AgentToolSearch("off"))
    assert len(provider.requests[0].tools) == len(big.tools)


async def test_a_provider_that_defers_gets_every_tool_once_and_tool_references() -> None:
    host = Host(servers=("github", "git", "time"))
    script = turns([reply("", call("search_tools", {"query": "select:mcp__git__git_status,git.git_log"})), "done"])
    provider = ScriptedProvider(script, defers_tools=True)
    search = AgentToolSearch("on", server_of=host.servers.get)
    await run_agent("x", provider=provider, tools=host, model="m", tool_search=search)
    first, second = provider.requests
    assert first.tools == second.tools  # one list for the whole run
    assert [s.name for s in first.tools if not s.deferred] == [*BUILTINS, "search_tools"]
    assert len(first.tools) == len(host.tools) + 1
    result = second.messages[-1]
    assert isinstance(result, ToolResultsMessage)
    references = [p.tool_name for p in result.results[0].content if isinstance(p, ToolReferencePart)]
    assert references == ["mcp__git__git_status", "mcp__git__git_log"]
    assert isinstance(result.results[0].content[0], TextPart)


async def test_a_search_that_finds_nothing_says_so_and_adds_nothing() -> None:
    host = Host(servers=("time",))
    provider = ScriptedProvider(turns([reply("", call("search_tools", {"query": "pizza delivery"})), "done"]))
    await run_agent("x", provider=provider, tools=host, model="m", tool_search=AgentToolSearch("on"))
    first, second = provider.requests
    assert first.tools == second.tools
    result = second.messages[-1]
    assert isinstance(result, ToolResultsMessage)
    assert "No tool matches" in result.results[0].text() and not result.results[0].is_error


async def test_bad_search_arguments_are_an_error_result_the_model_can_fix() -> None:
    host = Host(servers=("time",))
    provider = ScriptedProvider(turns([reply("", call("search_tools", {"limit": "many"})), "done"]))
    await run_agent("x", provider=provider, tools=host, model="m", tool_search=AgentToolSearch("on"))
    result = provider.requests[1].messages[-1]
    assert isinstance(result, ToolResultsMessage)
    assert result.results[0].is_error and "`query`" in result.results[0].text()


def test_the_usage_line_shows_tokens_per_turn_and_the_tools_loaded_when_search_is_on() -> None:
    per_turn = (Usage(2100, 5), Usage(2350, 7))
    line = usage_line(2, Usage(4450, 12), 1.0, per_turn=per_turn, tools=ToolsInfo(471, True, 9))
    assert line == "2 turns, 4,450 in / 12 out, 1.0 s; in per turn: 2,100 / 2,350; tool search: 9 of 471 tools loaded"
    assert usage_line(2, Usage(4450, 12), 1.0, per_turn=per_turn, tools=ToolsInfo(5, False, 5)) == (
        "2 turns, 4,450 in / 12 out, 1.0 s"
    )
