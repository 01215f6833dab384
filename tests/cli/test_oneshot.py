"""`omega-mcp tools`, `call` and `agent --no-tools` are prompt and honest (real subprocesses).

`tools` names its config, reports a server that did not connect as failed (no retry is announced:
it exits) and exits 1 for it. A built-in `call` and `agent --no-tools` start no downstream server:
the fixture server writes its pid file as soon as it starts, so the file tells.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cli_support import cli_env, run_omega, rwx_config
from omega_mcp.builtin.schemas import BUILTIN_TOOLS
from omega_mcp.cli.toolbox import BUILTIN_TOOL_NAMES
from proxy_support import ECHO_SERVER


def _echo_config(tmp_path: Path) -> tuple[Path, Path]:
    pid_file = tmp_path / "echo.pid"
    servers = f'[servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}", "--pid-file", "{pid_file}"]\n'
    return rwx_config(tmp_path, servers), pid_file


# -- tools -------------------------------------------------------------------------------------


def test_tools_names_the_config_file_it_used_on_its_first_line(tmp_path: Path):
    config = rwx_config(tmp_path)
    proc = run_omega(tmp_path, "tools", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"config: {config}"
    assert json.loads(run_omega(tmp_path, "tools", "--json", "--config", str(config)).stdout)["config"] == str(config)


def test_tools_without_a_config_file_says_so(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_omega(tmp_path, "tools", cwd=empty)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "config: none (built-in tools only)"
    assert json.loads(run_omega(tmp_path, "tools", "--json", cwd=empty).stdout)["config"] is None


def test_tools_exits_one_for_a_server_that_did_not_connect_and_announces_no_retry(tmp_path: Path):
    config = rwx_config(tmp_path, '[servers.broken]\ncommand = "/nonexistent/mcp-server"\n')
    proc = run_omega(tmp_path, "tools", "--config", str(config))
    assert proc.returncode == 1
    assert "broken: failed: cannot start '/nonexistent/mcp-server'" in proc.stdout
    assert "retrying" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    as_json = run_omega(tmp_path, "tools", "--json", "--config", str(config))
    assert as_json.returncode == 1
    broken = json.loads(as_json.stdout)["servers"]["broken"]
    assert broken["state"] == "failed" and "retry_in_seconds" not in broken


def test_tools_exits_zero_when_every_enabled_server_connected(tmp_path: Path):
    config, pid_file = _echo_config(tmp_path)
    with config.open("a") as f:
        f.write('[servers.off]\ncommand = "/nonexistent/never-started"\nenabled = false\n')
    proc = run_omega(tmp_path, "tools", "--config", str(config))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "echo: connected" in proc.stdout and "off: disabled" in proc.stdout
    assert pid_file.exists()  # the control for the tests below: listing does start the server


def test_tools_help_documents_the_exit_status():
    proc = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "tools", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "1 an enabled server did not connect" in " ".join(proc.stdout.split())


# -- call and agent without servers --------------------------------------------------------------


def test_the_builtin_tool_names_known_without_the_sdk_are_the_builtins():
    assert {tool.name for tool, _ in BUILTIN_TOOLS} == BUILTIN_TOOL_NAMES


@pytest.mark.parametrize("tool", ["bash", "BASH", "Bash"])
def test_call_of_a_builtin_starts_no_downstream_server(tmp_path: Path, tool: str):
    config, pid_file = _echo_config(tmp_path)
    proc = run_omega(tmp_path, "call", tool, '{"command": "echo 42"}', "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"
    assert not pid_file.exists()


def test_call_of_a_downstream_tool_still_starts_its_server(tmp_path: Path):
    config, pid_file = _echo_config(tmp_path)
    proc = run_omega(tmp_path, "call", "mcp__echo__echo", '{"text": "hi"}', "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    assert pid_file.exists()


class _FakeOllama(BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        reply = {"message": {"role": "assistant", "content": "no tools needed"}, "done": True, "done_reason": "stop"}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def ollama() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    bodies: list[dict[str, Any]] = []
    handler = type("Handler", (_FakeOllama,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_agent_without_tools_starts_no_downstream_server(tmp_path: Path, ollama: tuple[str, list[dict[str, Any]]]):
    url, bodies = ollama
    config, pid_file = _echo_config(tmp_path)
    args = ["agent", "Say hi", "--provider", "ollama", "--base-url", url, "--no-tools", "--config", str(config)]
    proc = run_omega(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "no tools needed"
    assert len(bodies) == 1 and not bodies[0].get("tools")
    assert not pid_file.exists()


def test_a_reader_that_leaves_early_ends_tools_quietly(tmp_path: Path):
    # `true` exits without reading, so the pipe is closed well before omega writes its table.
    proc = subprocess.run(
        ["bash", "-c", '"$@" | true; exit "${PIPESTATUS[0]}"', "_", sys.executable, "-m", "omega_mcp", "tools"],
        capture_output=True,
        text=True,
        env=cli_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert proc.returncode == 141  # 128 + SIGPIPE, as a shell reports for `yes | true`
