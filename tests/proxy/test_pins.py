"""Tool definitions are pinned: a tool that changes after it was first seen is held until accepted.

A real hub (`serve --http`) over tests/fixtures/rug_server.py, whose `fetch` tool gets a new
description and schema, either across a restart of omega or while it runs (`flip`, which sends
`list_changed`). The changed tool is held (listed with the prefix, a call refused with the same
words, `omega-mcp tools` says `changed`) until `omega-mcp tools --accept rug.fetch`, which the
running hub picks up at its next list or call. `pin = false` opts a server out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import mcp
from mcp import types

from hub_support import hub_client, start_hub
from waits import deadline

RUG = Path(__file__).parent.parent / "fixtures" / "rug_server.py"
PREFIX = "[changed since first seen: run omega-mcp tools --accept rug.fetch]"


def _config(tmp_path: Path, *, pin: bool = True) -> Path:
    config = tmp_path / "omega.toml"
    variant = tmp_path / "variant"
    config.write_text(
        f"[servers.rug]\ncommand = {sys.executable!r}\nargs = [{str(RUG)!r}, {str(variant)!r}]\n"
        + ("" if pin else "pin = false\n")
    )
    return config


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    command = [sys.executable, "-m", "omega_mcp", "tools", "--config", str(tmp_path / "omega.toml"), *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)


async def _fetch(client: mcp.Client) -> tuple[str, dict[str, object], bool, str]:
    """(description, inputSchema, whether a call failed, the call's text) of mcp__rug__fetch, once listed
    (`serve` answers its first list at once, maybe before the server is up: `list_changed` follows)."""

    async def listed() -> types.Tool | None:
        return next((t for t in (await client.list_tools()).tools if t.name == "mcp__rug__fetch"), None)

    with deadline(30):
        while not (tool := await listed()):  # noqa: ASYNC110 - bounded poll of a list
            await anyio.sleep(0.1)
    result = await client.call_tool("mcp__rug__fetch", {"url": "x"})
    return tool.description or "", tool.input_schema, result.is_error, result.content[0].text  # type: ignore[union-attr]


async def _until_listed(client: mcp.Client, starts_with_prefix: bool) -> str:
    with deadline(30):
        while True:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "mcp__rug__fetch")
            if (tool.description or "").startswith(PREFIX) == starts_with_prefix:
                return tool.description or ""
            await anyio.sleep(0.1)


async def test_a_definition_changed_across_a_restart_is_held_until_accepted(tmp_path: Path) -> None:
    config = _config(tmp_path)
    hub = start_hub(tmp_path, "--config", str(config))
    try:
        async with hub_client(hub.url, hub.token) as client:
            description, _, failed, _ = await _fetch(client)
            assert description == "Fetch a URL." and not failed
    finally:
        assert hub.stop() == 0
    pins = tmp_path / "home" / "state" / "pins" / "rug.json"
    assert "fetch" in json.loads(pins.read_text())["tools"]
    (tmp_path / "variant").write_text("2")  # the server changes behind the user's back
    hub = start_hub(tmp_path, "--config", str(config))
    try:
        async with hub_client(hub.url, hub.token) as client:
            description, schema, failed, text = await _fetch(client)
            assert description.startswith(PREFIX) and "id_rsa" in description
            assert failed and PREFIX in text and "fetch ran" not in text
            assert "key" in schema.get("properties", {})  # type: ignore[operator]
            listed = _cli(tmp_path)
            assert listed.returncode == 0, listed.stderr
            assert any("mcp__rug__fetch" in line and "changed" in line for line in listed.stdout.splitlines())
            as_json = json.loads(_cli(tmp_path, "--json").stdout)
            assert as_json["servers"]["rug"]["changed"] == ["mcp__rug__fetch"]
            accepted = _cli(tmp_path, "--accept", "rug.fetch")
            assert accepted.returncode == 0 and accepted.stdout.strip() == "accepted rug.fetch", accepted
            # The running hub serves it again at its next list or call.
            description = await _until_listed(client, starts_with_prefix=False)
            assert "id_rsa" in description
            result = await client.call_tool("mcp__rug__fetch", {"url": "x"})
            assert not result.is_error and result.content[0].text == "fetch ran"  # type: ignore[union-attr]
    finally:
        assert hub.stop() == 0
    # Accepted for good: a restart keeps the new pin.
    hub = start_hub(tmp_path, "--config", str(config))
    try:
        async with hub_client(hub.url, hub.token) as client:
            description, _, failed, _ = await _fetch(client)
            assert not description.startswith(PREFIX) and not failed
    finally:
        hub.stop()


async def test_a_definition_changed_with_list_changed_is_held_until_accepted(tmp_path: Path) -> None:
    hub = start_hub(tmp_path, "--config", str(_config(tmp_path)))
    try:
        async with hub_client(hub.url, hub.token) as client:
            assert not (await _fetch(client))[2]
            assert not (await client.call_tool("mcp__rug__flip", {})).is_error
            await _until_listed(client, starts_with_prefix=True)
            result = await client.call_tool("mcp__rug__fetch", {"url": "x", "key": "k"})
            assert result.is_error and PREFIX in result.content[0].text  # type: ignore[union-attr]
            flip = next(t for t in (await client.list_tools()).tools if t.name == "mcp__rug__flip")
            assert not (flip.description or "").startswith("[changed")  # the unchanged tool is served
            accepted = _cli(tmp_path, "--accept", "rug")
            assert accepted.returncode == 0 and "accepted rug.fetch" in accepted.stdout, accepted
            await _until_listed(client, starts_with_prefix=False)
            assert not (await client.call_tool("mcp__rug__fetch", {"url": "x"})).is_error
    finally:
        hub.stop()


async def test_pin_false_opts_a_server_out(tmp_path: Path) -> None:
    hub = start_hub(tmp_path, "--config", str(_config(tmp_path, pin=False)))
    try:
        async with hub_client(hub.url, hub.token) as client:
            assert not (await _fetch(client))[2]
            await client.call_tool("mcp__rug__flip", {})
            with deadline(30):
                while "id_rsa" not in (description := (await _fetch(client))[0]):  # noqa: ASYNC110 - bounded poll of a list
                    await anyio.sleep(0.1)
            assert not description.startswith("[changed") and not (await _fetch(client))[2]
    finally:
        hub.stop()
    assert not (tmp_path / "home" / "state" / "pins" / "rug.json").exists()
    refused = _cli(tmp_path, "--accept", "rug")
    assert refused.returncode == 2 and "pin = false" in refused.stderr


def test_accepting_an_unknown_server_or_tool_is_a_usage_error(tmp_path: Path) -> None:
    _config(tmp_path)
    unknown = _cli(tmp_path, "--accept", "nosuch")
    assert unknown.returncode == 2 and "no server 'nosuch'" in unknown.stderr
    no_tool = _cli(tmp_path, "--accept", "rug.nosuch")
    assert no_tool.returncode == 2 and "offers no tool 'nosuch'" in no_tool.stderr


async def test_a_held_tool_is_refused_over_stdio_too(tmp_path: Path) -> None:
    """The stdio relay (fastpath/) declines a held tool, so the SDK path refuses it."""
    config = _config(tmp_path)
    (tmp_path / "ws").mkdir()
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config), "--workspace", str(tmp_path / "ws")],
        env={"OMEGA_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")},
        cwd=tmp_path,
    )
    async with mcp.Client(params, mode="legacy") as client:
        assert not (await _fetch(client))[2]
    (tmp_path / "variant").write_text("2")
    async with mcp.Client(params, mode="legacy") as client:
        description, _, failed, text = await _fetch(client)
        assert description.startswith(PREFIX) and failed and PREFIX in text
        for _ in range(3):  # the relay takes repeated calls of known tools: never this one
            again = await client.call_tool("mcp__rug__fetch", {"url": "y"})
            assert again.is_error and PREFIX in again.content[0].text  # type: ignore[union-attr]
