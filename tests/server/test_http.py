"""`omega-mcp serve --http` as a real subprocess on a free loopback port, driven by the SDK Client."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import mcp
import pytest
from mcp.client.streamable_http import streamable_http_client

from bash_processes import Markers, assert_gone, wait_running
from hub_support import INITIALIZE, hub_client
from omega_mcp.server.http import is_loopback, load_or_create_token
from waits import deadline

_ECHO_SERVER = Path(__file__).parents[1] / "fixtures" / "echo_server.py"

TOKEN = "test-hub-token-0123456789"
_AUTH = {"Authorization": f"Bearer {TOKEN}"}
_NO_AUTH = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
_HEADERS = {**_NO_AUTH, **_AUTH}
_SERVE = [sys.executable, "-m", "omega_mcp", "serve", "--http", "--mode", "rwx"]
_PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    proc_env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home"), "OMEGA_TOKEN": TOKEN, **(env or {})}
    proc_env.pop("OMEGA_CONFIG", None)
    with (tmp_path / f"hub-{port}.log").open("wb") as log:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "omega_mcp",
                "serve",
                "--http",
                "--port",
                str(port),
                "--mode",
                "rwx",
                "--workspace",
                str(ws),
                *extra,
            ],
            env=proc_env,
            cwd=tmp_path,
            stderr=log,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"hub exited early: {(tmp_path / f'hub-{port}.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("hub did not start listening within 30 s")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[int]:
    proc, port = _start(tmp_path)
    yield port
    _stop(proc)


async def test_two_clients_at_once_have_independent_sessions(hub: int):
    url = f"http://127.0.0.1:{hub}/mcp"
    async with hub_client(url, TOKEN, mode="legacy") as first, hub_client(url, TOKEN, mode="legacy") as second:
        results: dict[str, str] = {}

        async def use(name: str, client: mcp.Client) -> None:
            result = await client.call_tool("bash", {"command": f"echo {name}"})
            results[name] = result.content[0].text.strip()  # type: ignore[union-attr]

        async with anyio.create_task_group() as tg:
            tg.start_soon(use, "one", first)
            tg.start_soon(use, "two", second)
    assert results == {"one": "one", "two": "two"}


async def test_stateless_2026_requests_are_answered(hub: int):
    async with hub_client(f"http://127.0.0.1:{hub}/mcp", TOKEN, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools][:4] == ["bash", "read", "write", "edit"]


def test_a_foreign_host_or_origin_is_refused(hub: int):
    url = f"http://127.0.0.1:{hub}/mcp"
    bad_host = httpx2.post(url, json=_PING, headers={**_HEADERS, "Host": f"evil.example:{hub}"})
    assert bad_host.status_code == 421
    bad_origin = httpx2.post(url, json=_PING, headers={**_HEADERS, "Origin": "http://evil.example"})
    assert bad_origin.status_code == 403


def test_allowed_hosts_lists_exactly_the_host_values_accepted(tmp_path: Path):
    config = tmp_path / "servers.toml"
    config.write_text('[hub]\nallowed_hosts = ["omega.internal"]\n')
    proc, port = _start(tmp_path, "--config", str(config))
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        named = httpx2.post(url, json=INITIALIZE, headers={**_HEADERS, "Host": "omega.internal:8765"})
        assert named.status_code == 200
        assert httpx2.post(url, json=_PING, headers={**_HEADERS, "Host": "other.internal"}).status_code == 421
        assert httpx2.post(url, json=_PING, headers=_HEADERS).status_code == 421  # loopback is not listed
    finally:
        assert _stop(proc) == 0


def test_bodies_up_to_max_message_mb_pass_and_longer_ones_are_refused(hub: int, tmp_path: Path):
    body = json.dumps({**_PING, "params": {"pad": "x" * (5 * 1024 * 1024)}})  # over the old fixed 4 MiB
    assert httpx2.post(f"http://127.0.0.1:{hub}/mcp", content=body, headers=_HEADERS).status_code != 413
    config = tmp_path / "servers.toml"
    config.write_text("[hub]\nmax_message_mb = 1\n")
    proc, port = _start(tmp_path, "--config", str(config))
    try:
        too_long = json.dumps({**_PING, "params": {"pad": "x" * (2 * 1024 * 1024)}})
        assert httpx2.post(f"http://127.0.0.1:{port}/mcp", content=too_long, headers=_HEADERS).status_code == 413
    finally:
        assert _stop(proc) == 0


async def test_a_token_is_required_when_bound_to_a_non_loopback_address(tmp_path: Path):
    proc, port = _start(tmp_path, "--host", "0.0.0.0", env={"OMEGA_TOKEN": ""})
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        assert httpx2.post(url, json=_PING, headers=_NO_AUTH).status_code == 401
        wrong = httpx2.post(url, json=_PING, headers={**_HEADERS, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        token_file = tmp_path / "home" / "token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
            mcp.Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
        ):
            result = await client.call_tool("bash", {"command": "echo authorized"})
            assert result.content[0].text.strip() == "authorized"  # type: ignore[union-attr]
            leak = await client.call_tool("read", {"file_path": str(token_file)})
            assert leak.is_error and token not in leak.content[0].text  # type: ignore[union-attr]
            overwrite = await client.call_tool("write", {"file_path": str(token_file), "content": "mine"})
            assert overwrite.is_error and "denied" in overwrite.content[0].text  # type: ignore[union-attr]
        assert token_file.read_text().strip() == token
    finally:
        assert _stop(proc) == 0


def test_omega_token_from_the_environment_is_used(tmp_path: Path):
    proc, port = _start(tmp_path, "--host", "0.0.0.0", env={"OMEGA_TOKEN": "s3cret-token"})
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        ok = httpx2.post(url, json=_PING, headers={**_HEADERS, "Authorization": "Bearer s3cret-token"})
        assert ok.status_code != 401
        assert not (tmp_path / "home" / "token").exists()
    finally:
        _stop(proc)


def test_sigterm_shuts_the_hub_down_gracefully(tmp_path: Path):
    proc, _ = _start(tmp_path)
    assert _stop(proc) == 0


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_progress_sent_just_before_the_result_reaches_the_client(tmp_path: Path, mode: str):
    config = tmp_path / "servers.toml"
    config.write_text(f'[servers.echo]\ncommand = "{sys.executable}"\nargs = ["{_ECHO_SERVER}"]\n')
    proc, port = _start(tmp_path, "--config", str(config))
    try:
        async with hub_client(f"http://127.0.0.1:{port}/mcp", TOKEN, mode=mode) as client:
            for _ in range(3):  # the fixture answers right after its progress notification
                received: list[tuple[float, float | None, str | None]] = []

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    received.append((progress, total, message))  # noqa: B023 - awaited within the iteration

                result = await client.call_tool("mcp__echo__progress", {}, progress_callback=on_progress)
                assert not result.is_error
                assert received == [(1.0, 4.0, "quarter")]
    finally:
        assert _stop(proc) == 0


async def test_sigterm_lets_a_call_in_flight_finish_and_closes_connected_clients_cleanly(tmp_path: Path):
    proc, port = _start(tmp_path)
    log = tmp_path / f"hub-{port}.log"
    marker = tmp_path / "ws" / "started"
    results: list[str] = []
    try:
        async with hub_client(f"http://127.0.0.1:{port}/mcp", TOKEN, mode="legacy") as idle:  # holds its GET stream
            await idle.list_tools()
            async with hub_client(f"http://127.0.0.1:{port}/mcp", TOKEN, mode="legacy") as busy:
                await busy.list_tools()  # or the client re-lists after the call, on a connection the hub refuses

                async def call() -> None:
                    result = await busy.call_tool("bash", {"command": "touch started; sleep 1; echo finished"})
                    results.append(result.content[0].text.strip())  # type: ignore[union-attr]

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    with deadline(20):
                        while not marker.exists():  # noqa: ASYNC110 - another process's file
                            await anyio.sleep(0.02)
                    proc.send_signal(signal.SIGTERM)
                    await anyio.to_thread.run_sync(lambda: proc.wait(timeout=20))
    except Exception:  # the clients may complain once the hub is gone: the hub's side is what is tested
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert results == ["finished"]
    assert proc.returncode == 0
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text


def test_loopback_detection():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.8.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")


def test_a_generated_token_is_reused_and_private(tmp_path: Path):
    token_file = tmp_path / "home" / "token"
    first = load_or_create_token(token_file, environ={})
    assert len(first) >= 32
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert load_or_create_token(token_file, environ={}) == first
    assert load_or_create_token(token_file, environ={"OMEGA_TOKEN": "given"}) == "given"


def _serve_http_once(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    return subprocess.run(
        [*_SERVE, "--workspace", str(tmp_path / "ws"), *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )


def _lines_but_the_root_warning(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("omega-mcp: warning: running as root:")]


def test_a_busy_port_is_one_line_naming_the_address_and_exit_two(tmp_path: Path):
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server would: omega must still fail
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _serve_http_once(tmp_path, "--port", str(port))
    assert proc.returncode == 2
    assert _lines_but_the_root_warning(proc.stderr) == [
        f"omega-mcp: error: --port: cannot listen on 127.0.0.1:{port}: address already in use"
    ]
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("host", "why"), [("no-such-host.invalid", "unknown host"), ("192.0.2.1", "not an address of this machine")]
)
def test_a_bad_host_is_one_line_naming_the_address_and_exit_two(tmp_path: Path, host: str, why: str):
    port = _free_port()
    proc = _serve_http_once(tmp_path, "--host", host, "--port", str(port))
    assert proc.returncode == 2
    lines = _lines_but_the_root_warning(proc.stderr)
    assert len(lines) == 1, proc.stderr  # no uvicorn log line, no "serving ..." before the bind
    assert lines[0].startswith(f"omega-mcp: error: --host: cannot listen on {host}:{port}: {why}")


def test_the_hub_announces_once_where_it_serves_after_it_listens(tmp_path: Path):
    proc, port = _start(tmp_path)
    log = tmp_path / f"hub-{port}.log"
    try:
        # The port accepts connections as soon as omega has bound it; the announcement follows
        # once uvicorn runs, so wait for it (bounded) before stopping the hub.
        deadline = time.monotonic() + 20
        while "serving" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    announced = [line for line in (tmp_path / f"hub-{port}.log").read_text().splitlines() if "serving" in line]
    assert announced == [
        f"omega-mcp INFO omega_mcp.server.http: serving streamable HTTP at http://127.0.0.1:{port}/mcp "
        "(bearer token required)"
    ]


def _shell_id(result: object) -> str:
    text = result.content[0].text  # type: ignore[attr-defined]
    return text.split()[3].rstrip(".")


async def test_a_session_cannot_read_or_kill_another_sessions_shell(hub: int, tmp_path: Path):
    url = f"http://127.0.0.1:{hub}/mcp"
    async with hub_client(url, TOKEN, mode="legacy") as owner, hub_client(url, TOKEN, mode="legacy") as other:
        started = await owner.call_tool("bash", {"command": "echo secret-output; sleep 300", "run_in_background": True})
        shell_id = _shell_id(started)
        for tool in ("bash_output", "kill_shell"):
            stolen = await other.call_tool(tool, {"shell_id": shell_id})
            assert stolen.is_error
            text = stolen.content[0].text  # type: ignore[union-attr]
            assert "secret-output" not in text and shell_id in text  # only the id it was asked about
            assert "no background shells" in text
        mine = await owner.call_tool("bash_output", {"shell_id": shell_id})
        assert "[running]" in mine.content[0].text  # type: ignore[union-attr]  (kill_shell above did nothing)


async def test_shell_ids_cannot_be_guessed(hub: int):
    async with hub_client(f"http://127.0.0.1:{hub}/mcp", TOKEN, mode="legacy") as client:
        ids = [
            _shell_id(await client.call_tool("bash", {"command": "true", "run_in_background": True})) for _ in range(2)
        ]
    assert all(re.fullmatch(r"shell_[0-9a-f]{12}", shell_id) for shell_id in ids), ids
    assert ids[0] != ids[1]


async def test_ending_a_session_kills_its_background_shells(hub: int):
    markers = Markers()
    marker = markers()  # bash runs in its own PID namespace: `$!` means nothing here, a unique argv does
    try:
        async with hub_client(f"http://127.0.0.1:{hub}/mcp", TOKEN, mode="legacy") as client:
            await client.call_tool("bash", {"command": f"sleep {marker}", "run_in_background": True})
            await wait_running(marker)
        await assert_gone(marker, bound=10)  # leaving the client sent DELETE for its session
    finally:
        markers.kill_leftovers()


async def test_a_stateless_2026_request_cannot_start_a_background_shell(hub: int):
    async with hub_client(f"http://127.0.0.1:{hub}/mcp", TOKEN, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
        assert result.is_error
        assert "background shells need a session" in result.content[0].text.lower()  # type: ignore[union-attr]
        assert not (await client.call_tool("bash", {"command": "echo fine"})).is_error
