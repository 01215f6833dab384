"""The aggregator through the `omega-mcp` command, as a user runs it (real subprocesses)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mcp
from mcp import StdioServerParameters

from proxy_support import ECHO_SERVER, alive, listed, read_pid
from waits import until_sync

SERVERS = """
[servers.time]
command = "${OMEGA_PYTHON:-python3}"
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]

[servers.broken]
command = "/nonexistent/mcp-server"

[servers.off]
command = "/nonexistent/never-started"
enabled = false
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMEGA_HOME=str(tmp_path / "home"), OMEGA_PYTHON=sys.executable)
    env.pop("OMEGA_CONFIG", None)
    return env


def _config(tmp_path: Path, servers: str = SERVERS) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    path = tmp_path / "servers.toml"
    path.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n{servers}')
    return path


def _omega(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args, "--config", str(_config(tmp_path))],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
    )


def test_tools_shows_each_servers_state_and_its_tools(tmp_path: Path):
    proc = _omega(tmp_path, "tools")
    assert proc.returncode == 1, proc.stderr  # `broken` is enabled and did not connect
    out = proc.stdout
    assert "time: connected (2 tools)" in out
    assert "mcp__time__get_current_time" in out and "mcp__time__convert_time" in out
    assert "broken: failed: cannot start '/nonexistent/mcp-server': No such file or directory" in out
    assert "off: disabled" in out
    assert out.index("built-in") < out.index("time: connected") < out.index("broken: failed")


def test_tools_json_has_a_servers_object_with_state_reason_and_tools(tmp_path: Path):
    proc = _omega(tmp_path, "tools", "--json")
    assert proc.returncode == 1, proc.stderr  # `broken` is enabled and did not connect
    payload = json.loads(proc.stdout)
    servers = payload["servers"]
    assert list(servers) == ["time", "broken", "off"]
    assert servers["time"]["state"] == "connected" and servers["time"]["reason"] is None
    assert servers["time"]["tools"] == ["mcp__time__get_current_time", "mcp__time__convert_time"]
    assert servers["broken"]["state"] == "failed" and "No such file" in servers["broken"]["reason"]
    assert servers["broken"]["tools"] == []
    assert servers["off"]["state"] == "disabled"
    names = [t["name"] for t in payload["tools"]]
    assert names.index("kill_shell") < names.index("mcp__time__get_current_time")


def test_call_reaches_mcp_server_time(tmp_path: Path):
    proc = _omega(tmp_path, "call", "mcp__time__get_current_time", '{"timezone": "UTC"}')
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["timezone"] == "UTC"


def test_call_of_a_down_servers_tool_is_a_clear_error(tmp_path: Path):
    proc = _omega(tmp_path, "call", "mcp__broken__anything", "{}")
    assert proc.returncode == 1
    assert "server broken is down: cannot start '/nonexistent/mcp-server'" in proc.stdout
    assert "omega will retry" not in proc.stdout
    assert "Traceback" not in proc.stderr


def test_call_with_arguments_the_downstream_schema_rejects_names_the_field(tmp_path: Path):
    proc = _omega(tmp_path, "call", "mcp__time__get_current_time", '{"timezone": 5}')
    assert proc.returncode == 1
    assert "timezone" in proc.stdout and "Invalid arguments" in proc.stdout


async def test_serve_proxies_downstream_tools_over_stdio_and_stops_them_on_exit(tmp_path: Path):
    pid_file = tmp_path / "echo.pid"
    servers = f"""
[servers.echo]
command = "{sys.executable}"
args = ["{ECHO_SERVER}", "--pid-file", "{pid_file}", "--spawn-child"]
"""
    config = _config(tmp_path, servers)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config)],
        env={"OMEGA_HOME": str(tmp_path / "home")},
    )
    async with mcp.Client(params, mode="legacy") as client:
        names = await listed(client, "mcp__echo__echo")
        result = await client.call_tool("mcp__echo__echo", {"text": "through omega"})
        pids = [read_pid(pid_file), read_pid(f"{pid_file}.child")]
    assert "mcp__echo__echo" in names
    assert result.structured_content == {"text": "through omega"}
    assert not [pid for pid in pids if alive(pid)]


def test_sigterm_during_a_downstream_call_stops_the_server_and_its_children(tmp_path: Path):
    pid_file, log = tmp_path / "echo.pid", tmp_path / "echo.log"
    servers = f"""
[servers.echo]
command = "{sys.executable}"
args = ["{ECHO_SERVER}", "--pid-file", "{pid_file}", "--spawn-child", "--log-file", "{log}"]
"""
    config = _config(tmp_path, servers)
    proc = subprocess.Popen(
        [sys.executable, "-m", "omega_mcp", "call", "mcp__echo__sleep", '{"seconds": 60}', "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and '"tools/call"' in log.read_text()):
            assert time.monotonic() < deadline, "the call never reached the server"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143
    assert b"Traceback" not in stderr
    pids = [read_pid(pid_file), read_pid(f"{pid_file}.child")]
    with contextlib.suppress(AssertionError):  # what is left is asserted below, after it is killed
        until_sync(lambda: not any(alive(pid) for pid in pids), "the server and its child to exit", 10)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []
