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


async def test_a_tool_that_requires_tasks_is_not_exported_and_the_others_keep_their_execution(
    rwx_policy: SandboxPolicy, caplog: pytest.LogCaptureFixture
):
    """omega does not run tasks (README "Tasks"): a tool that can only be called as a task would fail
    every call, so it is left out, with a warning naming it; optional ones are called synchronously."""
    tools = [_task_tool("needs_task", "required"), _task_tool("may_task", "optional"), _task_tool("plain", None)]
    server = downstream("d", tools=tools)
    async with hub(rwx_policy, downstream_spec("d", server)) as (_, _, omega):
        async with mcp.Client(omega, mode="legacy") as c:  # `execution` is a 2025-11-25 field
            listed = {t.name: t for t in (await c.list_tools()).tools if t.name.startswith("mcp__d__")}
            called = await c.call_tool("mcp__d__may_task", {})
    assert sorted(listed) == ["mcp__d__may_task", "mcp__d__plain"]
    assert listed["mcp__d__may_task"].execution == types.ToolExecution(task_support="optional")
    assert not called.is_error
    assert "needs_task" in caplog.text and "task" in caplog.text
