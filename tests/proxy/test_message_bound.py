"""`[hub] max_message_mb`: a stdio server's message longer than the bound stops that server, clearly.

The reader never buffers more than the bound (the RSS of a real omega under a 300 MiB line is
checked in tests/security/test_message_flood.py); here: what passes, what the call and the
status say, and that the other servers keep working.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters

from omega_mcp.config import Config
from omega_mcp.config.tables import HubConfig
from omega_mcp.proxy.supervisor import Downstreams, DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import FIXTURES, alive, client, hub, read_pid, stdio_fixture, wait_until

FLOOD = FIXTURES / "flood_server.py"
_MIB = 1 << 20


def _flood(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(FLOOD), *args])


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_a_message_over_the_bound_stops_that_server_and_says_so(rwx_policy: SandboxPolicy, tmp_path: Path):
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
            echoed = await c.call_tool("mcp__ok__echo", {"text": "still here"})
            await wait_until(lambda: downstreams.statuses()[0].state == "restarting")
            down = await c.call_tool("mcp__flood__flood", {"mb": 0.1})
            status = downstreams.statuses()[0]
            assert flood_pid is not None and not alive(flood_pid)  # stopped, not left writing
    assert not fits.is_error and len(_text(fits)) == _MIB // 2
    assert too_long.is_error
    assert _text(too_long) == (
        "server flood was stopped during the call to flood: a message exceeded max_message_mb (1 MiB); "
        "omega will restart it"
    )
    assert not echoed.is_error and _text(echoed) == "still here"
    assert status.reason == "a message exceeded max_message_mb (1 MiB)"
    assert down.is_error and "a message exceeded max_message_mb (1 MiB)" in _text(down)
    assert read_pid(ppid) > 0


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
    downstreams = Downstreams.from_config(config)
    assert downstreams._entries["s"].spec.max_message_bytes == 3 * _MIB  # pyright: ignore[reportPrivateUsage]
