"""Resource subscriptions through a stdio downstream that speaks only the handshake era (SPEC
"Transparency": resource subscriptions and `resources/updated` pass through): a handshake-era client
subscribing, and a 2026-era client listening, each hear of the server's updates, `ui://` URIs in
their per-server form included."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters

from omega_mcp.proxy.supervisor import DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import FIXTURES, client, hub
from waits import deadline

WATCHED = StdioServerParameters(command=sys.executable, args=[str(FIXTURES / "watched_server.py")])


class _Updates:
    def __init__(self) -> None:
        self.uris: list[str] = []
        self.arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self.arrived.set()


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize("uri", ["res://watched", "ui://w/widget/index.html"])
async def test_a_handshake_client_subscribed_through_a_stdio_server_hears_of_its_updates(
    rwx_policy: SandboxPolicy, uri: str
):
    updates = _Updates()
    async with hub(rwx_policy, DownstreamSpec("w", WATCHED), backoff_seconds=60) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, "legacy", message_handler=updates) as c:
            assert uri in [str(r.uri) for r in (await c.session.list_resources()).resources]
            await c.subscribe_resource(uri)
            touched = await c.call_tool("mcp__w__touch", {"uri": uri.replace("ui://w/", "ui://")})
            assert not touched.is_error
            with deadline(10):
                await updates.arrived.wait()
            await c.unsubscribe_resource(uri)
    assert updates.uris == [uri]


async def test_a_2026_client_listening_through_a_stdio_handshake_server_hears_of_its_updates(
    rwx_policy: SandboxPolicy,
):
    async with hub(rwx_policy, DownstreamSpec("w", WATCHED), backoff_seconds=60) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, "auto") as c:
            await c.list_resources()
            async with c.listen(resource_subscriptions=["res://watched"]) as stream:
                assert stream.honored.resource_subscriptions == ["res://watched"]
                touched = await c.call_tool("mcp__w__touch", {"uri": "res://watched"})
                assert not touched.is_error
                with deadline(10):
                    event = await stream.__anext__()
    assert getattr(event, "uri", None) == "res://watched"


SDK_WATCHED = StdioServerParameters(command=sys.executable, args=[str(FIXTURES / "watched_sdk_server.py")])


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_of_either_era_hears_of_a_dual_era_stdio_servers_updates(rwx_policy: SandboxPolicy, mode: str):
    updates = _Updates()
    async with hub(rwx_policy, DownstreamSpec("w", SDK_WATCHED), backoff_seconds=60) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, mode, message_handler=updates) as c:
            await c.list_resources()
            if mode == "legacy":
                await c.subscribe_resource("res://watched")
                for _ in range(50):  # until the server's listen filter names the URI
                    assert not (await c.call_tool("mcp__w__touch", {})).is_error
                    with anyio.move_on_after(0.2):
                        await updates.arrived.wait()
                    if updates.uris:
                        break
                assert updates.uris[:1] == ["res://watched"]
                return
            async with c.listen(resource_subscriptions=["res://watched"]) as stream:
                event = None
                for _ in range(50):
                    assert not (await c.call_tool("mcp__w__touch", {})).is_error
                    with anyio.move_on_after(0.2):
                        event = await stream.__anext__()
                    if event is not None:
                        break
                assert getattr(event, "uri", None) == "res://watched"
