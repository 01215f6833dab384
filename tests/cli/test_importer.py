from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omega_mcp.cli.importer import import_servers
from omega_mcp.config import load_config
from omega_mcp.errors import ConfigError

CLAUDE_CODE = {
    "mcpServers": {
        "time": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        "docs.remote": {"type": "http", "url": "https://docs.invalid/mcp", "headers": {"Authorization": "Bearer ${T}"}},
        "a__b": {"command": "x"},
        "socket": {"type": "ws", "url": "ws://nowhere"},
    }
}


def _source(tmp_path: Path, data: object) -> Path:
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps(data))
    return path


def test_import_adds_entries_and_keeps_comments_and_existing_servers(tmp_path: Path):
    target = tmp_path / "servers.toml"
    target.write_text('# my hub\n[sandbox]\nmode = "rx"  # network on\n\n[servers.time]\ncommand = "python3"\n')
    report = import_servers(_source(tmp_path, CLAUDE_CODE), target)
    text = target.read_text()
    assert "# my hub" in text and "# network on" in text
    assert report.skipped == ["time"]
    assert report.added == ["docs-remote", "a_b"]
    assert report.renamed == {"docs.remote": "docs-remote", "a__b": "a_b"}
    assert "socket" in report.unsupported
    config = load_config(target, environ={"T": "tok"})
    assert config.servers["time"].command == "python3"
    assert config.servers["docs-remote"].headers == {"Authorization": "Bearer tok"}
    assert config.sandbox.mode == "rx"


def test_overwrite_replaces_an_existing_server(tmp_path: Path):
    target = tmp_path / "servers.toml"
    target.write_text('[servers.time]\ncommand = "python3"\n')
    report = import_servers(_source(tmp_path, CLAUDE_CODE), target, overwrite=True)
    assert report.replaced == ["time"]
    config = load_config(target, environ={"T": "x"})
    assert config.servers["time"].command == "uvx"
    assert config.servers["time"].args == ("mcp-server-time",)


def test_dry_run_writes_nothing(tmp_path: Path):
    target = tmp_path / "servers.toml"
    report = import_servers(_source(tmp_path, CLAUDE_CODE), target, dry_run=True)
    assert report.added and not target.exists()


def test_claude_desktop_and_project_sections_are_read(tmp_path: Path):
    data = {"projects": {"/p": {"mcpServers": {"proj": {"command": "p"}}}}, "mcpServers": {"top": {"command": "t"}}}
    target = tmp_path / "servers.toml"
    report = import_servers(_source(tmp_path, data), target)
    assert report.added == ["top", "proj"]


@pytest.mark.parametrize("content", ["{not json", "[]", '{"other": 1}'])
def test_bad_sources_are_clear_errors_and_change_nothing(tmp_path: Path, content: str):
    source = tmp_path / "bad.json"
    source.write_text(content)
    target = tmp_path / "servers.toml"
    target.write_text("# untouched\n")
    with pytest.raises(ConfigError):
        import_servers(source, target)
    assert target.read_text() == "# untouched\n"


def test_an_invalid_target_is_not_overwritten(tmp_path: Path):
    target = tmp_path / "servers.toml"
    target.write_text("[servers.x\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        import_servers(_source(tmp_path, CLAUDE_CODE), target)
    assert target.read_text() == "[servers.x\n"


@pytest.mark.e2e
def test_import_command_line(tmp_path: Path):
    target = tmp_path / "servers.toml"
    target.write_text("")
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "import", str(_source(tmp_path, CLAUDE_CODE)), "--config", str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "added [servers.time]" in proc.stdout and "skipped 'socket'" in proc.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "import", str(tmp_path / "nope.json"), "--config", str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_an_entry_the_config_would_refuse_is_skipped_and_the_rest_imported(tmp_path: Path):
    data = {
        "mcpServers": {
            "good": {"command": "uvx", "args": ["x"]},
            "empty-cwd": {"command": "c", "cwd": ""},
            "nul": {"command": "a\u0000b"},
        }
    }
    target = tmp_path / "servers.toml"
    report = import_servers(_source(tmp_path, data), target)
    assert report.added == ["good"]
    assert "cwd" in report.unsupported["empty-cwd"]
    assert "NUL" in report.unsupported["nul"]
    assert list(load_config(target, environ={}).servers) == ["good"]


@pytest.mark.e2e
def test_import_command_line_creates_the_config_named_by_the_flag(tmp_path: Path):
    target = tmp_path / "new" / "servers.toml"
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "import", str(_source(tmp_path, CLAUDE_CODE)), "--config", str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {target}" in proc.stdout
    assert "time" in load_config(target, environ={"T": "x"}).servers


def test_two_source_names_that_map_to_one_key_both_get_imported(tmp_path: Path):
    data = {"mcpServers": {"a__b": {"command": "first"}, "a_b": {"command": "second"}}}
    target = tmp_path / "servers.toml"
    report = import_servers(_source(tmp_path, data), target)
    servers = load_config(target, environ={}).servers
    assert sorted(s.command or "" for s in servers.values()) == ["first", "second"]
    assert len(report.added) == 2 and not report.skipped


@pytest.mark.parametrize(
    "omega",
    [
        {"command": "/x/.venv/bin/omega-mcp", "args": ["serve"]},
        {"command": "python3", "args": ["-m", "omega_mcp", "serve"]},
        {"command": "uvx", "args": ["omega-mcp"]},
    ],
)
def test_an_entry_that_launches_omega_is_skipped_and_named_and_the_rest_imported(tmp_path: Path, omega: dict):
    data = {"mcpServers": {"omega": omega, "time": {"command": "uvx", "args": ["mcp-server-time"]}}}
    target = tmp_path / "servers.toml"
    report = import_servers(_source(tmp_path, data), target)
    assert report.added == ["time"]
    assert report.unsupported == {"omega": "it launches omega itself (omega never runs itself)"}
    assert list(load_config(target, environ={}).servers) == ["time"]


def test_import_reports_each_unset_variable_an_imported_server_uses(tmp_path: Path):
    data = {
        "mcpServers": {
            "brave": {"command": "npx", "env": {"BRAVE_API_KEY": "${BRAVE_API_KEY}", "LANG": "${LANG:-C}"}},
            "hub": {"type": "http", "url": "https://hub.invalid/mcp", "headers": {"Authorization": "Bearer ${T}"}},
            "off": {"command": "${NOPE}", "disabled": True},
        }
    }
    source, target = _source(tmp_path, data), tmp_path / "servers.toml"
    report = import_servers(source, target, dry_run=True, environ={"T": "token"})
    assert report.unset == [("brave", "env.BRAVE_API_KEY", "BRAVE_API_KEY")]
    assert import_servers(source, target, environ={"BRAVE_API_KEY": "k", "T": "t"}).unset == []
    assert load_config(target, environ={}).server_problem("brave") is not None


@pytest.mark.e2e
def test_import_command_line_warns_about_an_unset_variable_in_one_line(tmp_path: Path):
    data = {"mcpServers": {"brave": {"command": "npx", "env": {"BRAVE_API_KEY": "${OMEGA_TEST_UNSET_BRAVE_KEY}"}}}}
    target = tmp_path / "servers.toml"
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_TEST_UNSET_BRAVE_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "import", str(_source(tmp_path, data)), "--config", str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "warning: [servers.brave] env.BRAVE_API_KEY uses ${OMEGA_TEST_UNSET_BRAVE_KEY}, which is not set: "
        "the server will be marked failed until it is\n"
    ) in proc.stdout


def test_import_into_a_config_whose_url_is_an_unset_variable_works(tmp_path: Path):
    target = tmp_path / "servers.toml"
    target.write_text('[servers.hub]\nurl = "${HUB_URL}"\n')
    report = import_servers(_source(tmp_path, {"mcpServers": {"time": {"command": "uvx"}}}), target)
    assert report.added == ["time"]
    assert list(load_config(target, environ={}).servers) == ["hub", "time"]


def test_an_invalid_result_reports_every_problem_against_the_target(tmp_path: Path):
    target = tmp_path / "servers.toml"
    target.write_text('[sandbox]\nmode = "yolo"\nbash_timeout = 9999\n')
    with pytest.raises(ConfigError) as info:
        import_servers(_source(tmp_path, {"mcpServers": {"time": {"command": "uvx"}}}), target)
    problems = info.value.problems
    assert [p.split(": ")[:3] for p in problems] == [
        [str(target), "the imported result would be invalid", "sandbox.mode"],
        [str(target), "the imported result would be invalid", "sandbox.bash_timeout"],
    ]
    assert target.read_text() == '[sandbox]\nmode = "yolo"\nbash_timeout = 9999\n'


def test_every_entry_left_out_is_reported_with_where_it_was(tmp_path: Path):
    source = tmp_path / "claude.json"
    source.write_text(
        '{"mcpServers": {"dup": {"command": "one"}, "dup": {"command": "last"}, "odd": "not an object"},'
        ' "projects": {"/p/a": {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}},'
        '              "/p/b": {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]},'
        '                                       "dup": {"command": "other"}}}}}'
    )
    report = import_servers(source, tmp_path / "servers.toml")
    assert report.added == ["dup", "time"]
    assert load_config(tmp_path / "servers.toml", environ={}).servers["dup"].command == "last"
    assert report.dropped == [
        ("dup", "mcpServers names it more than once: the last one counts (as in Claude Code)"),
        ("odd", "its entry in mcpServers is not a JSON object"),
        ("time", "the mcpServers of project /p/b has the same entry by this name; the one in the mcpServers of "
         "project /p/a was imported"),
        ("dup", "the mcpServers of project /p/b has another entry by this name; the one in mcpServers was imported"),
    ]  # fmt: skip


def test_fields_omega_has_no_setting_for_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    import argparse

    from omega_mcp.cli.register import run_import
    from omega_mcp.config import Config

    data = {"mcpServers": {"fs": {"command": "npx", "alwaysAllow": ["read"], "timeout": 60}}}
    args = argparse.Namespace(source=str(_source(tmp_path, data)), config=str(tmp_path / "servers.toml"))
    args.overwrite = args.dry_run = False
    run_import(Config(home=tmp_path / "home"), args, sys.stdout)
    assert "ignored 'alwaysAllow', 'timeout' of 'fs': omega has no such setting" in capsys.readouterr().out
