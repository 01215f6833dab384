"""Nothing a model does changes what omega runs next: planted configs and unsafe write roots.

Each attack runs the real CLI the way a user's client would. The plant-then-restart attack is the
one seen from the outside: sandboxed bash writes `./servers.toml` into omega's working directory
(the workspace), and the next start used to run the planted server outside the sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omega_mcp.config import load_config
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.roots import root_problems


def _omega(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMEGA_")}
    env.update(HOME=str(home), OMEGA_HOME=str(home / ".omega"))
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("omega-mcp: error:")]


def test_a_config_planted_by_sandboxed_bash_is_not_loaded_at_the_next_start(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    marker = tmp_path / "planted-server-ran"
    code = f"open({str(marker)!r}, 'w').close()"
    planted = (
        '[sandbox]\nmode = "rwx"\n\n[servers.evil]\n'
        f"command = {json.dumps(sys.executable)}\nargs = {json.dumps(['-c', code])}\n"
    )
    script = f"cat > servers.toml <<'EOF'\n{planted}EOF\necho planted"
    first = _omega(project, home, "call", "bash", json.dumps({"command": script}), "--workspace", str(project))
    assert first.returncode == 0, first.stdout + first.stderr
    assert (project / "servers.toml").is_file()  # the model could write it: the workspace is its to write

    second = _omega(project, home, "tools", "--workspace", str(project))
    assert second.returncode == 2
    assert _errors(second) == [
        f"omega-mcp: error: {project / 'servers.toml'}: not loaded: it was found in the current directory, "
        f"inside {project}, where omega's tools may write, so a model could have put it there; pass it with "
        "--config to use it"
    ]
    assert not marker.exists()

    # Without --workspace the default policy's roots still include /tmp, where this project lives.
    third = _omega(project, home, "serve")
    assert third.returncode == 2 and "not loaded" in third.stderr
    assert not marker.exists()


def test_the_user_can_still_load_that_file_by_naming_it(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "servers.toml").write_text('[sandbox]\nmode = "rwx"\n')
    done = _omega(project, home, "tools", "--config", str(project / "servers.toml"))
    assert done.returncode == 0, done.stderr
    assert "config: " + str(project / "servers.toml") in done.stdout


@pytest.mark.parametrize("workspace", ["/etc", "/usr/lib", "/", "/proc"])
def test_a_system_directory_as_workspace_is_a_config_error(tmp_path: Path, workspace: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = _omega(tmp_path, home, "call", "bash", '{"command": "touch x"}', "--workspace", workspace)
    assert done.returncode == 2
    (error,) = _errors(done)
    assert error.startswith(f"omega-mcp: error: --workspace: {workspace} is ")
    assert not Path(workspace, "x").exists()


def test_a_system_directory_as_workspace_is_only_a_warning_in_rwx_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = _omega(tmp_path, home, "tools", "--workspace", "/etc", "--mode", "rwx")
    assert done.returncode == 0, done.stderr
    assert "UNSAFE write root (allowed in rwx mode only): --workspace: /etc is a system directory" in done.stderr


def test_home_itself_or_a_root_holding_omegas_files_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    for workspace in (home, tmp_path):  # the home itself; a directory containing home and ~/.omega
        done = _omega(tmp_path, home, "tools", "--workspace", str(workspace))
        assert done.returncode == 2, done.stderr
    interpreter = Path(sys.prefix).resolve()
    policy = SandboxPolicy(mode="sandbox", home=home / ".omega", workspace=interpreter.parent, tmp_dir=tmp_path)
    (problem,) = root_problems(policy, user_home=home)
    assert "contains omega's interpreter" in problem.reason


def test_a_write_root_holding_the_config_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".omega").mkdir(parents=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    config = shared / "servers.toml"
    config.write_text(f'[sandbox]\nworkspace = "{tmp_path / "ws"}"\nwrite_roots = ["{shared}"]\n')
    (tmp_path / "ws").mkdir()
    done = _omega(tmp_path, home, "tools", "--config", str(config))
    assert done.returncode == 2
    assert _errors(done) == [
        f"omega-mcp: error: {config}: sandbox.write_roots: {shared} contains omega's config {config}, which a "
        "sandboxed command must never change; pick another directory"
    ]
    assert load_config(config).sandbox.write_roots == (shared,)


def test_a_missing_workspace_is_not_created_with_missing_parents(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    deep = tmp_path / "nonexistent" / "deep" / "ws"
    done = _omega(tmp_path, home, "tools", "--workspace", str(deep))
    assert done.returncode == 2
    assert "does not exist, nor does its parent" in done.stderr
    assert not (tmp_path / "nonexistent").exists()
    ok = _omega(tmp_path, home, "tools", "--workspace", str(tmp_path / "fresh"))
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "fresh").is_dir()


def test_claude_config_warns_at_once_when_the_project_holds_omegas_config(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "servers.toml").write_text("[sandbox]\n")
    done = _omega(project, home, "claude-config")
    assert done.returncode == 0
    entry = json.loads(done.stdout)["mcpServers"]["omega"]
    assert entry["args"][-4:-2] == ["--workspace", str(project)]
    assert done.stderr.splitlines() == [
        f"omega-mcp: warning: --workspace: {project} contains omega's config {project / 'servers.toml'}, which a "
        "sandboxed command must never change: omega will refuse to start with this entry; move omega's files out "
        "of it or pick another --workspace"
    ]


def test_a_module_planted_in_the_working_directory_is_not_imported_by_python_m_omega_mcp(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    marker = tmp_path / "planted-module-ran"
    for module in ("anyio", "pydantic", "mcp"):  # imported by omega on every start
        (project / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = _omega(project, home, "tools", "--workspace", str(tmp_path / "ws"))
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


def test_claude_configs_fallback_entry_keeps_the_project_off_the_import_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from omega_mcp.cli import register
    from omega_mcp.config import Config

    real_python = sys.executable
    python = tmp_path / "bin" / "python3"  # no omega-mcp script beside it, none on PATH
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setenv("PATH", str(python.parent))
    project = tmp_path / "project"
    project.mkdir()
    args = argparse.Namespace(workspace=str(project), mode=None, http=None)
    entry = register.run_claude_config.__globals__["_stdio_entry"](Config(), args)
    assert entry["command"] == str(python) and entry["args"][:3] == ["-P", "-m", "omega_mcp"]

    marker = tmp_path / "planted-module-ran"
    (project / "anyio.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "OMEGA_HOME": str(home / ".omega")}
    argv = [real_python, *entry["args"][:3], "tools", "--workspace", str(project)]  # the venv's, as entered
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("entry", "key", "reason"),
    [
        ('sandbox = { write_roots = ["/etc"] }', "servers.x.sandbox.write_roots", "/etc is a system directory"),
        ('sandbox = { write_roots = ["{home}"] }', "servers.x.sandbox.write_roots", "is your home directory itself"),
        ('sandbox = { write_roots = ["{tmp}"] }', "servers.x.sandbox.write_roots", "contains your home directory"),
        ('sandbox = "default"\ncwd = "/usr/lib"', "servers.x.cwd", "/usr/lib is a system directory"),
    ],
)
def test_a_confined_servers_roots_get_the_same_checks_as_the_sandboxs(
    tmp_path: Path, entry: str, key: str, reason: str
) -> None:
    home = tmp_path / "home"
    (home / ".omega").mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    config = tmp_path / "conf" / "servers.toml"
    config.parent.mkdir()
    entry = entry.replace("{home}", str(home)).replace("{tmp}", str(tmp_path))
    config.write_text(
        f'[sandbox]\nworkspace = "{tmp_path / "ws"}"\n\n[servers.x]\ncommand = "{sys.executable}"\n{entry}\n'
    )
    done = _omega(tmp_path, home, "tools", "--config", str(config))
    assert done.returncode == 2, done.stderr
    (error,) = _errors(done)
    assert error.startswith(f"omega-mcp: error: {config}: {key}: ") and reason in error


def test_an_unconfined_or_read_only_server_has_no_roots_to_check(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".omega").mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[sandbox]\nworkspace = "{tmp_path / "ws"}"\n\n'
        f'[servers.x]\ncommand = "{sys.executable}"\nargs = ["-c", ""]\ncwd = "/usr/lib"\n\n'
        f'[servers.y]\ncommand = "{sys.executable}"\nargs = ["-c", ""]\n'
        'sandbox = { read_only = true, write_roots = ["/etc"] }\n'
    )
    done = _omega(tmp_path, home, "tools", "--config", str(config))
    assert done.returncode != 2, done.stderr
