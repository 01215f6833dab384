"""`[hub] max_message_mb`: an answer longer than the bound fails that call only, over stdio and HTTP.

The reader never buffers more than the bound (the RSS of a real omega under a 300 MiB line is
checked in tests/security/test_message_flood.py); here: what passes, what the call says, that the
server keeps running, and that a long line naming no request still stops a stdio server.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel import Server

from omega_mcp.config import Config
from omega_mcp.config.tables import HubConfig
from omega_mcp.proxy.supervisor import Downstreams, DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import FIXTURES, client, hub, read_pid, stdio_fixture
from remote_support import served

FLOOD = FIXTURES / "flood_server.py"
_MIB = 1 << 20


def _flood(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(FLOOD), *args])


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_an_answer_over_the_bound_fails_that_call_only_and_the_server_keeps_running(
    rwx_policy: SandboxPolicy, tmp_path: Path
):
    ppid = tmp_path / "flood.ppid"
    specs = (
        DownstreamSpec("flood", _flood("--ppid-file", str(ppid)), max_message_bytes=_MIB),
        DownstreamSpec("ok", stdio_fixture()),
    )
    async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, _, server):
        await downstreams.wait_ready()
        async with client(server) as c:
            fits = await c.call_tool("mcp__flood__flood", {"mb": 0.5})
            stdio = downstreams.connected("flood")
            assert stdio is not None and stdio[0].stdio is not None
            flood_pid = stdio[0].stdio.pid
            too_long = await c.call_tool("mcp__flood__flood", {"mb": 3})
            after = await c.call_tool("mcp__flood__flood", {"mb": 0.25})
            echoed = await c.call_tool("mcp__ok__echo", {"text": "still here"})
            status = downstreams.statuses()[0]
            now = downstreams.connected("flood")
            assert now is not None and now[0].stdio is not None and now[0].stdio.pid == flood_pid  # the same process
    assert not fits.is_error and len(_text(fits)) == _MIB // 2
    assert too_long.is_error
    assert _text(too_long) == (
        "the result of flood from server flood is longer than max_message_mb (1 MiB) and was dropped "
        "(raise max_message_mb in [hub] for larger results)"
    )
    assert not after.is_error and len(_text(after)) == _MIB // 4
    assert not echoed.is_error and _text(echoed) == "still here"
    assert status.state == "connected"
    assert read_pid(ppid) > 0


async def test_over_http_an_answer_over_the_bound_fails_that_call_only(rwx_policy: SandboxPolicy):
    """A JSON body and a server-sent event alike: no reconnect, the next call is answered."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="big", input_schema={"type": "object"})])

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        size = int((params.arguments or {})["bytes"])
        return types.CallToolResult(content=[types.TextContent(text="x" * size)])

    server = Server("big", on_list_tools=list_tools, on_call_tool=call)
    results: dict[str, list[types.CallToolResult]] = {}
    async with served(server, json_response=True) as json_url, served(server) as sse_url:
        specs = [
            DownstreamSpec(name, url, max_message_bytes=_MIB) for name, url in (("json", json_url), ("sse", sse_url))
        ]
        async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, _, omega):
            await downstreams.wait_ready()
            async with client(omega) as c:
                for name in ("json", "sse"):
                    results[name] = [
                        await c.call_tool(f"mcp__{name}__big", {"bytes": size}) for size in (_MIB // 2, 2 * _MIB, 10)
                    ]
                states = [s.state for s in downstreams.statuses()]
    assert states == ["connected", "connected"]
    for name, (fits, too_long, after) in results.items():
        assert not fits.is_error and len(_text(fits)) == _MIB // 2, name
        assert too_long.is_error and _text(too_long).startswith(
            f"the result of big from server {name} is longer than max_message_mb (1 MiB)"
        ), (name, _text(too_long)[:300])
        assert not after.is_error and _text(after) == "x" * 10, name


async def test_a_server_flooding_before_its_handshake_fails_with_the_bound_named(rwx_policy: SandboxPolicy):
    spec = DownstreamSpec("flood", _flood("--flood-at-start", "2"), max_message_bytes=_MIB)
    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, toolbox, _):
        await downstreams.wait_ready()
        status = downstreams.statuses()[0]
        names = [t.name for t in await toolbox.list_tools()]
    assert status.state == "failed"
    assert status.reason == "a message exceeded max_message_mb (1 MiB)"
    assert "bash" in names and not any(n.startswith("mcp__flood__") for n in names)


def test_max_message_mb_defaults_to_64_and_is_strict():
    assert Config().hub.max_message_mb == 64
    assert Config.model_validate({"hub": {"max_message_mb": 8}}).hub.max_message_mb == 8
    for bad in ("64", 0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_message_mb"):
            Config.model_validate({"hub": {"max_message_mb": bad}})
    assert HubConfig().max_message_mb << 20 == DownstreamSpec("x", "http://127.0.0.1:1/mcp").max_message_bytes


def test_the_config_bound_reaches_each_server():
    config = Config.model_validate({"hub": {"max_message_mb": 3}, "servers": {"s": {"command": sys.executable}}})
    downstreams = Downstreams.from_config(config.for_servers)
    assert downstreams._entries["s"].spec.max_message_bytes == 3 * _MIB  # pyright: ignore[reportPrivateUsage]
