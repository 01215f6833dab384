"""omega never runs itself: a server entry that is omega is refused, and so is omega started by omega.

The end-to-end tests run the real CLI on a config whose server is omega again, directly (the
command line says so) and hidden behind a wrapper script (only the inherited marker tells), and
count every omega process started for that config: before this guard, each omega started another
without end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omega_mcp.proxy.recursion import MARKER, launches_omega, started_by_omega
from omega_mcp.proxy.spawn import default_environment


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("/home/u/.venv/bin/omega-mcp", ["serve"]),
        ("omega-mcp", ["serve", "--config", "x.toml"]),
        ("python3", ["-m", "omega_mcp", "serve"]),
        ("/usr/bin/python3.11", ["-I", "-momega_mcp", "serve"]),
        ("uvx", ["omega-mcp"]),
        ("uvx", ["--from", ".", "omega-mcp", "serve"]),
        ("pipx", ["run", "omega-mcp==0.1.0", "serve"]),
        ("sh", ["-c", "exec /opt/omega/bin/omega-mcp serve --config x.toml"]),
        ("python", ["-m", "omega_mcp.cli.main", "serve"]),
    ],
)
def test_command_lines_that_start_omega_are_recognised(command: str, args: list[str]) -> None:
    assert launches_omega(command, args)


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("uvx", ["mcp-server-time"]),
        ("python3", ["-m", "mcp_server_time"]),
        ("npx", ["-y", "@modelcontextprotocol/server-everything"]),
        ("/opt/omega-mcp-tools/bin/server", ["--omega-mcp-compatible"]),
        ("python3", ["-m", "omega_mcp_plugin"]),
    ],
)
def test_other_servers_are_not_mistaken_for_omega(command: str, args: list[str]) -> None:
    assert not launches_omega(command, args)


def test_every_downstream_server_inherits_the_marker_with_omegas_pid() -> None:
    env = default_environment({"TZ": "UTC"})
    assert env[MARKER] == str(os.getpid())
    assert env["TZ"] == "UTC"
    assert started_by_omega(env) == str(os.getpid())
    assert started_by_omega({}) is None


def test_locale_time_zone_and_proxy_settings_reach_downstream_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("no_proxy", "localhost")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    env = default_environment()
    assert (env["LANG"], env["LC_TIME"], env["HTTPS_PROXY"], env["no_proxy"]) == (
        "de_DE.UTF-8",
        "C",
        "http://proxy.invalid:3128",
        "localhost",
    )
    assert "OPENAI_API_KEY" not in env


def _omega_processes(marker: str) -> list[int]:
    """Pids of processes (other than us) whose command line mentions `marker` (a unique config path)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found


def _run_tools(config: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != MARKER} | {"OMEGA_HOME": str(tmp_path / "home")}
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", "tools", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )


def _config(tmp_path: Path, command: str, args: list[str]) -> Path:
    config = tmp_path / "servers.toml"
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    config.write_text(
        f'[sandbox]\nworkspace = "{ws}"\n\n[servers.omega]\ncommand = {json.dumps(command)}\n'
        f"args = {json.dumps(args)}\nconnect_timeout = 20\n"
    )
    return config


@pytest.mark.e2e
def test_a_server_entry_that_is_omega_is_never_started(tmp_path: Path) -> None:
    config = tmp_path / "servers.toml"
    config = _config(tmp_path, sys.executable, ["-m", "omega_mcp", "serve", "--config", str(config)])
    done = _run_tools(config, tmp_path)
    assert "Traceback" not in done.stderr
    assert "omega: failed" in done.stdout and "omega never runs itself" in done.stdout
    assert "is not started" in done.stderr and done.stderr.count("omega never runs itself") == 1
    assert _omega_processes(str(config)) == []


@pytest.mark.e2e
def test_omega_hidden_behind_a_wrapper_script_stops_at_once_and_leaves_no_process(tmp_path: Path) -> None:
    config = tmp_path / "servers.toml"
    wrapper = tmp_path / "start-server.sh"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m omega_mcp serve --config "{config}"\n')
    wrapper.chmod(0o755)
    # Through /bin/sh: a program under /tmp, where the tools may write, would not be started at all.
    config = _config(tmp_path, "/bin/sh", [str(wrapper)])
    assert not launches_omega("/bin/sh", [str(wrapper)])  # only the inherited marker can tell
    done = _run_tools(config, tmp_path)
    assert "Traceback" not in done.stderr
    assert "omega: failed" in done.stdout
    assert "started by another omega" in done.stdout
    assert _omega_processes(str(config)) == []
