"""A server a client's profile hides is, to that client, unknown even while it is down.

The tools of a server that is down are not in the namespace, so a call of one answers with the
server's down-reason: to a client whose profile does not allow that name, that reason would tell it
the server exists. Through a real hub over HTTP (the token's profile), in both eras: server `alpha`
is up (tests/fixtures/offers_server.py), server `gone` exits at once. Client `alice` may use only
alpha's tools and `read`; `dave` may use everything (the control: he gets gone's down-reason).
Directly, through search mode's `call_tool`, as a task-augmented call, and for gone's prompts and
resources, alice gets exactly the error of an unknown name, its hints naming only tools she may call;
so she does for an app-only tool of server `app` (tests/fixtures/app_server.py), which she may not use,
through `call_tool` (whose refusal of an app-only tool would name it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from hub_support import Hub, hub_client, start_hub

OFFERS = Path(__file__).parent.parent / "fixtures" / "offers_server.py"
APPS = Path(__file__).parent.parent / "fixtures" / "app_server.py"
ALICE = "alice-token-0123456789abcdef"
DAVE = "dave-token-0123456789abcdef01"
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    tmp = tmp_path_factory.mktemp("hidden-down")
    config = tmp / "omega.toml"
    config.write_text(
        '[hub]\ntool_search = "on"\n'
        f"[servers.alpha]\ncommand = {sys.executable!r}\nargs = [{str(OFFERS)!r}, 'alpha']\n"
        f"[servers.app]\ncommand = {sys.executable!r}\nargs = [{str(APPS)!r}, 'app']\n"
        f"[servers.gone]\ncommand = {sys.executable!r}\nargs = ['-c', 'raise SystemExit(3)']\n"
        '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\ntools = ["read", "mcp__alpha__*"]\n'
        '[hub.clients.dave]\ntoken = "${DAVE_TOKEN}"\n'
    )
    hub = start_hub(tmp, "--config", str(config), env={"ALICE_TOKEN": ALICE, "DAVE_TOKEN": DAVE})
    try:
        yield hub
    finally:
        hub.stop()


async def _error(call: object) -> str:
    with pytest.raises(MCPError) as raised:
        await call  # type: ignore[misc]
    return f"{raised.value.error.code} {raised.value.error.message}"


def _text(result: Any) -> str:
    return result.content[0].text


@MODES
async def test_a_hidden_servers_tool_answers_as_an_unknown_one_while_the_server_is_down(hub: Hub, mode: str) -> None:
    async with hub_client(hub.url, ALICE, mode=mode) as alice, hub_client(hub.url, DAVE, mode=mode) as dave:
        # The control: a client allowed the server is told why it cannot be called.
        down = await dave.call_tool("mcp__gone__ping", {})
        assert down.is_error and "server gone is down" in _text(down), down
        hidden = await _error(alice.call_tool("mcp__gone__ping", {}))
        unknown = await _error(alice.call_tool("mcp__nosuch__ping", {}))
        assert hidden == unknown.replace("mcp__nosuch__ping", "mcp__gone__ping"), (hidden, unknown)
        assert "Unknown tool" in hidden and "gone" not in hidden.replace("mcp__gone__ping", ""), hidden
        assert "Did you mean" not in hidden or "mcp__alpha__" in hidden  # hints name only tools she may call
        aliased = await _error(alice.call_tool("gone.ping", {}))  # the alias form names the server too
        assert aliased == (await _error(alice.call_tool("nosuch.ping", {}))).replace("nosuch.ping", "gone.ping")


@MODES
async def test_through_call_tool_a_hidden_down_servers_tool_is_unknown_too(hub: Hub, mode: str) -> None:
    async with hub_client(hub.url, ALICE, mode=mode) as alice, hub_client(hub.url, DAVE, mode=mode) as dave:
        down = await dave.call_tool("call_tool", {"name": "mcp__gone__ping", "arguments": {}})
        assert down.is_error and "server gone is down" in _text(down), down
        hidden = await _error(alice.call_tool("call_tool", {"name": "mcp__gone__ping", "arguments": {}}))
        unknown = await _error(alice.call_tool("call_tool", {"name": "mcp__nosuch__ping", "arguments": {}}))
        assert hidden == unknown.replace("mcp__nosuch__ping", "mcp__gone__ping"), (hidden, unknown)


async def test_a_task_augmented_call_of_a_hidden_down_servers_tool_is_unknown_too(hub: Hub) -> None:
    async def task_call(c: Any, name: str) -> str:
        params = {"name": name, "arguments": {}, "task": {"ttl": 60000}}
        return await _error(c.session._dispatcher.send_raw_request("tools/call", params, {}))

    async with hub_client(hub.url, ALICE) as alice, hub_client(hub.url, DAVE) as dave:
        assert "server gone is down" in await task_call(dave, "mcp__gone__ping")
        hidden, unknown = await task_call(alice, "mcp__gone__ping"), await task_call(alice, "mcp__nosuch__ping")
        assert hidden == unknown.replace("mcp__nosuch__ping", "mcp__gone__ping"), (hidden, unknown)


@MODES
async def test_a_hidden_down_servers_prompts_and_resources_are_unknown_too(hub: Hub, mode: str) -> None:
    async with hub_client(hub.url, ALICE, mode=mode) as alice:
        assert await _error(alice.get_prompt("gone__brief")) == (
            await _error(alice.get_prompt("nosuch__brief"))
        ).replace("nosuch", "gone")
        hidden = await _error(alice.read_resource("res://gone/secret"))
        assert hidden == (await _error(alice.read_resource("res://nosuch/secret"))).replace("nosuch", "gone")
        listed = json.dumps([p.name for p in (await alice.list_prompts()).prompts])
        assert "gone" not in listed


async def test_through_call_tool_a_hidden_app_only_tool_is_unknown_not_refused(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE) as alice, hub_client(hub.url, DAVE) as dave:
        refused = await dave.call_tool("call_tool", {"name": "mcp__app__refresh", "arguments": {}})
        assert refused.is_error and "app's interface only" in _text(refused)  # the control
        hidden = await _error(alice.call_tool("call_tool", {"name": "mcp__app__refresh", "arguments": {}}))
        assert hidden.startswith("-32602 Unknown tool: 'mcp__app__refresh'"), hidden
        hints = hidden.partition("Did you mean: ")[2].rstrip("?").split(", ") if "Did you mean" in hidden else []
        assert all(h == "read" or h.startswith("mcp__alpha__") for h in hints), hidden  # only tools she may call
