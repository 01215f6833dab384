"""The `omega-mcp` command as a user runs it: real subprocesses, stdio wire included."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import mcp
import pytest
from mcp import StdioServerParameters

from cli_support import cli_env, run_omega, rwx_config
from waits import until_sync


async def test_serve_over_stdio_answers_a_real_client(tmp_path: Path):
    config = rwx_config(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config)],
        env={"OMEGA_HOME": str(tmp_path / "home")},
    )
    async with mcp.Client(params, mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names[:4] == ["bash", "read", "write", "edit"]
        result = await client.call_tool("bash", {"command": "echo from-stdio && pwd"})
        assert not result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        assert "from-stdio" in text and str(tmp_path / "ws") in text
        written = await client.call_tool("write", {"file_path": "hello.txt", "content": "hi"})
        assert not written.is_error
    assert (tmp_path / "ws" / "hello.txt").read_text() == "hi"


async def test_serve_over_stdio_answers_a_modern_client(tmp_path: Path):
    config = rwx_config(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config)],
        env={"OMEGA_HOME": str(tmp_path / "home")},
    )
    async with mcp.Client(params, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("read", {"file_path": str(config)})
        assert not result.is_error


def test_serve_keeps_stdout_for_the_protocol(tmp_path: Path):
    config = rwx_config(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "serve", "--config", str(config)],
        input="",
        capture_output=True,
        text=True,
        env=cli_env(tmp_path),
        timeout=60,
    )
    assert proc.stdout == ""
    assert proc.returncode == 0


def test_tools_lists_the_builtins(tmp_path: Path):
    proc = run_omega(tmp_path, "tools", "--config", str(rwx_config(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    for name in ("bash", "read", "write", "edit", "bash_output", "kill_shell"):
        assert name in proc.stdout


def test_tools_json_is_machine_readable(tmp_path: Path):
    proc = run_omega(tmp_path, "tools", "--json", "--config", str(rwx_config(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert [t["name"] for t in payload["tools"]][:4] == ["bash", "read", "write", "edit"]
    assert payload["sandbox"]["mode"] == "rwx"


def test_call_prints_the_result_and_exits_zero(tmp_path: Path):
    proc = run_omega(tmp_path, "call", "bash", '{"command": "echo 42"}', "--config", str(rwx_config(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


def test_call_exits_one_when_the_result_is_an_error(tmp_path: Path):
    proc = run_omega(tmp_path, "call", "bash", '{"command": "exit 3"}', "--config", str(rwx_config(tmp_path)))
    assert proc.returncode == 1
    assert "exit code 3" in proc.stdout


def test_call_of_an_unknown_tool_exits_one_with_suggestions(tmp_path: Path):
    proc = run_omega(tmp_path, "call", "raed", '{"file_path": "x"}', "--config", str(rwx_config(tmp_path)))
    assert proc.returncode == 1
    assert "Unknown tool" in proc.stderr and "read" in proc.stderr


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]"])
def test_call_with_bad_json_is_a_usage_error(tmp_path: Path, bad: str):
    proc = run_omega(tmp_path, "call", "bash", bad, "--config", str(rwx_config(tmp_path)))
    assert proc.returncode == 2
    assert "JSON_ARGS" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_config_error_exits_two_with_one_line_naming_file_and_key(tmp_path: Path):
    path = tmp_path / "servers.toml"
    path.write_text('[servers.bad]\ncommand = "x"\nurl = "http://127.0.0.1"\n')
    proc = run_omega(tmp_path, "tools", "--config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(path) in lines[0] and "servers.bad" in lines[0]


def test_a_missing_config_file_exits_two(tmp_path: Path):
    proc = run_omega(tmp_path, "tools", "--config", str(tmp_path / "nope.toml"))
    assert proc.returncode == 2
    assert "not found" in proc.stderr and "Traceback" not in proc.stderr


def test_flags_override_the_config_file(tmp_path: Path):
    other = tmp_path / "other-ws"
    proc = run_omega(
        tmp_path, "call", "bash", '{"command": "pwd"}', "--config", str(rwx_config(tmp_path)), "--workspace", str(other)
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(other)


def test_claude_config_prints_an_mcp_servers_entry(tmp_path: Path):
    config = rwx_config(tmp_path)
    proc = run_omega(tmp_path, "claude-config", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)["mcpServers"]["omega"]
    assert entry["args"][-7:] == [
        "attach",  # SPEC: claude-config emits an attach entry (--standalone: serve)
        "--config",
        str(config),
        "--workspace",
        str(tmp_path),
        "--client-prefix",
        "mcp__omega__",
    ]
    http = json.loads(run_omega(tmp_path, "claude-config", "--http", "http://127.0.0.1:8765/mcp").stdout)
    assert http["mcpServers"]["omega"]["type"] == "http"
    assert http["mcpServers"]["omega"]["url"] == "http://127.0.0.1:8765/mcp"


def test_serve_logs_the_effective_sandbox_once_on_stderr(tmp_path: Path):
    ws = tmp_path / "ws"
    proc = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "serve", "--workspace", str(ws)],
        input="",
        capture_output=True,
        text=True,
        env=cli_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
    )
    lines = [line for line in proc.stderr.splitlines() if "sandbox: mode=" in line]
    assert len(lines) == 1, proc.stderr
    assert "mode=sandbox" in lines[0] and str(ws) in lines[0] and "network" in lines[0]
    assert proc.stdout == ""


def test_tools_json_reports_the_sandbox(tmp_path: Path):
    proc = run_omega(tmp_path, "tools", "--json", "--workspace", str(tmp_path / "ws"), "--mode", "rx")
    assert proc.returncode == 0, proc.stderr
    sandbox = json.loads(proc.stdout)["sandbox"]
    assert sandbox["mode"] == "rx"
    assert str(tmp_path / "ws") in sandbox["write_roots"]
    assert {"bash", "network", "landlock_abi", "limits"} <= sandbox.keys()


async def test_the_instructions_summarize_the_sandbox_and_the_servers(tmp_path: Path):
    config = rwx_config(tmp_path, '[servers.later]\ncommand = "true"\nenabled = false\n')
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config)],
        env={"OMEGA_HOME": str(tmp_path / "home")},
    )
    async with mcp.Client(params, mode="legacy") as client:
        instructions = client.instructions or ""
    assert "omega-mcp tool hub" in instructions
    assert "rwx" in instructions and str(tmp_path / "ws") in instructions
    assert "mcp__later__*" in instructions


def test_a_workspace_that_is_a_file_exits_two_naming_the_flag(tmp_path: Path):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    proc = run_omega(tmp_path, "call", "bash", '{"command": "pwd"}', "--workspace", str(afile))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--workspace" in proc.stderr and str(afile) in proc.stderr and "not a directory" in proc.stderr
    assert afile.read_text() == "keep me"


@pytest.mark.parametrize(
    ("redirect", "args"),
    [(">&-", ["tools", "--json"]), (">&-", ["call", "bash", '{"command": "true"}']), ("<&-", ["serve"])],
)
def test_a_closed_stdin_or_stdout_is_a_clear_error_not_a_traceback(tmp_path: Path, redirect: str, args: list[str]):
    proc = subprocess.run(
        ["bash", "-c", f'exec "$@" {redirect}', "_", sys.executable, "-m", "omega_mcp", *args],
        capture_output=True,  # the redirect in the exec closes the fd again
        text=True,
        env=cli_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "closed" in proc.stderr


def test_call_of_a_background_shell_warns_that_it_ends_with_the_call(tmp_path: Path):
    proc = run_omega(
        tmp_path,
        "call",
        "bash",
        '{"command": "sleep 30", "run_in_background": true}',
        "--config",
        str(rwx_config(tmp_path)),
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"shell_[0-9a-f]{12}", proc.stdout), proc.stdout
    assert "omega-mcp serve" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_call_stops_the_command_and_exits_128_plus_signal(tmp_path: Path, signum: int, code: int):
    marker = tmp_path / "ws" / "started"
    command = '{"command": "touch started; exec sleep 60"}'
    proc = subprocess.Popen(
        [sys.executable, "-m", "omega_mcp", "call", "bash", command, "--config", str(rwx_config(tmp_path))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        until_sync(marker.exists, "the command to start", 30, interval=0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert "timed out" not in out and "Traceback" not in err


def test_importing_the_command_installs_no_handler_and_loads_no_sdk(tmp_path: Path):
    # `EarlyStarts.start` starts the downstream servers while omega still imports the SDK: the command
    # modules load only once the command runs (after that start) and keep the heavy imports inside
    # their functions, and importing must not touch signals.
    code = (
        "import signal, sys\n"
        "before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)\n"
        "import omega_mcp.cli.main\n"
        "assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before\n"
        "from omega_mcp.cli.toolbox import sampler_for\n"
        "from omega_mcp.config import Config\n"
        "assert sampler_for(Config()) is None  # no [sampling]: serve loads none of the agent's modules\n"
        "heavy = ('mcp.', 'omega_mcp.toolbox', 'omega_mcp.server', 'omega_mcp.agent', 'omega_mcp.proxy.supervisor',\n"
        "         'omega_mcp.cli.agent', 'omega_mcp.cli.login', 'omega_mcp.cli.oneshot', 'omega_mcp.cli.register',\n"
        "         'omega_mcp.cli.serve')\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(heavy)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(tmp_path), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
