"""Tool search through the `omega-mcp` command (real subprocesses): `omega-mcp search`, and `serve`
over stdio with `[hub] tool_search = "on"`, where calls of stdio servers' tools take the relay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mcp
from mcp import StdioServerParameters, types

from proxy_support import ECHO_SERVER, Notifications
from waits import deadline

BUILTINS = ["bash", "read", "write", "edit", "bash_output", "kill_shell"]


def _config(tmp_path: Path, hub: str = "") -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    path = tmp_path / "servers.toml"
    path.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n{hub}\n'
        f'[servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n'
    )
    return path


def _search(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMEGA_HOME=str(tmp_path / "home"))
    env.pop("OMEGA_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", "search", *args, "--config", str(_config(tmp_path))],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )


def test_search_prints_the_best_tools_one_per_line(tmp_path: Path) -> None:
    proc = _search(tmp_path, "echo the text back", "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 2
    assert lines[0].split() == ["mcp__echo__echo", "Echo", "the", "text", "back."]


def test_search_json_is_search_tools_structured_content(tmp_path: Path) -> None:
    proc = _search(tmp_path, "select:echo.echo,nothing_here", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [tool["name"] for tool in data["tools"]] == ["mcp__echo__echo"]
    assert data["tools"][0]["server"] == "echo"
    assert data["tools"][0]["inputSchema"]["required"] == ["text"]
    assert "Unknown tool name: nothing_here" in proc.stderr


def test_search_for_what_no_tool_does_prints_a_hint_and_a_bad_limit_is_a_usage_error(tmp_path: Path) -> None:
    nothing = _search(tmp_path, "quantum pizza")
    assert nothing.returncode == 0 and nothing.stdout == ""
    assert "No tool matches 'quantum pizza'" in nothing.stderr
    bad = _search(tmp_path, "echo", "--limit", "0")
    assert bad.returncode == 2 and "--limit" in bad.stderr


def test_search_server_narrows_to_one_server_and_built_ins_are_named_omega(tmp_path: Path) -> None:
    echo = _search(tmp_path, "echo the text back", "--server", "echo", "--json")
    assert echo.returncode == 0, echo.stderr
    assert {tool["server"] for tool in json.loads(echo.stdout)["tools"]} == {"echo"}
    own = _search(tmp_path, "run a shell command", "--server", "omega", "--json")
    rows = json.loads(own.stdout)["tools"]
    assert rows[0]["name"] == "bash" and {row["server"] for row in rows} == {"omega"}
    unknown = _search(tmp_path, "echo", "--server", "nope")
    assert unknown.returncode == 0 and unknown.stdout == ""
    assert "No connected server is named 'nope'" in unknown.stderr


async def test_serve_in_search_mode_lists_few_tools_and_adds_what_the_client_calls(tmp_path: Path) -> None:
    config = _config(tmp_path, '[hub]\ntool_search = "on"\n')
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config)],
        env={"OMEGA_HOME": str(tmp_path / "home")},
    )
    notes = Notifications()

    async def changed(count: int) -> None:  # a list_changed of the servers connecting may come too
        with deadline(10):
            while notes.tools == count:
                await notes.next()

    async with mcp.Client(params, mode="legacy", message_handler=notes) as client:
        before = [t.name for t in (await client.list_tools()).tools]
        count = notes.tools
        found = await client.call_tool("search_tools", {"query": "echo text", "limit": 1})
        await changed(count)
        listed = [t.name for t in (await client.list_tools()).tools]
        first = await client.call_tool("mcp__echo__echo", {"text": "one"})  # listed now: the relay takes it
        count = notes.tools
        via = await client.call_tool("call_tool", {"name": "mcp__echo__pid", "arguments": {}})
        await changed(count)
        after = [t.name for t in (await client.list_tools()).tools]
    assert before == [*BUILTINS, "search_tools", "call_tool"]
    assert isinstance(found.content[0], types.TextContent)
    assert found.content[0].text.startswith("mcp__echo__echo: Echo the text back.")
    assert listed == [*before, "mcp__echo__echo"]
    assert first.structured_content == {"text": "one"}
    assert not via.is_error
    assert after == [*listed, "mcp__echo__pid"]
