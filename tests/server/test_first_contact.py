"""`omega-mcp serve` over real stdio while a downstream server is still starting: a raw JSON-RPC client
gets the built-ins at once, `notifications/tools/list_changed` when the server arrives, and a call to
the slow server's tool waits for it without holding up a built-in call."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from proxy_support import ECHO_SERVER
from waits import deadline

BUILTINS = ["bash", "read", "write", "edit", "bash_output", "kill_shell"]
ANSWER_SECONDS = 8.0
"""A liveness bound on each answer, not a speed measurement: omega's old startup wait held the first
tools/list for 10 s whenever a server was starting; `bench/bench_first_contact.py` measures the time."""


class _Wire:
    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)

    async def send(self, message: dict[str, Any]) -> None:
        await self._stdin.send((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())

    async def receive(self) -> dict[str, Any]:
        with deadline(ANSWER_SECONDS):
            line = await self._stdout.receive_until(b"\n", 16 * 1024 * 1024)
        return json.loads(line)


def _config(tmp_path: Path, gate: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n\n'
        f'[servers.slow]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}", "--start-gate", "{gate}"]\n'
    )
    return config


def _open_gate(gate: Path) -> None:
    fd = os.open(gate, os.O_WRONLY)  # returns once the server is waiting at its gate
    os.close(fd)


async def test_tools_list_answers_with_the_builtins_while_a_server_starts_and_list_changed_follows(tmp_path: Path):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    command = [sys.executable, "-m", "omega_mcp", "serve", "--config", str(_config(tmp_path, gate))]
    async with await anyio.open_process(command, env=env, cwd=tmp_path, stderr=None) as process:
        wire = _Wire(process)
        try:
            await wire.send(
                {
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw"}},
                }
            )
            assert (await wire.receive())["id"] == 1
            await wire.send({"method": "notifications/initialized"})
            await wire.send({"id": 2, "method": "tools/list"})
            listed = await wire.receive()
            first = [tool["name"] for tool in listed["result"]["tools"]]

            # A call to the slow server waits for it; a built-in call sent after it is answered first.
            slow_call = {"name": "mcp__slow__echo", "arguments": {"text": "arrived"}}
            await wire.send({"id": 3, "method": "tools/call", "params": slow_call})
            bash_call = {"name": "bash", "arguments": {"command": "echo built-in"}}
            await wire.send({"id": 4, "method": "tools/call", "params": bash_call})
            bash = await wire.receive()

            with deadline(ANSWER_SECONDS):
                await anyio.to_thread.run_sync(_open_gate, gate)
            # The slow call's answer and tools/list_changed, in either order (other notifications may
            # come between: prompts or resources list_changed, logs).
            later: list[dict[str, Any]] = []
            while not (
                any(message.get("id") == 3 for message in later)
                and any(message.get("method") == "notifications/tools/list_changed" for message in later)
            ):
                later.append(await wire.receive())
            await wire.send({"id": 5, "method": "tools/list"})
            second = [tool["name"] for tool in (await wire.receive())["result"]["tools"]]
        finally:
            assert process.stdin is not None
            await process.stdin.aclose()  # the client goes away: omega exits
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
    assert first == BUILTINS  # answered before the slow server was up (it was still at its gate)
    assert bash["id"] == 4 and bash["result"]["content"][0]["text"].strip() == "built-in"
    assert {message.get("method") for message in later} >= {"notifications/tools/list_changed"}
    slow = next(message for message in later if message.get("id") == 3)
    assert slow["result"]["content"][0]["text"] == "arrived"
    assert second[: len(BUILTINS) + 1] == [*BUILTINS, "mcp__slow__echo"]
