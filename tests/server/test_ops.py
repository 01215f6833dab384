"""The hub's operations surface through a real `serve --http` process: probes, /metrics (parsed
with Prometheus' own parser), drain on SIGTERM during a 3 s call, and reload on SIGHUP."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import MCPError
from prometheus_client.parser import text_string_to_metric_families

from hub_support import HEADERS, INITIALIZE, Hub, hub_client, start_hub
from proxy_support import Notifications
from waits import deadline, until

ECHO = Path(__file__).parent.parent / "fixtures" / "echo_server.py"
CLIENT = "carol-token-0123456789abcdef"


def _server(name: str, *args: str) -> str:
    return f"[servers.{name}]\ncommand = {sys.executable!r}\nargs = {[str(ECHO), *args]!r}\n"


def _hub(tmp_path: Path, *servers: str, drain: float = 30, log: Path | None = None) -> tuple[Hub, Path]:
    config = tmp_path / "omega.toml"
    clients = f'[hub]\ndrain_seconds = {drain}\n[hub.clients.carol]\ntoken = "${{CAROL_TOKEN}}"\n'
    logged = ("--log-file", str(log)) if log else ()
    config.write_text("".join(_server(s, *logged) for s in servers) + clients)
    env = {"CAROL_TOKEN": CLIENT, "DAVE_TOKEN": "dave-token-0123456789abcdef"}
    return start_hub(tmp_path, "--config", str(config), env=env), config


def _samples(hub: Hub) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = httpx2.get(f"http://127.0.0.1:{hub.port}/metrics", headers=hub.auth())
    assert answer.status_code == 200, answer.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


async def test_probes_need_no_token_and_metrics_need_the_hubs(tmp_path: Path) -> None:
    hub, _ = _hub(tmp_path, "echo")
    try:
        base = f"http://127.0.0.1:{hub.port}"
        assert httpx2.get(f"{base}/healthz").status_code == 200
        await until(lambda: httpx2.get(f"{base}/readyz").status_code == 200, "ready", 20, interval=0.05)
        assert httpx2.get(f"{base}/metrics").status_code == 401
        assert httpx2.get(f"{base}/metrics", headers=hub.auth(CLIENT)).status_code == 403
        assert httpx2.get(f"{base}/metrics", headers=hub.auth()).status_code == 200
    finally:
        assert hub.stop() == 0


async def test_metrics_count_the_calls_by_method_tool_and_error(tmp_path: Path) -> None:
    hub, _ = _hub(tmp_path, "echo")
    try:
        async with hub_client(hub.url, hub.token) as client:
            for _ in range(3):
                assert not (await client.call_tool("mcp__echo__echo", {"text": "hi"})).is_error
            assert (await client.call_tool("bash", {"command": "exit 3"})).is_error
            with pytest.raises(MCPError):
                await client.call_tool("no_such_tool_at_all", {})
            samples = _samples(hub)
        assert samples[("omega_sessions", ())] >= 1
    finally:
        assert hub.stop() == 0
    count = "mcp_server_operation_duration_seconds_count"

    def labels(tool: str, error: str) -> tuple[tuple[str, str], ...]:
        return (("error_type", error), ("gen_ai_tool_name", tool), ("mcp_method_name", "tools/call"))

    assert samples[(count, labels("mcp__echo__echo", ""))] == 3
    assert samples[(count, labels("bash", "tool_error"))] == 1
    assert samples[(count, labels("_OTHER", "-32602"))] == 1
    assert samples[("omega_downstream_up", (("server", "echo"),))] == 1


async def test_sigterm_drains_a_call_in_flight_refuses_new_sessions_and_exits_zero(tmp_path: Path) -> None:
    received = tmp_path / "received.jsonl"
    hub, _ = _hub(tmp_path, "echo", log=received)
    base = f"http://127.0.0.1:{hub.port}"
    try:
        await until(lambda: httpx2.get(f"{base}/readyz").status_code == 200, "ready", 20, interval=0.05)
        async with hub_client(hub.url, hub.token) as client, anyio.create_task_group() as tg:
            answers: list[object] = []

            async def slow() -> None:
                answers.append(await client.call_tool("mcp__echo__sleep", {"seconds": 3}))

            tg.start_soon(slow)
            await until(lambda: '"sleep"' in received.read_text() if received.exists() else False, "the call", 20)
            hub.proc.send_signal(signal.SIGTERM)
            await until(lambda: httpx2.get(f"{base}/readyz").status_code == 503, "draining", 5, interval=0.05)
            assert httpx2.get(f"{base}/healthz").status_code == 200
            opened = httpx2.post(hub.url, json=INITIALIZE, headers={**HEADERS, **hub.auth()})
            assert opened.status_code == 503 and "draining" in opened.text
            assert not (await client.call_tool("mcp__echo__echo", {"text": "still served"})).is_error
        assert len(answers) == 1 and not answers[0].is_error  # type: ignore[attr-defined]
        assert await anyio.to_thread.run_sync(lambda: hub.proc.wait(30)) == 0
    finally:
        hub.stop()


async def test_sighup_adds_and_removes_servers_while_a_client_stays_connected(tmp_path: Path) -> None:
    hub, config = _hub(tmp_path, "echo", "gone")
    notes = Notifications()
    try:
        async with hub_client(hub.url, hub.token, message_handler=notes) as client:
            await client.call_tool("mcp__echo__echo", {"text": "before"})
            names = {t.name for t in (await client.list_tools()).tools}
            assert "mcp__gone__echo" in names
            first_pid = (await client.call_tool("mcp__echo__pid", {})).content[0].text  # type: ignore[union-attr]
            config.write_text(config.read_text().replace("[servers.gone]", "[servers.added]"))
            hub.proc.send_signal(signal.SIGHUP)

            async def changed() -> set[str]:
                return {t.name for t in (await client.list_tools()).tools}

            with deadline(20):
                while "mcp__added__echo" not in (names := await changed()):
                    await notes.next()
            assert "mcp__gone__echo" not in names and "mcp__echo__echo" in names
            again = await client.call_tool("mcp__echo__pid", {})
            assert again.content[0].text == first_pid  # type: ignore[union-attr]  # untouched server, same process
            assert not (await client.call_tool("mcp__added__echo", {"text": "new"})).is_error
            with pytest.raises(MCPError):
                await client.call_tool("mcp__gone__echo", {"text": "old"})
    finally:
        assert hub.stop() == 0
    assert "SIGHUP: reloaded" in hub.log.read_text()


async def test_sighup_that_adds_a_client_restarts_no_server(tmp_path: Path) -> None:
    hub, config = _hub(tmp_path, "echo", "other")
    notes = Notifications()
    try:
        async with hub_client(hub.url, hub.token, message_handler=notes) as client:
            pids = [(await client.call_tool(f"mcp__{s}__pid", {})).content[0].text for s in ("echo", "other")]  # type: ignore[union-attr]
            (tmp_path / "dave").mkdir()
            added = f'[hub.clients.dave]\ntoken = "${{DAVE_TOKEN}}"\nworkspace = {str(tmp_path / "dave")!r}\n'
            config.write_text(config.read_text() + added)
            hub.proc.send_signal(signal.SIGHUP)
            await until(lambda: "SIGHUP: reloaded" in hub.log.read_text(), "the reload", 20, interval=0.05)
            assert "no server changed" in hub.log.read_text()
            again = [(await client.call_tool(f"mcp__{s}__pid", {})).content[0].text for s in ("echo", "other")]  # type: ignore[union-attr]
            assert again == pids
    finally:
        assert hub.stop() == 0
