"""The sandbox as a normal user would run it: not root (CI runs the suite as root).

When the suite runs as root, a dedicated unprivileged user is created (once) and omega's CLI runs
as that user: the namespaces, the covers over secrets and sockets, and the network namespace must
all work without privileges, and what root could still do (read another process's environment)
must be denied. When the suite already runs as a normal user, the rest of the suite covers it.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from unprivileged_support import unprivileged

USER = "omega-sbx-test"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: the rest of the suite covers it")


@pytest.fixture(scope="module")
def user() -> pwd.struct_passwd:
    found = unprivileged()
    assert found is not None  # we are root (pytestmark)
    return found


@pytest.fixture
def place(user: pwd.struct_passwd, tmp_path: Path) -> Iterator[Path]:
    """A directory the user owns (pytest's tmp_path is root's, mode 0700)."""
    root = Path("/tmp") / f"omega-sbx-{tmp_path.name}"
    root.mkdir()
    os.chown(root, user.pw_uid, user.pw_gid)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _as_user(user: pwd.struct_passwd, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": user.pw_dir, "PATH": "/usr/bin:/bin", "USER": USER, "LANG": "C.UTF-8"}
    return subprocess.run(
        argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd=cwd,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _bash(user: pwd.struct_passwd, place: Path, script: str) -> subprocess.CompletedProcess[str]:
    (place / "ws").mkdir(exist_ok=True)
    os.chown(place / "ws", user.pw_uid, user.pw_gid)
    argv = [sys.executable, "-m", "omega_mcp", "call", "bash", json.dumps({"command": script})]
    return _as_user(user, [*argv, "--workspace", str(place / "ws")], place)


def test_omega_runs_for_a_normal_user(user: pwd.struct_passwd, place: Path) -> None:
    done = _as_user(user, [sys.executable, "-c", "import omega_mcp"], place)
    if done.returncode != 0:
        pytest.skip(f"this checkout is not readable by other users: {done.stderr.strip()[-200:]}")
    result = _bash(user, place, "id -u; touch ok && echo wrote")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[:2] == [str(user.pw_uid), "wrote"]


def test_a_normal_users_secrets_network_and_other_processes_are_out_of_reach(
    user: pwd.struct_passwd, place: Path
) -> None:
    if _as_user(user, [sys.executable, "-c", "import omega_mcp"], place).returncode != 0:
        pytest.skip("this checkout is not readable by other users")
    ssh = Path(user.pw_dir) / ".ssh"
    ssh.mkdir(exist_ok=True)
    (ssh / "id_rsa").write_text("PRIVATE KEY\n")
    for path in (ssh, ssh / "id_rsa"):
        os.chown(path, user.pw_uid, user.pw_gid)
    script = "\n".join(
        [
            "cat ~/.ssh/id_rsa; echo ssh=$?",
            "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), timeout=2)\" 2>/dev/null;"
            " echo tcp=$?",
            "cat /proc/1/environ >/dev/null 2>&1; echo environ=$?",
            "touch /etc/omega-sbx-test 2>/dev/null; echo etc=$?",
        ]
    )
    result = _bash(user, place, script)
    assert "PRIVATE KEY" not in result.stdout
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert lines.get("ssh") != "0" and lines.get("tcp") != "0" and lines.get("etc") != "0", result.stdout
    assert lines.get("environ") != "0", result.stdout  # pid 1 of bash's own namespace, or none: never root's
    assert not Path("/etc/omega-sbx-test").exists()


def test_a_normal_users_confined_server_may_not_write_their_home(user: pwd.struct_passwd, place: Path) -> None:
    if _as_user(user, [sys.executable, "-c", "import omega_mcp"], place).returncode != 0:
        pytest.skip("this checkout is not readable by other users")
    config = place / "servers.toml"
    config.write_text(
        f'[sandbox]\nworkspace = "{place / "ws"}"\n\n[servers.x]\ncommand = "{sys.executable}"\n'
        'sandbox = { write_roots = ["~"] }\n'
    )
    argv = [sys.executable, "-m", "omega_mcp", "tools", "--config", str(config)]
    (place / "ws").mkdir(exist_ok=True)
    os.chown(place / "ws", user.pw_uid, user.pw_gid)
    done = _as_user(user, argv, place)
    assert done.returncode == 2, done.stderr
    assert f"servers.x.sandbox.write_roots: {user.pw_dir} is your home directory itself" in done.stderr
