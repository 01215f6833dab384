"""`omega-mcp claude-config` as a new user runs it in a project: the printed entry works on that project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import StdioServerParameters

from waits import deadline


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["OMEGA_HOME"] = str(tmp_path / "home")
    env.pop("OMEGA_CONFIG", None)
    env.update(extra)
    return env


def _claude_config(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", "claude-config", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


def _entry(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["mcpServers"]["omega"]  # stdout is pure JSON or this fails


@pytest.mark.e2e
def test_the_workspace_defaults_to_the_project_directory_and_omega_home_is_kept(tmp_path: Path):
    project = tmp_path / "my-project"
    project.mkdir()
    entry = _entry(_claude_config(project, env=_env(tmp_path)))
    assert entry["type"] == "stdio"
    assert entry["args"][-5:] == ["attach", "--workspace", str(project), "--client-prefix", "mcp__omega__"]
    assert entry["env"] == {"OMEGA_HOME": str(tmp_path / "home")}
    assert entry["alwaysLoad"] is True  # else Claude Code defers omega's tools behind its own tool search


@pytest.mark.e2e
def test_standalone_prints_the_serve_entry_of_before(tmp_path: Path):
    project = tmp_path / "my-project"
    project.mkdir()
    entry = _entry(_claude_config(project, "--standalone", env=_env(tmp_path)))
    assert entry["args"][-5:] == ["serve", "--workspace", str(project), "--client-prefix", "mcp__omega__"]
    assert "alwaysLoad" not in entry


@pytest.mark.e2e
def test_config_workspace_and_mode_are_written_in_order_and_made_absolute(tmp_path: Path):
    project = tmp_path / "my-project"
    project.mkdir()
    config = project / "servers.toml"
    config.write_text('[sandbox]\nmode = "sandbox"\n')
    entry = _entry(_claude_config(project, "--workspace", "../elsewhere", "--mode", "rx", env=_env(tmp_path)))
    assert entry["args"][-9:] == [
        "attach",
        "--config",
        str(config),  # found as ./servers.toml, written absolute
        "--workspace",
        str(tmp_path / "elsewhere"),
        "--mode",
        "rx",
        "--client-prefix",  # Claude Code's own prefix for the server named omega
        "mcp__omega__",
    ]


@pytest.mark.e2e
def test_without_omega_home_the_entry_sets_no_environment(tmp_path: Path):
    env = _env(tmp_path)
    del env["OMEGA_HOME"]
    entry = _entry(_claude_config(tmp_path, env=env))
    assert entry["env"] == {}
    assert "--mode" not in entry["args"]


@pytest.mark.e2e
async def test_the_printed_entry_starts_an_omega_whose_tools_work_in_the_project(tmp_path: Path):
    project = tmp_path / "my-project"
    project.mkdir()
    entry = _entry(_claude_config(project, "--mode", "rwx", env=_env(tmp_path)))
    # Claude Code starts the server elsewhere than where the entry was made: the entry alone must suffice.
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"], cwd=str(tmp_path))
    try:
        async with mcp.Client(params, mode="legacy") as client:
            result = await client.call_tool("bash", {"command": "pwd && echo made > note.txt"})
            assert not result.is_error
            assert result.content[0].text.splitlines()[0] == str(project)  # type: ignore[union-attr]
    finally:  # the entry attaches to the shared hub, which it started: stop it
        stop = [sys.executable, "-m", "omega_mcp", "hub", "stop"]
        with deadline(90):
            await anyio.run_process(stop, env=entry["env"] | _env(tmp_path), cwd=tmp_path, check=False)
    assert (project / "note.txt").read_text() == "made\n"


@pytest.mark.e2e
def test_http_prints_pure_json_and_says_on_stderr_how_to_provide_the_token(tmp_path: Path):
    proc = _claude_config(tmp_path, "--http", "http://127.0.0.1:8765/mcp", env=_env(tmp_path))
    entry = _entry(proc)
    assert entry == {
        "type": "http",
        "url": "http://127.0.0.1:8765/mcp",
        "headers": {"Authorization": "Bearer ${OMEGA_TOKEN}"},
    }
    assert "export OMEGA_TOKEN=" in proc.stderr
    assert str(tmp_path / "home" / "token") in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.e2e
def test_http_with_a_workspace_or_mode_is_a_usage_error(tmp_path: Path):
    for extra in (["--workspace", str(tmp_path)], ["--mode", "rx"]):
        proc = _claude_config(tmp_path, "--http", "http://127.0.0.1:8765/mcp", *extra, env=_env(tmp_path))
        assert proc.returncode == 2
        assert proc.stdout == ""
        assert proc.stderr.strip().splitlines() == [
            "omega-mcp: error: --workspace and --mode do not apply with --http: the hub has its own "
            "(pass them to `omega-mcp serve --http`)"
        ]


def _run(tmp_path: Path, **options: Any) -> tuple[int, str]:
    """`claude-config` in process: (exit code, stdout)."""
    import argparse
    import io

    from omega_mcp.cli.register import run_claude_config
    from omega_mcp.config import Config

    args = argparse.Namespace(**{"http": None, "workspace": None, "mode": None, "config": None, **options})
    out = io.StringIO()
    code = run_claude_config(Config(home=tmp_path / "home"), args, out)
    return code, out.getvalue()


@pytest.mark.parametrize(
    "url", ["notaurl", "ftp://host/mcp", "http://", "http://127.0.0.1:99999/mcp", "127.0.0.1:8765"]
)
def test_http_that_is_no_url_is_refused(tmp_path: Path, url: str):
    from omega_mcp.cli.common import UsageError

    with pytest.raises(UsageError, match=r"--http: .* is not an http:// or https:// URL"):
        _run(tmp_path, http=url)


def test_http_to_another_path_than_mcp_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    code, out = _run(tmp_path, http="http://127.0.0.1:8765")
    assert code == 0 and json.loads(out)["mcpServers"]["omega"]["url"] == "http://127.0.0.1:8765"
    assert "warning: --http: an omega hub serves MCP at the path /mcp, not '/'" in capsys.readouterr().err
    _run(tmp_path, http="https://omega.internal/mcp")
    assert "warning" not in capsys.readouterr().err


def test_a_workspace_serve_would_refuse_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "file").write_text("")
    cases = {
        tmp_path / "missing" / "deep" / "ws": "does not exist, nor does its parent",
        tmp_path / "file": "exists and is not a directory",
        tmp_path / "file" / "ws": "a component of its path is not a directory",
    }
    for workspace, why in cases.items():
        code, _ = _run(tmp_path, workspace=str(workspace))
        err = capsys.readouterr().err
        assert code == 0 and f"warning: --workspace: {workspace}" in err and why in err, err
        assert "omega will refuse to start with this entry" in err
    for fine in (tmp_path / "new", tmp_path / "home" / "deep" / "ws"):  # serve creates these
        _run(tmp_path, workspace=str(fine))
        assert "warning" not in capsys.readouterr().err
        assert not fine.exists()  # claude-config itself creates nothing
