"""`[hub.clients.NAME]` profiles and `share = "session"` servers, through a real hub over HTTP.

One hub (a subprocess, as users run it) with two clients: alice (allow globs, her own workspace in
sandbox mode) and bob (deny globs, his own workspace in rx mode; the hub itself runs in rwx, which
confines nothing, so another client's workspace is private only to a client in sandbox or rx
mode). A stdlib echo server is shared; a second copy has `share = "session"`, so its `pid` tool
tells which process answered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import MCPError

from hub_support import HEADERS, INITIALIZE, Hub, hub_client, start_hub
from unprivileged_support import unprivileged
from waits import until

ECHO = Path(__file__).parent.parent / "fixtures" / "echo_server.py"
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef0123"


@pytest.fixture(scope="module", params=["as-root", "unprivileged"])
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """The hub as the test runs (root here), and as an unprivileged user (the guarantees must not
    lean on root): then in a /tmp directory that user owns, since pytest's tmp_path is root's."""
    preexec: Callable[[], None] | None = None
    env = {"ALICE_TOKEN": ALICE, "BOB_TOKEN": BOB}
    if request.param == "unprivileged":
        user = unprivileged()
        if user is None:
            pytest.skip("the suite already runs unprivileged: the first variant is this one")
        tmp = Path("/tmp") / f"omega-profiles-{uuid.uuid4().hex[:12]}"
        (tmp / "ws").mkdir(parents=True)
        for path in (tmp, tmp / "ws"):
            os.chown(path, user.pw_uid, user.pw_gid)
        uid, gid = user.pw_uid, user.pw_gid
        env["HOME"] = str(tmp)

        def become_user() -> None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

        preexec = become_user

        probe = subprocess.run(
            [sys.executable, "-c", "import omega_mcp"], capture_output=True, preexec_fn=preexec, check=False
        )
        if probe.returncode != 0:
            pytest.skip(f"this checkout is not readable by other users: {probe.stderr.decode()[-200:]}")
    else:
        tmp = tmp_path_factory.mktemp("profiles")
    config = tmp / "omega.toml"
    config.write_text(
        f"""
[servers.echo]
command = {str(sys.executable)!r}
args = [{str(ECHO)!r}]

[servers.own]
command = {str(sys.executable)!r}
args = [{str(ECHO)!r}]
share = "session"

[hub.clients.alice]
token = "${{ALICE_TOKEN}}"
tools = ["bash", "read", "write", "mcp__echo__*", "mcp__own__pid"]
workspace = "alice"
mode = "sandbox"

[hub.clients.bob]
token = "${{BOB_TOKEN}}"
exclude_tools = ["bash", "mcp__own__*"]
workspace = "bob"
mode = "rx"
"""
    )
    hub = start_hub(tmp, "--config", str(config), env=env, preexec_fn=preexec)
    try:
        yield hub
    finally:
        hub.stop()
        log = hub.log.read_text()
        if request.param == "unprivileged":
            shutil.rmtree(tmp, ignore_errors=True)
        assert ALICE not in log and BOB not in log, "a client token reached the log"


def _text(result: object) -> str:
    return result.content[0].text  # type: ignore[attr-defined]


async def _names(hub: Hub, token: str) -> set[str]:
    async with hub_client(hub.url, token) as client:
        return {t.name for t in (await client.list_tools()).tools}


async def test_each_client_sees_only_its_tools(hub: Hub) -> None:
    alice, bob, everyone = await _names(hub, ALICE), await _names(hub, BOB), await _names(hub, hub.token)
    assert alice == {"bash", "read", "write", "mcp__own__pid"} | {n for n in everyone if n.startswith("mcp__echo__")}
    assert "bash" not in bob and "edit" in bob and not any(n.startswith("mcp__own__") for n in bob)
    assert {"bash", "edit", "mcp__own__pid", "mcp__echo__echo"} <= everyone


async def test_a_tool_outside_the_profile_is_unknown_to_that_client(hub: Hub) -> None:
    async with hub_client(hub.url, BOB) as bob:
        with pytest.raises(MCPError) as refused:
            await bob.call_tool("bash", {"command": "echo hi"})
        assert "bash" in str(refused.value) and "unknown" in str(refused.value).lower()
    async with hub_client(hub.url, ALICE) as alice:
        with pytest.raises(MCPError):
            await alice.call_tool("edit", {"file_path": "x", "old_string": "a", "new_string": "b"})
        with pytest.raises(MCPError):
            await alice.call_tool("mcp__own__echo", {"text": "x"})


async def test_each_client_works_in_its_own_workspace(hub: Hub) -> None:
    root = hub.home.parent
    async with hub_client(hub.url, ALICE) as alice:
        await alice.call_tool("write", {"file_path": "note.txt", "content": "from alice"})
        ran = await alice.call_tool("bash", {"command": "pwd; echo bash > by-bash.txt"})
        assert not ran.is_error, _text(ran)
        assert _text(ran).splitlines()[0] == str(root / "alice")
        denied = await alice.call_tool("write", {"file_path": str(root / "bob" / "planted.txt"), "content": "x"})
        assert denied.is_error and "denied" in _text(denied)
        hub_ws = await alice.call_tool("bash", {"command": f"echo x > {root / 'ws' / 'planted.txt'}"})
        assert hub_ws.is_error
    async with hub_client(hub.url, BOB) as bob:
        await bob.call_tool("write", {"file_path": "note.txt", "content": "from bob"})
        peek = await bob.call_tool("read", {"file_path": str(root / "alice" / "note.txt")})
        assert peek.is_error and "from alice" not in _text(peek)
    assert (root / "alice" / "note.txt").read_text() == "from alice"
    assert (root / "alice" / "by-bash.txt").read_text() == "bash\n"
    assert (root / "bob" / "note.txt").read_text() == "from bob"
    assert not (root / "bob" / "planted.txt").exists() and not (root / "ws" / "planted.txt").exists()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except FileNotFoundError:  # reaped between the two looks
        return True


async def test_a_session_server_has_one_process_per_session_gone_when_it_ends(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE) as first, hub_client(hub.url, ALICE) as second:
        one = int(_text(await first.call_tool("mcp__own__pid", {})))
        again = int(_text(await first.call_tool("mcp__own__pid", {})))
        two = int(_text(await second.call_tool("mcp__own__pid", {})))
        shared = {int(_text(await c.call_tool("mcp__echo__pid", {}))) for c in (first, second)}
        assert one == again and one != two
        assert len(shared) == 1 and one not in shared and two not in shared
    # Nothing signals another process's death: poll, bounded.
    await until(lambda: _gone(one) and _gone(two), "a session's server to end with its session", 15, interval=0.1)
    assert not _gone(shared.pop())


async def test_stateless_requests_of_one_client_share_its_session_server(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE, mode="auto") as modern:
        pids = {_text(await modern.call_tool("mcp__own__pid", {})) for _ in range(2)}
    async with hub_client(hub.url, ALICE, mode="auto") as later:
        pids.add(_text(await later.call_tool("mcp__own__pid", {})))
    assert len(pids) == 1


def test_a_client_cannot_use_another_clients_session(hub: Hub) -> None:
    opened = httpx2.post(hub.url, json=INITIALIZE, headers={**HEADERS, **hub.auth(ALICE)})
    session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert httpx2.post(hub.url, json=ping, headers={**HEADERS, **hub.auth(ALICE), **session}).status_code == 200
    assert httpx2.post(hub.url, json=ping, headers={**HEADERS, **hub.auth(BOB), **session}).status_code == 404


def test_a_clients_workspace_is_judged_like_the_hubs(tmp_path: Path) -> None:
    import argparse

    from omega_mcp.cli.trust import check_trust
    from omega_mcp.config import load_config
    from omega_mcp.errors import ConfigError

    config_file = tmp_path / "omega.toml"
    config_file.write_text('[hub.clients.eve]\ntoken = "${EVE_TOKEN}"\nworkspace = "/usr"\nmode = "sandbox"\n')
    env = {"EVE_TOKEN": "eve-token-0123456789abcdef", "OMEGA_HOME": str(tmp_path / "home")}
    config = load_config(config_file, environ=env)
    args = argparse.Namespace(workspace=str(tmp_path / "ws"), mode="sandbox", config=str(config_file))
    with pytest.raises(ConfigError) as refused:
        check_trust(config, args)
    assert "hub.clients.eve.workspace" in str(refused.value) and "/usr" in str(refused.value)
    config_file.write_text(config_file.read_text().replace('mode = "sandbox"', 'mode = "rwx"'))
    check_trust(load_config(config_file, environ=env), args)  # rwx: a warning, as for the hub's own
