"""Helpers for the CLI tests: run the real `omega-mcp` in a subprocess on a throwaway config.

Each test gets its own `OMEGA_HOME` and an rwx config whose workspace lies in the test's
directory; `$OMEGA_CONFIG` of the caller's environment is never inherited.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment with a private `OMEGA_HOME` and no `OMEGA_CONFIG`."""
    env = dict(os.environ)
    env["OMEGA_HOME"] = str(tmp_path / "home")
    env.pop("OMEGA_CONFIG", None)
    return env


def rwx_config(tmp_path: Path, extra: str = "") -> Path:
    """`tmp_path/servers.toml`: rwx mode, workspace `tmp_path/ws`, then `extra` (more tables)."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    path = tmp_path / "servers.toml"
    path.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n{extra}')
    return path


def run_omega(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m omega_mcp ARGS` with `cli_env`, from `cwd` (default: `tmp_path`), bounded to 60 s."""
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args],
        capture_output=True,
        text=True,
        env=cli_env(tmp_path),
        cwd=cwd or tmp_path,
        timeout=60,
    )
