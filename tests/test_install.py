"""A user install, as docs/getting-started.md's Install section says: a wheel into a fresh venv, no dev extras.

The wheel is built from this checkout and installed with pip into a new virtual environment
(dependencies from the package index, as a user gets them). Then the example `servers.toml`
works as shipped, and its `time` server works after the one command its comment gives. Slow
(about a minute, mostly pip), and it needs the package index: it is the first hour of a user.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import uuid
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

from unprivileged_support import unprivileged

REPO = Path(__file__).parents[1]

pytestmark = pytest.mark.timeout(900)


def _run(
    *argv: str | Path, cwd: Path, env: dict[str, str] | None = None, user: pwd.struct_passwd | None = None
) -> subprocess.CompletedProcess[str]:
    account: dict[str, Any] = {}
    if user is not None:
        account = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False, **account
    )


def _uncomment_time(example: str) -> str:
    lines = example.splitlines()
    start = lines.index("# [servers.time]")
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("# "))
    lines[start:end] = [line.removeprefix("# ") for line in lines[start:end]]
    return "\n".join(lines) + "\n"


def test_a_wheel_installed_without_dev_extras_runs_the_example_config(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, REPO, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("omega_mcp-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # PEP 561: type checkers of code using omega read its annotations
        assert "omega_mcp/py.typed" in archive.namelist()

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    installed = _run(bin_dir / "pip", "install", "-q", "--disable-pip-version-check", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    assert _run(bin_dir / "pip", "show", "pytest", cwd=tmp_path).returncode != 0  # runtime dependencies only

    # A user's environment: omega on PATH, nothing of the developer's (no OMEGA_PYTHON, no venv).
    env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "OMEGA_HOME": str(tmp_path / "omega-home"),
    }
    project = tmp_path / "project"
    project.mkdir()
    (project / "servers.toml").write_text((REPO / "servers.toml").read_text())

    version = _run("omega-mcp", "--version", cwd=project, env=env)
    assert version.returncode == 0 and version.stdout.startswith("omega-mcp "), version.stderr
    # Named with --config: a ./servers.toml found implicitly under /tmp (where tmp_path is, and where
    # omega's tools may write) is refused as possibly planted (tests/security/test_trust.py).
    shipped = _run("omega-mcp", "tools", "--config", "servers.toml", cwd=project, env=env)
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    assert "failed" not in shipped.stdout and "Traceback" not in shipped.stderr
    for tool in ("bash", "read", "write", "edit"):
        assert f"  {tool} " in shipped.stdout

    # The one command the example's comment gives, then uncomment: the time server connects.
    time_server = _run(bin_dir / "pip", "install", "-q", "--disable-pip-version-check", "mcp-server-time", cwd=project)
    assert time_server.returncode == 0, time_server.stderr
    (project / "servers.toml").write_text(_uncomment_time((REPO / "servers.toml").read_text()))
    enabled = _run("omega-mcp", "tools", "--config", "servers.toml", cwd=project, env=env)
    assert enabled.returncode == 0, enabled.stdout + enabled.stderr
    assert "time: connected" in enabled.stdout
    assert "mcp__time__get_current_time" in enabled.stdout


def test_tools_cannot_plant_code_in_omegas_own_venv_under_tmp(tmp_path: Path) -> None:
    """A venv under /tmp (a write root) is omega's import closure: no tool may add a `.pth` to it."""
    wheels = tmp_path / "wheels"
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, REPO, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("omega_mcp-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    installed = _run(env_dir / "bin" / "pip", "install", "-q", "--disable-pip-version-check", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    (site,) = (env_dir / "lib").glob("python3*/site-packages")
    marker = tmp_path / "injected-code-ran"
    payload = f"import os; open({str(marker)!r}, 'w').close()\n"
    env = {"PATH": f"{env_dir / 'bin'}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()

    def omega(*args: str) -> subprocess.CompletedProcess[str]:
        return _run("omega-mcp", *args, "--workspace", tmp_path / "ws", cwd=tmp_path, env=env)

    (tmp_path / "ws").mkdir()
    # The control: the file tools work in the workspace, from this install, under this 0700 /tmp dir.
    ok = omega("call", "write", json.dumps({"file_path": str(tmp_path / "ws" / "ok.txt"), "content": "fine\n"}))
    assert ok.returncode == 0 and "(created)" in ok.stdout, ok.stdout + ok.stderr
    read = omega("call", "read", json.dumps({"file_path": str(tmp_path / "ws" / "ok.txt")}))
    assert read.returncode == 0 and "fine" in read.stdout, read.stdout + read.stderr
    write = omega("call", "write", json.dumps({"file_path": str(site / "evil.pth"), "content": payload}))
    assert write.returncode == 1 and "never writable" in write.stdout, write.stdout + write.stderr
    script = f"printf %s {shlex.quote(payload)} > {shlex.quote(str(site / 'evil.pth'))}; echo rc=$?"
    bash = omega("call", "bash", json.dumps({"command": script}))
    assert "rc=0" not in bash.stdout, bash.stdout
    console = omega("call", "bash", json.dumps({"command": f"echo pwned >> {env_dir / 'bin' / 'omega-mcp'}; echo $?"}))
    assert console.stdout.strip().splitlines()[-1] != "0", console.stdout
    assert not (site / "evil.pth").exists()
    assert _run("omega-mcp", "--version", cwd=tmp_path, env=env).returncode == 0
    assert not marker.exists()


def test_the_file_tools_work_from_a_venv_with_copies_under_tmp_as_an_unprivileged_user() -> None:
    """The layout above (a venv of copies, HOME, OMEGA_HOME and the workspace in one 0700 directory
    under /tmp, a minimal env) as a user runs it: an account of its own (made when we are root)."""
    user = unprivileged()
    place = Path("/tmp") / f"omega-install-{uuid.uuid4().hex[:12]}"
    place.mkdir(mode=0o700)
    try:
        built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", place / "wheels", REPO, cwd=place)
        assert built.returncode == 0, built.stderr
        (wheel,) = (place / "wheels").glob("omega_mcp-*.whl")
        if user is not None:
            for path in (place, place / "wheels", wheel):
                os.chown(path, user.pw_uid, user.pw_gid)
        env = {
            "PATH": f"{place / 'venv' / 'bin'}{os.pathsep}/usr/bin:/bin",
            "HOME": str(place / "home"),
            "OMEGA_HOME": str(place / "omega-home"),
        }
        # The account's own interpreter: a system one (this checkout's may live where only root may enter).
        system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"
        check = "import sys, venv; assert sys.version_info >= (3, 11)"
        usable = _run(system, "-c", check, cwd=place, env=env, user=user)
        if usable.returncode != 0:
            pytest.skip(f"no Python 3.11+ in /usr/local/bin, /usr/bin or /bin for the account: {usable.stderr[-200:]}")
        made = _run(system, "-m", "venv", "--copies", place / "venv", cwd=place, env=env, user=user)
        assert made.returncode == 0, made.stderr
        pip = (place / "venv" / "bin" / "pip", "install", "-q", "--disable-pip-version-check", wheel)
        installed = _run(*pip, cwd=place, env=env, user=user)
        assert installed.returncode == 0, installed.stderr
        for sub in ("home", "ws"):
            (place / sub).mkdir()
            if user is not None:
                os.chown(place / sub, user.pw_uid, user.pw_gid)

        def call(tool: str, args: dict[str, str]) -> subprocess.CompletedProcess[str]:
            argv = ("omega-mcp", "call", tool, json.dumps(args), "--workspace", place / "ws")
            return _run(*argv, cwd=place, env=env, user=user)

        ok = call("write", {"file_path": str(place / "ws" / "ok.txt"), "content": "fine\n"})
        assert ok.returncode == 0 and "(created)" in ok.stdout, ok.stdout + ok.stderr
        read = call("read", {"file_path": str(place / "ws" / "ok.txt")})
        assert read.returncode == 0 and "fine" in read.stdout, read.stdout + read.stderr
        edit = call("edit", {"file_path": str(place / "ws" / "ok.txt"), "old_string": "fine", "new_string": "good"})
        assert edit.returncode == 0 and (place / "ws" / "ok.txt").read_text() == "good\n", edit.stdout + edit.stderr
        (site,) = (place / "venv" / "lib").glob("python3*/site-packages")
        planted = call("write", {"file_path": str(site / "evil.pth"), "content": "import os\n"})
        assert planted.returncode == 1 and "never writable" in planted.stdout, planted.stdout + planted.stderr
    finally:
        shutil.rmtree(place, ignore_errors=True)
