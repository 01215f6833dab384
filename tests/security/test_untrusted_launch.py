"""Nothing omega starts runs from a write root: code a model planted in the workspace never runs next.

The attacks: a model writes `mcp_server_time.py` into the workspace, or a `node_modules/<pkg>` with
a bin, and the user starts omega from the project (as Claude Code does) with the documented servers
(`${OMEGA_PYTHON} -m mcp_server_time`, `npx -y <pkg>`). Unconfined, in omega's cwd, the first
imports the planted module and the second runs the planted bin, with the user's rights. Each planted
file writes a marker outside the workspace; the marker must never appear, and the real server must
still answer. A server whose `cwd` or program lies inside a write root runs only confined; with
`sandbox = "none"` it is refused, naming the setting.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from cli_support import cli_env
from omega_mcp.config import load_config
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.untrusted import LaunchGuard
from omega_mcp.toolbox import Toolbox
from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox policy here is Linux's")


def _omega(tmp_path: Path, config: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env=cli_env(tmp_path),
        cwd=cwd,
        timeout=90,
    )


def _project(tmp_path: Path, servers: str) -> tuple[Path, Path]:
    """A project directory (the workspace, omega's cwd) and a config outside it."""
    ws = tmp_path / "project"
    ws.mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nworkspace = "{ws}"\n{servers}')
    return ws, config


def _plant_python(ws: Path, marker: Path) -> None:
    (ws / "mcp_server_time.py").write_text(f"open({str(marker)!r}, 'w').write('planted module ran')\n")
    pkg = ws / "mcp_server_time"  # a package shadows too; both must lose
    pkg.mkdir()
    (pkg / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('planted package ran')\n")


_TIME = '[servers.time]\ncommand = "${OMEGA_PYTHON}"\nargs = ["-m", "mcp_server_time"]\n'


@pytest.mark.e2e
def test_a_module_planted_in_the_workspace_is_not_imported_by_a_python_server(tmp_path: Path) -> None:
    pytest.importorskip("mcp_server_time", reason="mcp-server-time is a dev dependency (pip install -e .[dev])")
    ws, config = _project(tmp_path, _TIME)
    marker = tmp_path / "marker"
    _plant_python(ws, marker)
    done = _omega(tmp_path, config, "call", "mcp__time__get_current_time", '{"timezone": "UTC"}', cwd=ws)
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"timezone": "UTC"' in done.stdout
    assert (tmp_path / "home" / "servers" / "time").is_dir()  # its default working directory


async def test_a_restarted_python_server_does_not_import_a_module_planted_in_omegas_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every start asks the guard, not only the early one: the server exits at its first start and
    its restart imports `mcp_server_time` as `python -c` does, from the cwd first (unless guarded)."""
    pytest.importorskip("mcp_server_time", reason="mcp-server-time is a dev dependency (pip install -e .[dev])")
    flag = tmp_path / "crashed"
    code = (
        f"import os, runpy, sys\nif not os.path.exists({str(flag)!r}):\n"
        f"    open({str(flag)!r}, 'w').close(); sys.exit(1)\n"
        "runpy.run_module('mcp_server_time', run_name='__main__')\n"
    )
    servers = f'[servers.time]\ncommand = "${{OMEGA_PYTHON}}"\nargs = {json.dumps(["-c", code])}\n'
    ws, config_path = _project(tmp_path, servers)
    marker = tmp_path / "marker"
    _plant_python(ws, marker)
    monkeypatch.chdir(ws)  # omega started from the project, as Claude Code starts it
    monkeypatch.setenv("OMEGA_HOME", str(tmp_path / "home"))
    config = load_config(config_path)
    policy = SandboxPolicy.from_settings(config.sandbox, config.place)
    guard = LaunchGuard.of(policy)
    async with (
        Downstreams.from_config(config.for_servers, guard=guard, backoff_seconds=0.05) as downstreams,
        Toolbox(policy, downstreams) as toolbox,
    ):
        with deadline(30):
            while [s.state for s in downstreams.statuses()] != ["connected"]:  # noqa: ASYNC110 - a test poll
                await anyio.sleep(0.05)
        result = await toolbox.call_tool("mcp__time__get_current_time", {"timezone": "UTC"})
    assert flag.exists()
    assert not marker.exists(), marker.read_text()
    assert not result.is_error, result.content


def _plant_npm(ws: Path, package: str, marker: Path) -> None:
    bin_dir = ws / "node_modules" / package / "bin"
    bin_dir.mkdir(parents=True)
    (ws / "node_modules" / package / "package.json").write_text(
        json.dumps({"name": package, "version": "1.0.0", "bin": {package: "bin/run.js"}})
    )
    run = bin_dir / "run.js"
    run.write_text(f"#!/usr/bin/env node\nrequire('fs').writeFileSync({json.dumps(str(marker))}, 'planted bin ran');\n")
    run.chmod(0o755)
    (ws / "node_modules" / ".bin").mkdir()
    (ws / "node_modules" / ".bin" / package).symlink_to(f"../{package}/bin/run.js")


def _npx_server(tmp_path: Path, package: str) -> str:
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed")
    env = {"npm_config_offline": "true", "npm_config_cache": str(tmp_path / "npm-cache")}  # never the registry
    servers = f'[servers.pkg]\ncommand = "npx"\nargs = ["-y", "{package}"]\n[servers.pkg.env]\n'
    return servers + "".join(f'{k} = "{v}"\n' for k, v in env.items())


_PACKAGE = "omega-planted-probe-7f3a"


@pytest.mark.e2e
def test_a_package_planted_in_node_modules_is_not_run_by_npx(tmp_path: Path) -> None:
    ws, config = _project(tmp_path, _npx_server(tmp_path, _PACKAGE))
    marker = tmp_path / "marker"
    _plant_npm(ws, _PACKAGE, marker)
    _omega(tmp_path, config, "tools", cwd=ws)
    assert not marker.exists(), marker.read_text()


@pytest.mark.e2e
def test_a_node_modules_planted_above_the_servers_directory_refuses_the_server(tmp_path: Path) -> None:
    """npm puts the node_modules/.bin of every directory above its cwd on PATH; $OMEGA_HOME lies in
    /tmp here, where the tools may write."""
    ws, config = _project(tmp_path, _npx_server(tmp_path, _PACKAGE))
    marker = tmp_path / "marker"
    _plant_npm(tmp_path, _PACKAGE, marker)
    done = _omega(tmp_path, config, "tools", cwd=ws)
    assert not marker.exists(), marker.read_text()
    assert f"pkg: failed: not started: {tmp_path / 'node_modules'} lies above" in done.stdout, done.stdout


@pytest.mark.e2e
def test_the_file_tools_cannot_plant_node_modules_in_omegas_home(tmp_path: Path) -> None:
    ws, config = _project(tmp_path, "")
    target = tmp_path / "home" / "node_modules" / ".bin" / _PACKAGE
    done = _omega(tmp_path, config, "call", "write", json.dumps({"file_path": str(target), "content": "x"}), cwd=ws)
    assert done.returncode == 1 and "denied" in done.stdout, done.stdout
    assert not target.exists()


@pytest.mark.parametrize("where", ["workspace", "write_root", "omega_home", "tmp"])
@pytest.mark.e2e
def test_an_unconfined_server_whose_cwd_lies_in_a_write_root_is_refused_naming_the_setting(
    tmp_path: Path, where: str
) -> None:
    """Unconfined (`sandbox = "none"`) it is refused; without that it runs confined (test_workspace_servers.py)."""
    extra = tmp_path / "extra"
    extra.mkdir()
    cwd = {
        "workspace": tmp_path / "project" / "sub",
        "write_root": extra,
        "omega_home": tmp_path / "home" / "stuff",
        "tmp": Path("/tmp"),
    }[where]
    servers = f'[servers.time]\ncommand = "{sys.executable}"\nargs = ["-c", "pass"]\ncwd = "{cwd}"\nsandbox = "none"\n'
    servers += '[servers.ok]\ncommand = "${OMEGA_PYTHON}"\nargs = ["-m", "mcp_server_time"]\n'
    ws, config = _project(tmp_path, servers)
    text = config.read_text().replace("[servers.time]", f'write_roots = ["{extra}"]\n[servers.time]', 1)
    config.write_text(text)
    cwd.mkdir(parents=True, exist_ok=True)
    done = _omega(tmp_path, config, "tools", "--json", cwd=ws)
    servers_json = json.loads(done.stdout)["servers"]
    reason = servers_json["time"]["reason"] or ""
    assert servers_json["time"]["state"] == "failed"
    assert "servers.time.cwd" in reason and 'servers.time.sandbox = "none"' in reason and "write" in reason, reason
    if pytest.importorskip("mcp_server_time") is not None:
        assert servers_json["ok"]["state"] == "connected", servers_json["ok"]


@pytest.mark.parametrize("unconfined", [True, False])
@pytest.mark.e2e
def test_a_server_whose_program_lies_in_the_workspace_never_runs_unconfined(tmp_path: Path, unconfined: bool) -> None:
    """`sandbox = "none"`: refused, naming the setting; without it the program runs confined, so its write
    outside its own directories (the marker) is denied and it dies."""
    ws, config = _project(tmp_path, "")
    program = ws / "bin" / "server"
    marker = Path(tempfile.mkdtemp(dir="/var/tmp")) / "marker"  # outside the confined server's private /tmp
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    program.chmod(0o755)
    entry = f'[servers.local]\ncommand = "{program}"\n' + ('sandbox = "none"\n' if unconfined else "")
    config.write_text(config.read_text() + entry)
    try:
        done = _omega(tmp_path, config, "tools", cwd=ws)
        assert done.returncode == 1
        if unconfined:
            expected = 'local: failed: not started: servers.local.sandbox = "none", but servers.local.command'
            assert expected in done.stdout, done.stdout + done.stderr
        else:
            assert "local: failed" in done.stdout and "confined" in done.stdout, done.stdout + done.stderr
        assert not marker.exists()
    finally:
        shutil.rmtree(marker.parent, ignore_errors=True)


async def test_a_restarted_npx_server_does_not_run_a_package_planted_in_omegas_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first start fails and the supervisor restarts the server: that restart must not resolve
    `npx -y <pkg>` from the workspace (omega's cwd) either."""
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed")
    starts, marker = tmp_path / "starts", tmp_path / "marker"
    script = (
        f"echo start >> {starts}; if [ $(wc -l < {starts}) -lt 2 ]; then exit 1; fi; "
        f"npx -y {_PACKAGE}; echo done >> {starts}"
    )
    npm_env = f'npm_config_offline = "true"\nnpm_config_cache = "{tmp_path / "npm-cache"}"\n'
    servers = f'[servers.pkg]\ncommand = "sh"\nargs = {json.dumps(["-c", script])}\n[servers.pkg.env]\n{npm_env}'
    ws, config_path = _project(tmp_path, servers)
    _plant_npm(ws, _PACKAGE, marker)
    monkeypatch.chdir(ws)  # omega started from the project, as Claude Code starts it
    monkeypatch.setenv("OMEGA_HOME", str(tmp_path / "home"))
    config = load_config(config_path)
    policy = SandboxPolicy.from_settings(config.sandbox, config.place)
    async with Downstreams.from_config(config.for_servers, guard=LaunchGuard.of(policy), backoff_seconds=0.05):
        with deadline(60):
            while "done" not in (starts.read_text() if starts.exists() else ""):  # noqa: ASYNC110 - a test poll
                await anyio.sleep(0.05)
    assert starts.read_text().count("start") >= 2
    assert not marker.exists(), marker.read_text()
