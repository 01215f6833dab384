"""A `share = "session"` server keeps its state per session: its own directory in the client's tree.

A real hub with a file-backed fixture (tests/fixtures/memo_server.py, like server-memory) whose file
is `MEMO_FILE = "${OMEGA_SESSION_DIR}/memo.txt"`: two sessions of one client each read back only what
they wrote, each process runs in its own directory under `$OMEGA_HOME/clients/<client>/sessions/`,
and the directory goes when its session ends. Before, every process shared one file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hub_support import Hub, configured_hub, hub_client
from waits import deadline

MEMO = Path(__file__).parent.parent / "fixtures" / "memo_server.py"
ALICE = "alice-token-0123456789abcdef"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with configured_hub(
        tmp_path_factory.mktemp("sessiondirs"),
        (
            f'[servers.memo]\ncommand = {sys.executable!r}\nargs = [{str(MEMO)!r}]\nshare = "session"\n'
            'env = { MEMO_FILE = "${OMEGA_SESSION_DIR}/memo.txt" }\n'
            '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\n'
        ),
        env={"ALICE_TOKEN": ALICE},
    ) as hub:
        yield hub


def _text(result: object) -> str:
    return result.content[0].text  # type: ignore[attr-defined]


async def test_two_sessions_of_a_file_backed_server_keep_their_own_files(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE) as first, hub_client(hub.url, ALICE) as second:
        assert _text(await first.call_tool("mcp__memo__remember", {"text": "first's secret"})) == "ok"
        assert _text(await second.call_tool("mcp__memo__remember", {"text": "second's note"})) == "ok"
        one = json.loads(_text(await first.call_tool("mcp__memo__recall", {})))
        two = json.loads(_text(await second.call_tool("mcp__memo__recall", {})))
    assert one["lines"] == ["first's secret"] and two["lines"] == ["second's note"]
    sessions = hub.home / "clients" / "alice" / "sessions"
    assert one["cwd"] != two["cwd"]
    for seen in (one, two):
        assert Path(seen["cwd"]).parent == sessions
        assert seen["file"] == str(Path(seen["cwd"]) / "memo.txt")
    with deadline(15):  # the session's end removes its directory
        while await anyio.Path(one["cwd"]).exists() or await anyio.Path(two["cwd"]).exists():  # noqa: ASYNC110
            await anyio.sleep(0.1)


async def test_the_hubs_own_token_gets_its_own_clients_tree(hub: Hub) -> None:
    async with hub_client(hub.url, hub.token) as own:
        await own.call_tool("mcp__memo__remember", {"text": "hub"})
        seen = json.loads(_text(await own.call_tool("mcp__memo__recall", {})))
    assert seen["lines"] == ["hub"] and Path(seen["cwd"]).parent == hub.home / "clients" / "@hub" / "sessions"


async def test_the_file_tools_cannot_write_a_session_directory(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE) as alice:
        seen = json.loads(_text(await alice.call_tool("mcp__memo__recall", {})))
        planted = await alice.call_tool("write", {"file_path": str(Path(seen["cwd"]) / "memo.txt"), "content": "x"})
        assert planted.is_error and "denied" in _text(planted)
