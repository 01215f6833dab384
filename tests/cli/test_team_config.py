"""`omega-mcp tools` refuses the team configs `serve --http` refuses, with the same key named.

Two clients with one token, a client token equal to the hub's own, a client workspace whose parent
is missing: before, `tools` listed happily a config the hub would not start with.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hub_support import free_port

ALICE = "alice-token-0123456789abcdef"


def _run(tmp_path: Path, command: str, body: str, **env: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "omega.toml"
    config.write_text(body)
    full = {**os.environ, "OMEGA_HOME": str(tmp_path / "home"), "ALICE_TOKEN": ALICE, **env}
    full.pop("OMEGA_CONFIG", None)
    argv = [sys.executable, "-m", "omega_mcp", command, "--config", str(config)]
    if command == "serve":
        (tmp_path / "ws").mkdir(exist_ok=True)
        argv += ["--http", "--port", str(free_port()), "--workspace", str(tmp_path / "ws")]
    return subprocess.run(argv, capture_output=True, text=True, env=full, cwd=tmp_path, timeout=60, check=False)


TWO_WITH_ONE = (
    '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\n[hub.clients.bob]\ntoken = "${ALICE_TOKEN}"\n',
    {},
    "hub.clients.bob.token",
)
HUBS_OWN = ('[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\n', {"OMEGA_TOKEN": ALICE}, "hub.clients.alice.token")
NO_PARENT = (
    '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\nworkspace = "/nonexistent-omega-parent/alice"\n',
    {},
    "hub.clients.alice.workspace",
)


@pytest.mark.parametrize(
    ("body", "env", "key"), [TWO_WITH_ONE, HUBS_OWN, NO_PARENT], ids=["one-token", "hubs", "parent"]
)
@pytest.mark.parametrize("command", ["tools", "serve"])
def test_tools_refuses_what_the_hub_refuses(
    tmp_path: Path, command: str, body: str, env: dict[str, str], key: str
) -> None:
    done = _run(tmp_path, command, body, **env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert key in done.stderr and "Traceback" not in done.stderr
    assert ALICE not in done.stderr


def test_a_good_team_config_lists(tmp_path: Path) -> None:
    (tmp_path / "alice").mkdir()
    done = _run(tmp_path, "tools", '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\nworkspace = "alice"\n')
    assert done.returncode == 0, done.stderr
