"""What a client sees through omega is what it would see connected directly (SPEC "Transparency"):
errors, eras and pages, besides the conformance suite (tests/conformance/)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from cli_support import cli_env
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import ECHO_SERVER, downstream, downstream_spec, hub

MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])
URL_REQUIRED = -32042
DATA = {"elicitations": [{"mode": "url", "url": "https://example.com/consent"}]}


async def _refuse(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    raise MCPError(code=URL_REQUIRED, message="URL elicitation required", data=DATA)


@MODES
async def test_a_downstreams_json_rpc_error_reaches_the_client_as_that_error(rwx_policy: SandboxPolicy, mode: str):
    server = downstream("d", call=_refuse)
    async with hub(rwx_policy, downstream_spec("d", server)) as (_, _, omega):
        async with mcp.Client(omega, mode=mode) as c:
            with pytest.raises(MCPError) as caught:
                await c.call_tool("mcp__d__echo", {"text": "x"})
    assert (caught.value.code, caught.value.message, caught.value.error.data) == (
        URL_REQUIRED,
        "URL elicitation required",
        DATA,
    )


@MODES
@pytest.mark.e2e
async def test_through_the_relay_a_stdio_servers_json_rpc_error_reaches_the_client(tmp_path: Path, mode: str):
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n\n'
        f'[servers.s]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n'
    )
    command = ["-m", "omega_mcp", "serve", "--config", str(config)]
    params = StdioServerParameters(command=sys.executable, args=command, env=cli_env(tmp_path), cwd=tmp_path)
    async with mcp.Client(params, mode=mode) as c:
        await c.list_tools()
        with pytest.raises(MCPError) as caught:
            await c.call_tool("mcp__s__refuse", {})
    assert (caught.value.code, caught.value.message, caught.value.error.data) == (
        URL_REQUIRED,
        "URL elicitation required",
        {"elicitations": [{"mode": "url"}]},
    )


def _task_tool(name: str, support: str | None) -> types.Tool:
    execution = types.ToolExecution(task_support=support) if support is not None else None  # pyright: ignore[reportArgumentType]
    return types.Tool(name=name, input_schema={"type": "object"}, execution=execution)


async def test_a_tool_that_requires_tasks_is_exported_and_every_tool_keeps_its_execution(
    rwx_policy: SandboxPolicy, caplog: pytest.LogCaptureFixture
):
    """SPEC: a tool that runs only as a task is exported like any other (tests/proxy/test_tasks.py runs
    them); optional ones are called synchronously by a client that sends no task."""
    tools = [_task_tool("needs_task", "required"), _task_tool("may_task", "optional"), _task_tool("plain", None)]
    server = downstream("d", tools=tools)
    async with hub(rwx_policy, downstream_spec("d", server, era="handshake")) as (_, _, omega):  # a 2025-11-25 field
        async with mcp.Client(omega, mode="legacy") as c:
            listed = {t.name: t for t in (await c.list_tools()).tools if t.name.startswith("mcp__d__")}
            called = await c.call_tool("mcp__d__may_task", {})
    assert sorted(listed) == ["mcp__d__may_task", "mcp__d__needs_task", "mcp__d__plain"]
    assert listed["mcp__d__needs_task"].execution == types.ToolExecution(task_support="required")
    assert listed["mcp__d__may_task"].execution == types.ToolExecution(task_support="optional")
    assert listed["mcp__d__plain"].execution is None
    assert not called.is_error
    assert "needs_task" not in caplog.text


def _paged_server(tools: int, prompts: int, per_page: int) -> Any:
    """A downstream listing `tools` tools and `prompts` prompts, `per_page` at a time."""
    names = [f"t{i}" for i in range(tools)]
    prompt_names = [f"p{i}" for i in range(prompts)]

    def page(items: list[str], params: types.PaginatedRequestParams | None) -> tuple[list[str], str | None]:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + per_page
        return items[start:end], str(end) if end < len(items) else None

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        chunk, cursor = page(names, params)
        return types.ListToolsResult(
            tools=[types.Tool(name=n, input_schema={"type": "object"}) for n in chunk], next_cursor=cursor
        )

    async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        chunk, cursor = page(prompt_names, params)
        return types.ListPromptsResult(prompts=[types.Prompt(name=n) for n in chunk], next_cursor=cursor)

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=params.name)])

    return Server("d", on_list_tools=list_tools, on_call_tool=call, on_list_prompts=list_prompts)


async def _walk(fetch: Any) -> tuple[list[str], int]:
    """Every name of a paginated list, and how many pages it took."""
    names: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await fetch(cursor)
        pages += 1
        names += [item.name for item in getattr(page, "tools", None) or getattr(page, "prompts", [])]
        cursor = page.next_cursor
        if cursor is None:
            return names, pages


@MODES
async def test_lists_of_any_length_are_walked_downstream_and_served_in_pages(rwx_policy: SandboxPolicy, mode: str):
    server = _paged_server(tools=2100, prompts=1300, per_page=10)  # 210 and 130 pages downstream
    async with hub(rwx_policy, downstream_spec("d", server)) as (_, _, omega):
        async with mcp.Client(omega, mode=mode) as c:
            tools, tool_pages = await _walk(lambda cursor: c.list_tools(cursor=cursor))
            prompts, prompt_pages = await _walk(lambda cursor: c.list_prompts(cursor=cursor))
            last = await c.call_tool("mcp__d__t2099", {})
            with pytest.raises(MCPError) as bad:
                await c.list_tools(cursor="not-a-cursor")
    downstream_tools = [n for n in tools if n.startswith("mcp__d__")]
    assert downstream_tools == [f"mcp__d__t{i}" for i in range(2100)]
    assert len(tools) == len(set(tools))
    assert prompts == [f"d__p{i}" for i in range(1300)]
    assert tool_pages > 1 and prompt_pages > 1  # served in pages, not one answer of thousands
    assert not last.is_error
    assert bad.value.code == types.INVALID_PARAMS
