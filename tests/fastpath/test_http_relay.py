"""The relay to a streamable HTTP server: its own POSTs, and the same outcomes as the SDK path.

A real SDK server (`MCPServer`, tests/fixtures/modern_server.py) runs over streamable HTTP in its
own process; one omega in process connects to it (a 2026-era link, and a handshake-era one for
handshake-era clients) and serves clients over pipes with the relay and without it, in both eras.
Every call's result, error, progress and log lines must be the same either way; the server's
`request_id` tool shows which calls the relay took. A request of the server's own during a relayed
call (an elicitation, handshake era) reaches the client through the SDK session, and is answered.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from omega_mcp.proxy.spec import DownstreamSpec
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.server import build_server
from omega_mcp.toolbox import Toolbox
from proxy_support import http_fixture
from relay_support import outcome, pipe_client

MODERN_SERVER = Path(__file__).parents[1] / "fixtures" / "modern_server.py"

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("mcp__m__echo", {"text": "héllo"}),
    ("mcp__m__echo", {}),  # invalid arguments: caught by omega before the server
    ("mcp__m__big", {"size": 2 << 20}),  # past max_message_mb: an answer omega writes, isError
    ("mcp__m__progress", {}),
    ("mcp__m__log", {}),
    ("mcp__m__sleep", {"seconds": 30}),  # past the server's timeout: cancelled, isError
    ("mcp__m__echo", {"text": "after the timeout"}),
    ("mcp__m__ask", {}),  # a 2026-era round: handed to a 2026-era client (the SDK server refuses it at the handshake)
    ("mcp__m__elicit", {}),  # the server's own request during the call (handshake era)
    ("mcp__m__region", {"region": "eu-west"}),  # 2026 era: an `Mcp-Param-Region` header the server checks
]


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[str]:
    """The fixture server over HTTP; the `sleep` calls it starts are logged to tmp_path/sleeps.jsonl."""
    env = {**os.environ, "MODERN_FIXTURE_LOG": str(tmp_path / "sleeps.jsonl")}
    async with http_fixture(str(MODERN_SERVER), env=env) as url:
        yield url


async def _elicited(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # logging/setLevel
async def test_every_call_has_the_same_outcome_through_the_http_relay_and_the_sdk_path(
    policy: SandboxPolicy, remote: str
) -> None:
    spec = DownstreamSpec("m", remote, timeout_seconds=2, max_message_bytes=1 << 20)
    async with Downstreams([spec]) as downstreams, Toolbox(policy, downstreams) as toolbox:
        server = build_server(toolbox, catalog=downstreams)
        await downstreams.wait_ready()
        connected = downstreams.connected("m")
        assert connected is not None and connected[0].era == "modern"
        assert connected[0].lane_for(True) is not None, "a plain http:// server gets the relay's lane"
        for mode in ("legacy", "auto"):
            outcomes: dict[bool, list[dict[str, Any]]] = {}
            logs: dict[bool, list[tuple[str, Any]]] = {}
            ids: dict[bool, str] = {}
            for relay in (False, True):
                lines: list[tuple[str, Any]] = []

                async def logged(params: types.LoggingMessageNotificationParams, lines: list[Any] = lines) -> None:
                    lines.append((params.level, params.data))

                async with pipe_client(
                    server, relay=relay, mode=mode, elicitation_callback=_elicited, logging_callback=logged
                ) as client:
                    if mode == "legacy":
                        await client.set_logging_level("info")
                    envelope = mode == "auto"
                    outcomes[relay] = [await outcome(client, name, args, envelope=envelope) for name, args in CALLS]
                    ids[relay] = (await client.call_tool("mcp__m__request_id", {})).content[0].text  # type: ignore[union-attr]
                logs[relay] = lines
            assert outcomes[True] == outcomes[False], f"mode={mode}"
            assert logs[True] == logs[False], f"mode={mode}"
            assert ids[True].startswith("omega-relay-") and not ids[False].startswith("omega-relay-"), mode
            got = dict(zip((name for name, _ in CALLS), outcomes[True], strict=False))
            assert "timed out after 2 s" in str(got["mcp__m__sleep"]), mode
            assert "longer than max_message_mb (1 MiB)" in str(got["mcp__m__big"]), mode
            assert got["mcp__m__progress"]["progress"] == [(1.0, 2.0, "step 1"), (2.0, 2.0, "step 2")], mode
            if mode == "legacy":
                assert "Hello, Ada!" in str(got["mcp__m__elicit"])
                assert ("info", "a line from the tool") in logs[True]


async def test_a_call_cancelled_in_the_same_read_as_it_came_is_never_posted(
    policy: SandboxPolicy, remote: str, tmp_path: Path
) -> None:
    """A client's call and its cancel in one write reach the relay in one callback, before the POST's task
    has started: the POST is not sent (its cancel scope is made with the call, cancelled before entered)."""
    log = tmp_path / "sleeps.jsonl"
    spec = DownstreamSpec("m", remote, timeout_seconds=10)
    async with Downstreams([spec]) as downstreams, Toolbox(policy, downstreams) as toolbox:
        server = build_server(toolbox, catalog=downstreams)
        await downstreams.wait_ready()
        raw: list[int] = []
        async with pipe_client(server, relay=True, mode="legacy", raw=raw) as client:
            await client.call_tool("mcp__m__sleep", {"seconds": 0})  # the lane is open, and the log works
            params = {"name": "mcp__m__sleep", "arguments": {"seconds": 1}}
            call = {"jsonrpc": "2.0", "id": "raw-1", "method": "tools/call", "params": params}
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "raw-1"}}
            os.write(raw[0], (json.dumps(call) + "\n" + json.dumps(cancel) + "\n").encode())
            await anyio.sleep(1)  # time enough for a POST to reach the server
            assert (await client.call_tool("mcp__m__echo", {"text": "after"})).content[0].text == "after"  # type: ignore[union-attr]
        assert [json.loads(line) for line in log.read_text().splitlines()] == [{"seconds": 0}]
