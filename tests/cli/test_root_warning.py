"""Run as root, the commands that run tools warn once on stderr; the others, and a normal user, see nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from omega_mcp.cli.main import root_warning

WARNING = "omega-mcp: warning: running as root:"
AS_ROOT = os.geteuid() == 0


def _omega(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )


def test_the_warning_names_root_landlock_and_the_remedy():
    line = root_warning(euid=0)
    assert line is not None and line.startswith(WARNING)
    assert "Landlock" in line and "normal user" in line and "\n" not in line


def test_a_normal_user_gets_no_warning():
    assert root_warning(euid=1000) is None


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["tools"], None),
        (["call", "bash", '{"command": "true"}'], None),
        (["serve"], ""),  # stdio: the client (stdin) leaves at once
        (["agent", "hi", "--provider", "ollama", "--base-url", "http://127.0.0.1:9", "--no-tools"], None),
    ],
)
def test_commands_that_run_tools_warn_exactly_once_when_run_as_root(tmp_path: Path, args: list[str], stdin: str | None):
    proc = _omega(tmp_path, *args, "--workspace", str(tmp_path / "ws"), stdin=stdin)
    count = proc.stderr.count(WARNING)
    assert count == (1 if AS_ROOT else 0), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["claude-config"], ["import", "missing.json", "--dry-run"]])
def test_commands_that_run_no_tools_do_not_warn(tmp_path: Path, args: list[str]):
    proc = _omega(tmp_path, *args)
    assert WARNING not in proc.stderr


def test_log_level_error_silences_the_warning(tmp_path: Path):
    proc = _omega(tmp_path, "tools", "--log-level", "error")
    assert proc.returncode == 0, proc.stderr
    assert WARNING not in proc.stderr
