"""Config problems as a user meets them on the command line: a broken server stays one broken server,
and a file with several mistakes lists them all, one `omega-mcp: error:` line each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

UNSET = "OMEGA_TEST_UNSET_API_KEY"


def _omega(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    env.pop(UNSET, None)
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )


def test_tools_lists_a_server_with_an_unset_variable_as_broken_instead_of_refusing_the_config(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n\n'
        # Started anyway, this server would just exit: only the config problem can name the variable.
        f'[servers.broken]\ncommand = "{sys.executable}"\nargs = ["-c", "raise SystemExit(3)"]\n'
        f'env = {{ API_KEY = "${{{UNSET}}}" }}\nconnect_timeout = 10\n\n'
        '[servers.off]\ncommand = "${OMEGA_TEST_ALSO_UNSET}"\nenabled = false\n'
    )
    proc = _omega(tmp_path, "tools", "--config", str(config))
    assert proc.returncode != 2, proc.stderr
    assert UNSET in proc.stdout
    assert "Traceback" not in proc.stderr


def test_a_config_with_several_mistakes_reports_each_on_its_own_error_line(tmp_path: Path):
    config = tmp_path / "servers.toml"
    config.write_text('[server.x]\ncommand = "x"\n\n[servers.a]\ncommand = "x"\ntools = "get_*"\ncomand = "y"\n')
    proc = _omega(tmp_path, "tools", "--config", str(config))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f'omega-mcp: error: {config}: servers.a.tools: expected a list of globs, e.g. tools = ["get_*"]',
        f"omega-mcp: error: {config}: servers.a.comand: unknown key; did you mean `command`?",
        f"omega-mcp: error: {config}: server: unknown table; did you mean [servers.x]?",
    ]
