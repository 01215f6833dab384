"""The era probe never costs a server (SPEC "Transparency": omega connects to each downstream in the era
it speaks): whatever a handshake-only stdio server does with `server/discover` (an empty result, an
error, silence, a crash), omega connects it when a plain `initialize` would. Hand-written stdlib
fixtures, through the hub (the SDK-loaded path) and through the CLI (the servers started early)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters

from cli_support import run_omega, rwx_config
from omega_mcp.proxy.supervisor import DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import FIXTURES, hub, wait_until

LENIENT = FIXTURES / "lenient_server.py"
FRAGILE = FIXTURES / "fragile_server.py"


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.parametrize(
    "args",
    [[str(LENIENT)], [str(FRAGILE), "crash"], [str(FRAGILE), "ignore"]],
    ids=["empty-result", "crash", "silence"],
)
async def test_a_handshake_only_server_connects_whatever_it_does_with_the_probe(
    rwx_policy: SandboxPolicy, args: list[str]
):
    spec = DownstreamSpec("old", StdioServerParameters(command=sys.executable, args=args))
    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, toolbox, _):
        names = [t.name for t in await toolbox.list_tools()]
        result = await toolbox.call_tool("mcp__old__ping", {})
        status = {s.server_name: s for s in downstreams.statuses()}
    assert "mcp__old__ping" in names, status["old"].reason
    assert not result.is_error and _text(result) == "pong"


async def test_a_server_the_probe_crashed_is_asked_the_handshake_alone_from_then_on(
    rwx_policy: SandboxPolicy, tmp_path: Path
):
    starts = tmp_path / "starts"
    params = StdioServerParameters(command=sys.executable, args=[str(FRAGILE), "crash", "--starts", str(starts)])
    async with hub(rwx_policy, DownstreamSpec("old", params), backoff_seconds=0.05) as (downstreams, toolbox, _):
        assert "mcp__old__ping" in [t.name for t in await toolbox.list_tools()]
        assert starts.read_text().count("start") == 2  # the probe's start, then the handshake alone
        first = downstreams.connected("old")
        assert first is not None
        first[0].lose("a test restarts it")
        await wait_until(lambda: (now := downstreams.connected("old")) is not None and now[0] is not first[0])
        result = await toolbox.call_tool("mcp__old__ping", {})
    assert not result.is_error
    assert starts.read_text().count("start") == 3  # the restart was not probed again


@pytest.mark.parametrize("args", [[str(LENIENT)], [str(FRAGILE), "crash"]], ids=["empty-result", "crash"])
@pytest.mark.e2e
def test_a_handshake_only_server_started_before_the_sdk_loads_connects(tmp_path: Path, args: list[str]):
    server = f"[servers.old]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
    proc = run_omega(tmp_path, "call", "mcp__old__ping", "{}", "--config", str(rwx_config(tmp_path, server)))
    assert proc.returncode == 0, proc.stderr
    assert "pong" in proc.stdout
    assert "Traceback" not in proc.stderr
