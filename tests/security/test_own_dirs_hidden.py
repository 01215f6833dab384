"""`$OMEGA_HOME/state` and `$OMEGA_HOME/run` are hidden always, also when they appear after a sandbox started.

The README's flow: `serve` runs (bash and a confined server already started), then `omega-mcp login
SERVER` saves an OAuth token under `state/oauth`, and the shared hub puts its UNIX socket under `run`.
Neither existed when the sandboxes started; both must be out of reach of what is already running.
The control: the same confined server still does what needs no store (writes its own directory).
Everything lives under /var/tmp: bash and confined servers have a private /tmp.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mcp
import pytest
from mcp import StdioServerParameters

from omega_mcp.sandbox import probe
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox
from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux-only")

HOSTILE = Path(__file__).parents[1] / "fixtures" / "hostile_server.py"
_TOKEN = "ACCESS-TOKEN-77ab"
_BOUND_SECONDS = 20.0


@pytest.fixture
def base() -> Iterator[Path]:
    if not os.path.isdir("/var/tmp"):
        pytest.skip("needs /var/tmp: a directory outside /tmp")
    made = Path(tempfile.mkdtemp(prefix="omega-owndirs-", dir="/var/tmp"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _appear_later(home: Path) -> socket.socket:
    """What `omega-mcp login` and the shared hub make while omega runs: a token and a listening socket."""
    (home / "state" / "oauth").mkdir(parents=True, exist_ok=True)
    (home / "state" / "oauth" / "remote.json").write_text(json.dumps({"access_token": _TOKEN}))
    (home / "run").mkdir(exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(home / "run" / "hub.sock"))
    listener.listen(4)
    return listener


def _text(result: object) -> str:
    return "".join(getattr(block, "text", "") for block in getattr(result, "content", []))


async def test_bash_cannot_read_list_or_connect_under_state_and_run_made_after_it_started(base: Path) -> None:
    if not probe.support().pid_namespace:
        pytest.skip("needs user namespaces: the cover is a mount in bash's namespace")
    home, ws = base / "home", base / "ws"
    ws.mkdir()
    policy = SandboxPolicy(mode="sandbox", home=home, workspace=ws, tmp_dir=Path("/tmp"))
    connect = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(home / 'run' / 'hub.sock')!r})"
    script = (
        f"cat {home}/state/oauth/remote.json; echo; ls -A {home}/state {home}/run; echo listed; "
        f"{sys.executable} -I -c {json.dumps(connect)} && echo CONNECTED"
    )
    async with Toolbox(policy) as box:
        with deadline(60):
            first = await box.call_tool("bash", {"command": "echo started"})
            assert "started" in _text(first), _text(first)
            listener = _appear_later(home)
            try:
                later = _text(await box.call_tool("bash", {"command": script}))
            finally:
                listener.close()
    lines = later.splitlines()
    assert "listed" in lines, later
    assert _TOKEN not in later and "oauth" not in lines, later  # not read, not listed
    assert "hub.sock" not in lines and "CONNECTED" not in lines, later


@pytest.mark.e2e
async def test_a_confined_server_cannot_read_a_token_saved_after_it_started(base: Path) -> None:
    home, fake_home = base / "omega", base / "home"
    fake_home.mkdir()
    config = base / "servers.toml"
    config.write_text(
        f'[sandbox]\nservers = "confined"\n[servers.h]\ncommand = "${{OMEGA_PYTHON}}"\nargs = ["{HOSTILE}"]\n'
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "error"],
        env={**os.environ, "OMEGA_HOME": str(home), "HOME": str(fake_home)},
        cwd=base,
    )

    async def attempt(client: mcp.Client, action: str, target: Path) -> str:
        with deadline(_BOUND_SECONDS):
            result = await client.call_tool("mcp__h__attempt", {"action": action, "target": str(target)})
        return _text(result)

    async with mcp.Client(params, mode="legacy") as client:
        own = Path((await attempt(client, "cwd", base)).removeprefix("allowed: "))
        assert own == home / "servers" / "h"
        listener = _appear_later(home)
        try:
            token = await attempt(client, "read", home / "state" / "oauth" / "remote.json")
            listing = await attempt(client, "list", home / "state")
            sock = await attempt(client, "unix", home / "run" / "hub.sock")
            control = await attempt(client, "write", own / "memory.json")  # what needs no store still works
        finally:
            listener.close()
    assert _TOKEN not in token, token
    assert "oauth" not in listing, listing
    assert sock.startswith("denied"), sock
    assert control.startswith("allowed"), control
    assert (own / "memory.json").read_text() == "planted"
