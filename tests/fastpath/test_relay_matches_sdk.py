"""The relay is an optimisation only: the same calls through it and through the SDK path agree.

One omega (Toolbox + Downstreams + server) in process, with the stdlib fixture server as a stdio
downstream, serves clients over pipes with the relay and without it (the server's own fast path),
in both eras (handshake and 2026-07-28), and in memory in the 2026-07-28 era (the SDK's model
path, the reference). Every call's result, error or progress must be the same on all of them (a
2026-era answer over pipes, envelope included: `resultType` and the serverInfo stamp); the
fixture's log shows which calls the relay actually took.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp import StdioServerParameters

from omega_mcp.proxy.spec import DownstreamSpec
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.server import OmegaServer, build_server
from omega_mcp.toolbox import Toolbox
from relay_support import outcome, pipe_client

ECHO_SERVER = Path(__file__).parents[1] / "fixtures" / "echo_server.py"

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("mcp__fx__echo", {"text": "héllo"}),
    ("mcp__fx__rich", {}),
    ("mcp__fx__pid", {}),
    ("mcp__fx__echo", {}),  # invalid arguments: caught by omega before the server
    ("mcp__fx__echo", {"text": 5}),
    ("fx.echo", {"text": "by alias"}),
    ("mcp__fx__sleep", {"seconds": 30}),  # past the server's timeout: cancelled, isError
    ("mcp__fx__nope", {}),  # unknown: a JSON-RPC error
    ("read", {"file_path": "missing.txt"}),  # a built-in: never relayed
]


def _received(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
async def omega(policy: SandboxPolicy, tmp_path: Path) -> AsyncIterator[tuple[OmegaServer, Path]]:
    log = tmp_path / "received.jsonl"
    target = StdioServerParameters(command=sys.executable, args=[str(ECHO_SERVER), "--log-file", str(log)])
    spec = DownstreamSpec("fx", target, timeout_seconds=0.5)
    async with Downstreams([spec]) as downstreams, Toolbox(policy, downstreams) as toolbox:
        yield build_server(toolbox, catalog=downstreams), log


async def test_every_call_has_the_same_outcome_through_the_relay_and_the_sdk_path(
    omega: tuple[OmegaServer, Path],
) -> None:
    server, log = omega
    async with mcp.Client(server, mode="auto") as reference:
        expected = [await outcome(reference, name, args) for name, args in CALLS]
    sdk_calls = len([m for m in _received(log) if m.get("method") == "tools/call"])

    async with mcp.Client(server, mode="auto") as reference:
        enveloped = [await outcome(reference, name, args, envelope=True) for name, args in CALLS]

    for relay in (False, True):
        for mode in ("legacy", "auto"):
            before = len(_received(log))
            async with pipe_client(server, relay=relay, mode=mode) as client:
                got = [await outcome(client, name, args, envelope=mode == "auto") for name, args in CALLS]
            assert got == (enveloped if mode == "auto" else expected), f"relay={relay} mode={mode}"
            ids = [str(m["id"]) for m in _received(log)[before:] if m.get("method") == "tools/call"]
            assert len(ids) == sdk_calls
            relayed = [i for i in ids if i.startswith("omega-relay-")]
            assert (len(relayed) == len(ids)) if relay else not relayed, f"relay={relay} mode={mode}"
    assert all(o["result"]["resultType"] == "complete" and o["result"]["_meta"] for o in enveloped if "result" in o)

    assert any("timed out" in json.dumps(outcome) for outcome in expected)
    assert any("error" in outcome for outcome in expected)


async def test_progress_is_the_same_through_the_relay_and_the_sdk_path(omega: tuple[OmegaServer, Path]) -> None:
    server, _ = omega
    async with mcp.Client(server, mode="auto") as reference:
        expected = await outcome(reference, "mcp__fx__progress", {})
    assert expected["progress"], "the fixture reports progress to a caller that asks for it"
    for relay in (False, True):
        for mode in ("legacy", "auto"):
            async with pipe_client(server, relay=relay, mode=mode) as client:
                assert await outcome(client, "mcp__fx__progress", {}) == expected, f"relay={relay} mode={mode}"


MODERN_SERVER = Path(__file__).parents[1] / "fixtures" / "modern_server.py"
MODERN_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("mcp__m__echo", {"text": "héllo"}),
    ("mcp__m__echo", {}),  # invalid arguments: caught by omega before the server
    ("mcp__m__big", {"size": 2 << 20}),  # past max_message_mb: an answer omega writes, isError
    ("mcp__m__ask", {}),  # a 2026-era round: answered with the client's answer, or handed to a 2026-era client
]


async def _answer(context: Any, params: Any) -> Any:
    from mcp import types

    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def test_with_a_2026_era_server_the_relay_and_the_sdk_path_agree(policy: SandboxPolicy) -> None:
    """A 2026-era client's call goes to the server as it is (envelope, rounds); a handshake-era one's
    over a handshake-era link of its own: the relay takes both, and answers as the SDK path does."""
    target = StdioServerParameters(command=sys.executable, args=[str(MODERN_SERVER)])
    spec = DownstreamSpec("m", target, max_message_bytes=1 << 20)
    async with Downstreams([spec]) as downstreams, Toolbox(policy, downstreams) as toolbox:
        server = build_server(toolbox, catalog=downstreams)
        await downstreams.wait_ready()
        session = downstreams.connected("m")
        assert session is not None and session[0].era == "modern"
        for mode in ("legacy", "auto"):
            outcomes: dict[bool, list[dict[str, Any]]] = {}
            relayed: dict[bool, str] = {}
            for relay in (False, True):
                async with pipe_client(server, relay=relay, mode=mode, elicitation_callback=_answer) as client:
                    envelope = mode == "auto"
                    outcomes[relay] = [
                        await outcome(client, name, args, envelope=envelope) for name, args in MODERN_CALLS
                    ]
                    relayed[relay] = (await client.call_tool("mcp__m__request_id", {})).content[0].text  # type: ignore[union-attr]
            assert outcomes[True] == outcomes[False], f"mode={mode}"
            assert relayed[True].startswith("omega-relay-") and not relayed[False].startswith("omega-relay-"), mode


async def test_a_handshake_era_call_to_a_2026_only_server_is_left_to_the_sdk_path(policy: SandboxPolicy) -> None:
    """`era = "modern"`: no handshake-era link exists, and the server refuses a call without the 2026
    envelope; the relay declines it and the SDK path, which adds the envelope, answers."""
    target = StdioServerParameters(command=sys.executable, args=[str(MODERN_SERVER)])
    spec = DownstreamSpec("m", target, era="modern")
    async with Downstreams([spec]) as downstreams, Toolbox(policy, downstreams) as toolbox:
        server = build_server(toolbox, catalog=downstreams)
        await downstreams.wait_ready()
        got: dict[bool, dict[str, Any]] = {}
        for relay in (False, True):
            async with pipe_client(server, relay=relay, mode="legacy") as client:
                got[relay] = await outcome(client, "mcp__m__echo", {"text": "hi"})
                request_id = (await client.call_tool("mcp__m__request_id", {})).content[0].text  # type: ignore[union-attr]
                assert not request_id.startswith("omega-relay-")
        assert got[True] == got[False] and got[True]["result"]["content"][0]["text"] == "hi"
