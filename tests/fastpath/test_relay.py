"""The tools/call relay (stdio client → `omega-mcp serve` → stdio server), end to end.

Every test drives a real `omega-mcp serve` with the SDK client in the handshake era, which is
the relay's path; the fixture server logs what it receives, to see what reached it."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import StdioServerParameters, types

from proxy_support import ECHO_SERVER, listed, wait_until
from waits import deadline


def _server(name: str, *args: str, timeout: float | None = None) -> str:
    entry = (
        f"\n[servers.{name}]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps([str(ECHO_SERVER), *args])}\n"
    )
    return entry + (f"timeout = {timeout}\n" if timeout is not None else "")


@asynccontextmanager
async def omega(tmp_path: Path, servers: str, **client_options: Any) -> AsyncIterator[mcp.Client]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n{servers}')
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "warning"],
        env={"OMEGA_HOME": str(tmp_path / "home")},
    )
    async with mcp.Client(params, mode="legacy", **client_options) as client:
        # Each server connected (serve answers tools/list before they are): calls take the relay.
        await listed(client, *(f"mcp__{name}__echo" for name in re.findall(r"^\[servers\.([\w-]+)\]", servers, re.M)))
        yield client


def _received(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_results_with_every_content_type_pass_through_unchanged(tmp_path: Path):
    async with omega(tmp_path, _server("fx")) as client:
        result = await client.call_tool("mcp__fx__rich", {})
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["content"] == [
        {"type": "text", "text": "héllo", "annotations": {"priority": 0.5}},
        {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource_link", "name": "doc", "uri": "file:///doc.txt", "mimeType": "text/plain"},
        {"type": "resource", "resource": {"uri": "file:///e.txt", "text": "embedded", "mimeType": "text/plain"}},
        {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAEC"}},
    ]
    assert dumped["structuredContent"] == {"double": 4, "nested": {"list": [1, "two", None]}}
    assert dumped["_meta"] == {"vendor/trace": "t-1"}
    assert result.is_error is False


async def test_request_meta_reaches_the_server_and_arguments_are_validated_first(tmp_path: Path):
    log = tmp_path / "received.jsonl"
    async with omega(tmp_path, _server("fx", "--log-file", str(log))) as client:
        ok = await client.call_tool("fx.echo", {"text": "hi"}, meta={"vendor/tool-use-id": "tu-1"})
        bad = await client.call_tool("mcp__fx__echo", {"text": 5})
    calls = [m for m in _received(log) if m.get("method") == "tools/call"]
    assert ok.structured_content == {"text": "hi"}
    assert [c["params"]["name"] for c in calls] == ["echo"]  # the invalid call never left omega
    assert str(calls[0]["id"]).startswith("omega-relay-")  # it took the relay, not the SDK path
    assert calls[0]["params"]["_meta"] == {"vendor/tool-use-id": "tu-1"}
    assert bad.is_error and "`text`" in bad.content[0].text  # type: ignore[union-attr]


async def test_progress_from_the_server_reaches_the_client_under_its_own_token(tmp_path: Path):
    received: list[tuple[float, float | None, str | None]] = []
    arrived = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((progress, total, message))
        arrived.set()

    async with omega(tmp_path, _server("fx")) as client:
        result = await client.call_tool("mcp__fx__progress", {}, progress_callback=on_progress)
        with deadline(5):  # the SDK client delivers progress on its own task
            await arrived.wait()
    assert not result.is_error
    assert received == [(1.0, 4.0, "quarter")]


async def test_a_timeout_cancels_the_call_downstream_and_is_an_is_error_result(tmp_path: Path):
    log = tmp_path / "received.jsonl"
    async with omega(tmp_path, _server("fx", "--log-file", str(log), timeout=0.5)) as client:
        result = await client.call_tool("mcp__fx__sleep", {"seconds": 30})
        after = await client.call_tool("mcp__fx__echo", {"text": "still answering"})
    assert result.is_error and "timed out after 0.5 s" in result.content[0].text  # type: ignore[union-attr]
    assert after.structured_content == {"text": "still answering"}
    received = _received(log)
    call_id = next(m["id"] for m in received if m.get("params", {}).get("name") == "sleep")
    cancels = [m for m in received if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["requestId"] for c in cancels] == [call_id]


async def test_a_client_cancellation_is_forwarded_to_the_server(tmp_path: Path):
    log = tmp_path / "received.jsonl"
    async with omega(tmp_path, _server("fx", "--log-file", str(log))) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "mcp__fx__sleep", {"seconds": 30})
            await wait_until(lambda: any(m.get("params", {}).get("name") == "sleep" for m in _received(log)))
            tg.cancel_scope.cancel()
        after = await client.call_tool("mcp__fx__echo", {"text": "next"})  # answered once the sleep gave up
    received = _received(log)
    call_id = next(m["id"] for m in received if m.get("params", {}).get("name") == "sleep")
    assert {"method": "notifications/cancelled", "requestId": call_id} in [
        {"method": m.get("method"), "requestId": m.get("params", {}).get("requestId")} for m in received
    ]
    assert after.structured_content == {"text": "next"}


async def test_a_slow_call_does_not_hold_up_calls_to_another_server(tmp_path: Path):
    async with omega(tmp_path, _server("slow") + _server("fast")) as client:
        slow_done = anyio.Event()
        fast: list[types.CallToolResult] = []

        async def slow() -> None:
            await client.call_tool("mcp__slow__sleep", {"seconds": 3})
            slow_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            fast.append(await client.call_tool("mcp__fast__echo", {"text": "overtakes"}))
            assert not slow_done.is_set()
            tg.cancel_scope.cancel()  # proven; no need to wait for the slow call
    assert fast[0].structured_content == {"text": "overtakes"}


async def test_a_server_dying_during_a_call_is_an_is_error_and_its_restart_is_relayed_again(tmp_path: Path):
    log = tmp_path / "received.jsonl"
    async with omega(tmp_path, _server("fx", "--log-file", str(log))) as client:
        result = await client.call_tool("mcp__fx__crash", {})
        with deadline(20):  # the restart (1 s backoff) brings the tools back
            while True:
                again = await client.call_tool("mcp__fx__echo", {"text": "back"})
                if not again.is_error:
                    break
                await anyio.sleep(0.2)
    assert result.is_error and "server fx went away" in result.content[0].text  # type: ignore[union-attr]
    assert again.structured_content == {"text": "back"}
    echo_ids = [m["id"] for m in _received(log) if m.get("params", {}).get("name") == "echo"]
    assert str(echo_ids[-1]).startswith("omega-relay-")  # the new process is relayed too
