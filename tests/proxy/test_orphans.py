"""Nothing omega started outlives it, even when it is SIGKILLed and no shutdown code runs.

A real `omega-mcp serve` over stdio with a downstream server that ignores EOF on stdin (so only the
kernel's parent-death signal can stop it), and with a background shell; then `kill -9` of omega.
Bash runs in its own PID namespace, so the shell's process is found by a unique `sleep` argument.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bash_processes import Markers, pids_with_arg
from omega_mcp.proxy.spawn import spawn
from proxy_support import ECHO_SERVER, alive, read_pid
from waits import until_sync

_BOUND_SECONDS = 10.0


def _message(message_id: int, method: str, params: dict[str, object]) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": message_id, "method": method, "params": params}) + "\n").encode()


_INITIALIZE = _message(
    1,
    "initialize",
    {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
)


def _serve(tmp_path: Path, servers: str = "") -> subprocess.Popen[bytes]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n{servers}')
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "omega_mcp", "serve", "--config", str(config)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(predicate: Callable[[], bool], what: str, seconds: float = _BOUND_SECONDS) -> None:
    until_sync(predicate, what, seconds)


def _kill_9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=_BOUND_SECONDS)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


@pytest.fixture
def markers() -> Iterator[Markers]:
    made = Markers()
    yield made
    made.kill_leftovers()


@pytest.mark.e2e
def test_a_downstream_server_that_ignores_eof_dies_when_omega_is_sigkilled(tmp_path: Path):
    pid_file = tmp_path / "server.pid"
    args = json.dumps([str(ECHO_SERVER), "--ignore-eof", "--pid-file", str(pid_file)])
    proc = _serve(tmp_path, f"[servers.stubborn]\ncommand = {json.dumps(sys.executable)}\nargs = {args}\n")
    pid = None
    try:
        _wait_for(lambda: pid_file.exists() and pid_file.read_text() != "", "the server wrote its pid")
        pid = read_pid(pid_file)
        assert alive(pid)
        _kill_9(proc)
        _wait_for(lambda: not alive(pid), f"server {pid} outlived omega's SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.e2e
def test_a_background_shell_dies_when_omega_is_sigkilled(tmp_path: Path, markers: Markers):
    marker = markers()
    proc = _serve(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_INITIALIZE)
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        call = {"name": "bash", "arguments": {"command": f"sleep {marker}", "run_in_background": True}}
        proc.stdin.write(_message(2, "tools/call", call))
        proc.stdin.flush()
        _wait_for(lambda: bool(pids_with_arg(marker)), "the background shell started", seconds=30)
        _kill_9(proc)
        _wait_for(lambda: not pids_with_arg(marker), "the background shell outlived omega's SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_LAUNCHER = Path(__file__).parents[2] / "src" / "omega_mcp" / "sandbox" / "child" / "deathsig.py"


def _launch(parent: int, *command: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-I", "-S", str(_LAUNCHER), str(parent), "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=_BOUND_SECONDS, check=False)


def test_the_launcher_runs_the_command_found_on_path_as_the_same_process():
    done = _launch(os.getpid(), "sh", "-c", 'echo "$0 $PPID"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sh", str(os.getpid())]  # exec'd in place: its parent is still us


def test_the_launcher_says_in_one_line_why_a_command_cannot_run():
    done = _launch(os.getpid(), "no-such-command-omega")
    assert done.returncode == 127
    assert done.stderr == "omega-mcp: cannot run no-such-command-omega: No such file or directory\n"


def test_the_launcher_runs_nothing_when_its_parent_is_already_gone(tmp_path: Path):
    marker = tmp_path / "ran"
    done = _launch(1, "touch", str(marker))  # pid 1 is not its parent: omega died before the prctl
    assert done.returncode != 0 and not marker.exists()


def test_a_missing_command_is_reported_as_popen_would(tmp_path: Path):
    with pytest.raises(FileNotFoundError) as missing:
        spawn("no-such-command-omega", [], None, tmp_path)
    assert missing.value.strerror == "No such file or directory"
    (tmp_path / "script").write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError):
        spawn("./script", [], None, tmp_path)
