"""Clients of one hub are apart by construction: each has its own tree `$OMEGA_HOME/clients/<client>/`.

A real `serve --http` with two clients, alice and bob, each with a token and a workspace of its own
in sandbox mode. bob's bash fills its caches (`XDG_CACHE_HOME`, where pip and npm keep theirs);
alice must neither read bob's cache entry nor plant a program where bob's bash would run it, by bash
or by the file tools. Before the trees, both caches were `$OMEGA_HOME/scratch/cache`: alice read the
entry and the planted program ran in bob's sandbox. The control: each client uses its own cache.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hub_support import Hub, configured_hub, hub_client

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef0123"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with configured_hub(
        tmp_path_factory.mktemp("trees"),
        (
            '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\nworkspace = "alice"\nmode = "sandbox"\n'
            '[hub.clients.bob]\ntoken = "${BOB_TOKEN}"\nworkspace = "bob"\nmode = "sandbox"\n'
        ),
        env={"ALICE_TOKEN": ALICE, "BOB_TOKEN": BOB},
    ) as hub:
        yield hub


def _text(result: object) -> str:
    return result.content[0].text  # type: ignore[attr-defined]


async def _bash(hub: Hub, token: str, command: str) -> tuple[bool, str]:
    async with hub_client(hub.url, token) as client:
        result = await client.call_tool("bash", {"command": command})
        return result.is_error, _text(result)


async def _cache_of(hub: Hub, token: str, secret: str) -> Path:
    """The client's XDG_CACHE_HOME, with `secret` in a pip cache entry and a program there its bash runs."""
    command = (
        f'mkdir -p "$XDG_CACHE_HOME/pip" && echo {secret} > "$XDG_CACHE_HOME/pip/entry" && '
        'printf "#!/bin/sh\\necho own-tool\\n" > "$XDG_CACHE_HOME/tool.sh" && echo "$XDG_CACHE_HOME"'
    )
    failed, out = await _bash(hub, token, command)
    assert not failed, out
    return Path(out.strip().splitlines()[-1])


async def test_each_client_has_its_own_cache_and_scratch(hub: Hub) -> None:
    alice_cache = await _cache_of(hub, ALICE, "alice-entry")
    bob_cache = await _cache_of(hub, BOB, "bob-entry")
    assert alice_cache != bob_cache
    assert alice_cache.is_relative_to(hub.home / "clients" / "alice")
    assert bob_cache.is_relative_to(hub.home / "clients" / "bob")
    # The control: each reads its own entry and runs its own program.
    for token, secret in ((ALICE, "alice-entry"), (BOB, "bob-entry")):
        failed, out = await _bash(hub, token, 'cat "$XDG_CACHE_HOME/pip/entry"; sh "$XDG_CACHE_HOME/tool.sh"')
        assert not failed and out.split() == [secret, "own-tool"], out


async def test_a_client_cannot_read_another_clients_cache(hub: Hub) -> None:
    bob_cache = await _cache_of(hub, BOB, "bob-entry")
    bob_tree = hub.home / "clients" / "bob"
    _, out = await _bash(hub, ALICE, f"cat {bob_cache}/pip/entry; echo listed: $(ls -A {bob_tree})")
    assert "bob-entry" not in out and out.split("listed:")[1].strip() == "", out
    async with hub_client(hub.url, ALICE) as alice:
        read = await alice.call_tool("read", {"file_path": str(bob_cache / "pip" / "entry")})
        assert read.is_error and "bob-entry" not in _text(read)
        assert "another client" in _text(read), _text(read)


async def test_a_client_cannot_plant_a_program_in_another_clients_tree(hub: Hub) -> None:
    bob_cache = await _cache_of(hub, BOB, "bob-entry")
    planted = 'printf "#!/bin/sh\\necho planted-by-alice\\n"'
    await _bash(hub, ALICE, f"{planted} > {bob_cache}/tool.sh; mkdir -p {bob_cache}/npm; {planted} > {bob_cache}/npm/x")
    async with hub_client(hub.url, ALICE) as alice:
        written = await alice.call_tool(
            "write", {"file_path": str(bob_cache / "tool.sh"), "content": "#!/bin/sh\necho planted-by-alice\n"}
        )
        assert written.is_error and "denied" in _text(written)
        assert "another client" in _text(written), _text(written)
    failed, out = await _bash(hub, BOB, 'sh "$XDG_CACHE_HOME/tool.sh"; ls "$XDG_CACHE_HOME"')
    assert not failed and "planted-by-alice" not in out and "own-tool" in out, out
    assert not (bob_cache / "npm" / "x").exists()


async def test_a_client_touching_another_clients_workspace_is_told_so(hub: Hub) -> None:
    bob_ws = hub.home.parent / "bob"
    async with hub_client(hub.url, ALICE) as alice:
        written = await alice.call_tool("write", {"file_path": str(bob_ws / "x.txt"), "content": "x"})
        assert written.is_error and "another client's workspace" in _text(written), _text(written)
        assert "omega's own configuration" not in _text(written)
        read = await alice.call_tool("read", {"file_path": str(bob_ws / "anything.txt")})
        assert read.is_error and "another client's workspace" in _text(read), _text(read)


async def test_the_file_tools_write_only_their_own_clients_corner_of_omega_home(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE) as alice:
        own_tree = hub.home / "clients" / "alice"
        own = await alice.call_tool("write", {"file_path": str(own_tree / "n.txt"), "content": "a"})
        assert not own.is_error, _text(own)
        # (the hub's home lies under /tmp here: a write there lands in alice's private /tmp, if anywhere)
        await alice.call_tool("write", {"file_path": str(hub.home / "logs" / "n.txt"), "content": "a"})
    assert (hub.home / "clients" / "alice" / "n.txt").read_text() == "a"
    assert not (hub.home / "logs" / "n.txt").exists()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_each_client_is_told_its_own_workspace_and_tree(hub: Hub, mode: str) -> None:
    for name, token in (("alice", ALICE), ("bob", BOB)):
        async with hub_client(hub.url, token, mode=mode) as client:
            text = client.instructions or ""
        other, config_dir = "bob" if name == "alice" else "alice", hub.home.parent
        assert f"workspace {config_dir / name}." in text and f"{hub.home / 'clients' / name}/scratch" in text, text
        assert f"{config_dir / other}," not in text and "clients/@hub" not in text and f"clients/{other}" not in text
