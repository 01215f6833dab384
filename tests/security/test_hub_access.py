"""Who can drive the HTTP hub: only a client with its token, whoever and wherever it is.

A hub on loopback is reachable by every local account and by every confined server given the
network; without a token any of them would run bash as the hub's user. And a flood of half-open
connections must not keep a client with the token from being served.
"""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest

from hub_support import HEADERS, INITIALIZE, Hub, hub_client, start_hub
from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

HOSTILE = Path(__file__).parents[1] / "fixtures" / "hostile_server.py"
OTHER_USER = "omega-sbx-test"  # the unprivileged account tests/security/test_unprivileged.py uses
_CLIENT = """
import json, sys, urllib.request, urllib.error
port, body = int(sys.argv[1]), sys.argv[2].encode()
url, headers = f"http://127.0.0.1:{port}/mcp", json.loads(sys.argv[3])
request = urllib.request.Request(url, data=body, method="POST", headers=headers)
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        print(response.status, response.read(200))
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = start_hub(tmp_path)  # no OMEGA_TOKEN: the default setup, as a user runs it
    yield hub
    hub.stop()


def _other_account() -> pwd.struct_passwd | None:
    """An unprivileged account to run the client as (created when we are root), or None: we are one."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(OTHER_USER)
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed: cannot create an unprivileged user")
    made = subprocess.run(["useradd", "--create-home", OTHER_USER], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot create an unprivileged user: {made.stderr.strip()}")
    return pwd.getpwnam(OTHER_USER)


def test_another_local_account_without_the_token_is_refused(hub: Hub):
    user = _other_account()
    python = sys.executable
    argv = ["python", "-I", "-c", _CLIENT, str(hub.port), json.dumps(INITIALIZE), json.dumps(HEADERS)]
    options: dict[str, object] = {}
    if user is not None:
        python = shutil.which("python3", path="/usr/bin:/bin") or ""
        if not python:
            pytest.skip("no python3 in /usr/bin or /bin for the other account to run")
        env = {"HOME": user.pw_dir, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        options = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "env": env, "cwd": "/"}
    argv[0] = python
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, **options)  # type: ignore[call-overload]
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "401", done.stdout
    # The same request with the token works: the refusal is about the token, not the account.
    ok = httpx2.post(hub.url, json=INITIALIZE, headers={**HEADERS, **hub.auth()})
    assert ok.status_code == 200


def test_token_less_and_wrong_token_requests_are_refused_on_loopback(hub: Hub):
    assert hub.token and (hub.home / "token").stat().st_mode & 0o777 == 0o600
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": hub.token}, hub.auth(hub.token[:-1])):
        response = httpx2.post(hub.url, json=INITIALIZE, headers={**HEADERS, **headers})
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert httpx2.get(f"http://127.0.0.1:{hub.port}/metrics").status_code == 401
    assert hub.token not in hub.log.read_text()


async def test_a_confined_server_with_the_network_cannot_drive_the_hub(tmp_path: Path):
    config = tmp_path / "servers.toml"
    config.write_text(
        '[sandbox]\nservers = "confined"\n[servers.net]\ncommand = "${OMEGA_PYTHON}"\n'
        f"args = [{json.dumps(str(HOSTILE))}]\nsandbox = {{ network = true }}\n"
    )
    hub = start_hub(tmp_path, "--config", str(config))
    try:
        async with hub_client(hub.url, hub.token) as client:
            with deadline(60):
                result = await client.call_tool("mcp__net__attempt", {"action": "http", "port": hub.port})
            text = result.content[0].text  # type: ignore[union-attr]
            assert text.startswith("allowed: http HTTP/1.1 "), text  # it reached the hub: the network is granted
            assert text.split()[3] == "401", text
            stolen = await client.call_tool("mcp__net__attempt", {"action": "read", "target": str(hub.home / "token")})
            assert stolen.content[0].text.startswith("denied: "), stolen  # type: ignore[union-attr]
    finally:
        assert hub.stop() == 0


def _ordinary_user_limits() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


async def test_a_half_open_flood_does_not_starve_a_client_with_the_token(tmp_path: Path):
    hub = start_hub(tmp_path, preexec_fn=_ordinary_user_limits)
    flood: list[socket.socket] = []
    try:
        partial = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{hub.port}\r\nContent-Type: appl".encode()
        for i in range(1100):  # connected; nothing, or half a request head, sent
            sock = socket.socket()
            sock.setblocking(False)
            try:
                sock.connect(("127.0.0.1", hub.port))
            except BlockingIOError:
                pass
            flood.append(sock)
            if i % 2:
                try:
                    sock.send(partial)
                except OSError:
                    pass  # not connected yet, or already dropped: either way it holds nothing more
        with deadline(30):  # bounded: a starved client would wait forever
            async with hub_client(hub.url, hub.token) as client:
                result = await client.call_tool("bash", {"command": "echo served"})
        assert result.content[0].text.strip() == "served"  # type: ignore[union-attr]
        assert hub.proc.poll() is None
    finally:
        for sock in flood:
            sock.close()
        assert hub.stop() == 0


async def test_one_session_cannot_take_every_background_shell_and_shells_die_at_their_lifetime(tmp_path: Path):
    config = tmp_path / "servers.toml"
    config.write_text("[sandbox]\nshell_lifetime = 2\n")
    hub = start_hub(tmp_path, "--config", str(config))
    try:
        async with hub_client(hub.url, hub.token) as greedy, hub_client(hub.url, hub.token) as other:
            taken: list[str] = []
            with deadline(120):
                for _ in range(20):  # as many as it is given
                    started = await greedy.call_tool("bash", {"command": "sleep 1000", "run_in_background": True})
                    text = started.content[0].text  # type: ignore[union-attr]
                    if started.is_error:
                        assert "Too many background shells" in text, text
                        break
                    taken.append(text.split()[3].rstrip("."))
                mine = await other.call_tool("bash", {"command": "sleep 1000", "run_in_background": True})
                assert not mine.is_error, mine.content  # the other session still gets a shell
                assert len(taken) == 8, taken
                status = ""
                while "shell_lifetime" not in status:  # the lifetime ends every shell, unpolled or not
                    await anyio.sleep(0.2)
                    polled = await greedy.call_tool("bash_output", {"shell_id": taken[0]})
                    status = polled.content[0].text  # type: ignore[union-attr]
                assert status.endswith("[killed after 2 s, its [sandbox] shell_lifetime; the process tree was killed]")
    finally:
        assert hub.stop() == 0
