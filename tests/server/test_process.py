"""`omega-mcp serve` over stdio as a real subprocess: signals at any moment, and stdio that is not a pipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp.client.stdio import StdioServerParameters

from proxy_support import ECHO_SERVER, alive, read_pid
from waits import deadline, until_sync

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _config(tmp_path: Path, more: str = "") -> Path:
    """An rwx-mode servers.toml with its workspace made, plus `more` (other tables)."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n{more}')
    return config


def _params(tmp_path: Path, more: str = "") -> StdioServerParameters:
    """`omega-mcp serve` on `_config(tmp_path, more)` for the SDK client, its home in tmp_path."""
    args = ["-m", "omega_mcp", "serve", "--config", str(_config(tmp_path, more))]
    return StdioServerParameters(command=sys.executable, args=args, env={"OMEGA_HOME": str(tmp_path / "home")})


def _serve(tmp_path: Path, stdout: Any, stderr: Any, servers: str = "") -> subprocess.Popen[bytes]:
    config = _config(tmp_path, servers)
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "omega_mcp", "serve", "--config", str(config)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=stderr,
    )


def _stopped(proc: subprocess.Popen[bytes], seconds: float = 15.0) -> int:
    try:
        return proc.wait(timeout=seconds)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()


def _left_behind(pids: list[int]) -> list[int]:
    """The pids still alive after a bounded wait (killed, so a failure leaves nothing running)."""
    deadline = time.monotonic() + 10
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_sigterm_stops_serve_even_when_stdout_is_a_regular_file(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    with out.open("wb") as stdout:
        proc = _serve(tmp_path, stdout, subprocess.DEVNULL)
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(_INITIALIZE) + "\n").encode())
    proc.stdin.flush()
    until_sync(lambda: b'"id":1' in out.read_bytes(), "the first answer", 20)
    proc.send_signal(signal.SIGTERM)  # stdin stays open: nothing but the signal asks omega to stop
    assert _stopped(proc) == 0
    assert json.loads(out.read_bytes().splitlines()[0])["result"]["serverInfo"]["name"] == "omega"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_omega_is_still_starting_leaves_no_downstream_process(tmp_path: Path, signum: int):
    pid_file = tmp_path / "echo.pid"
    args = f'["{ECHO_SERVER}", "--pid-file", "{pid_file}", "--spawn-child"]'
    servers = f'[servers.echo]\ncommand = "{sys.executable}"\nargs = {args}\n'
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        proc = _serve(tmp_path, subprocess.DEVNULL, stderr, servers)
    # The server is started before omega has even imported the MCP SDK: signal omega right then.
    until_sync(lambda: Path(f"{pid_file}.child").exists(), "the server started", 20, interval=0.01)
    proc.send_signal(signum)
    _stopped(proc)
    assert _left_behind([read_pid(pid_file), read_pid(f"{pid_file}.child")]) == []
    assert "Traceback" not in log.read_text()


async def test_a_modern_stdio_client_keeps_its_background_shells_across_requests(tmp_path: Path):
    params = _params(tmp_path)
    async with mcp.Client(params, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        started = await client.call_tool("bash", {"command": "echo from-the-shell", "run_in_background": True})
        assert not started.is_error, started
        shell_id = started.content[0].text.split()[3].rstrip(".")  # type: ignore[union-attr]
        text = ""
        with deadline(10):
            for _ in range(200):  # polled: the shell's end is another process's
                output = await client.call_tool("bash_output", {"shell_id": shell_id})
                text += output.content[0].text  # type: ignore[union-attr]
                if "[running]" not in text.rsplit("\n", 1)[-1]:
                    break
                await anyio.sleep(0.05)
        assert "from-the-shell" in text


async def test_over_stdio_a_client_message_over_max_message_mb_is_refused_and_omega_stays_up(tmp_path: Path):
    params = _params(tmp_path, "\n[hub]\nmax_message_mb = 1\n")
    async with mcp.Client(params, mode="legacy") as client:
        fits = await client.call_tool("write", {"file_path": "fits.txt", "content": "x" * (512 * 1024)})
        with pytest.raises(mcp.MCPError) as refused:
            await client.call_tool("write", {"file_path": "long.txt", "content": "x" * (2 * 1024 * 1024)})
        after = await client.call_tool("read", {"file_path": "fits.txt", "limit": 1})
    assert not fits.is_error
    assert refused.value.code == -32600 and "longer than max_message_mb (1 MiB)" in refused.value.message
    assert not (tmp_path / "ws" / "long.txt").exists()
    assert not after.is_error
