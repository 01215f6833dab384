"""Early spawning: stdio servers start (and get `initialize`) before omega has loaded the SDK."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, get_default_environment
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from omega_mcp.config import load_config
from omega_mcp.proxy import spawn
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox
from proxy_support import ECHO_SERVER, alive, read_pid, wait_until


@pytest.fixture
def early() -> Iterator[spawn.EarlyStarts]:
    with spawn.EarlyStarts() as starts:
        yield starts


def _config(tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "servers.toml"
    argv = json.dumps([str(ECHO_SERVER), *args])
    path.write_text(f"[servers.fx]\ncommand = {json.dumps(sys.executable)}\nargs = {argv}\n")
    return path


def test_the_spawn_defaults_match_the_sdk():
    assert list(spawn.INHERITED_ENV) == list(DEFAULT_INHERITED_ENV_VARS)
    assert spawn.HANDSHAKE_VERSION == LATEST_HANDSHAKE_VERSION
    # The SDK's defaults, plus what Claude Code also passes (locale, time zone, proxies) and omega's marker.
    env = spawn.default_environment({"TZ": "UTC"})
    assert get_default_environment().items() <= env.items()
    assert env["TZ"] == "UTC"


async def test_a_prespawned_server_is_adopted_and_initialized_exactly_once(
    rwx_policy: SandboxPolicy, tmp_path: Path, early: spawn.EarlyStarts
):
    log = tmp_path / "received.jsonl"
    config = load_config(_config(tmp_path, "--log-file", str(log)))
    early.start(config.for_servers)
    async with (
        Downstreams.from_config(config.for_servers, early=early) as downstreams,
        Toolbox(rwx_policy, downstreams) as toolbox,
    ):
        result = await toolbox.call_tool("mcp__fx__echo", {"text": "early"})
        assert [s.state for s in downstreams.statuses()] == ["connected"]
    received = [json.loads(line) for line in log.read_text().splitlines()]
    # Asked its era before the SDK was loaded: the probe, then the handshake (this fixture speaks only that).
    asked = [(m.get("method"), m.get("id")) for m in received[:2]]
    assert asked == [("server/discover", spawn.EARLY_IDS["discover"]), ("initialize", spawn.EARLY_IDS["initialize"])]
    assert [m for m in received[2:] if m.get("method") in ("initialize", "server/discover")] == []
    assert "notifications/initialized" in [m.get("method") for m in received]
    assert result.structured_content == {"text": "early"}


async def test_prespawned_servers_nobody_adopts_are_killed_with_their_children(tmp_path: Path):
    pid_file = tmp_path / "fx.pid"
    with spawn.EarlyStarts() as early:
        early.start(load_config(_config(tmp_path, "--pid-file", str(pid_file), "--spawn-child")).for_servers)
        await wait_until(lambda: Path(f"{pid_file}.child").exists())
        pids = [read_pid(pid_file), read_pid(f"{pid_file}.child")]
    await wait_until(lambda: not any(alive(pid) for pid in pids))


def test_a_changed_command_line_is_not_adopted(tmp_path: Path, early: spawn.EarlyStarts):
    early.start(load_config(_config(tmp_path)).for_servers)
    assert early.adopt("fx", sys.executable, [str(ECHO_SERVER), "--other"], None, None) is None
    assert early.adopt("other", sys.executable, [str(ECHO_SERVER)], None, None) is None
    adopted = early.adopt("fx", sys.executable, [str(ECHO_SERVER)], None, None)
    assert adopted is not None
    adopted.process.kill()
    adopted.process.wait(timeout=5)
    for fd in (adopted.stdin, adopted.stdout, adopted.stderr):
        os.close(fd)


@pytest.mark.parametrize("serving", [True, False])
async def test_the_early_initialize_declares_what_omega_can_pass_on(
    rwx_policy: SandboxPolicy, tmp_path: Path, early: spawn.EarlyStarts, serving: bool
):
    """Under `serve` a server's sampling, elicitation and roots requests reach the client, so the early
    `initialize` says so (a TypeScript SDK server checks before it asks); a one-shot command has only roots."""
    log = tmp_path / "received.jsonl"
    config = load_config(_config(tmp_path, "--log-file", str(log)))
    early.start(config.for_servers, serving=serving)
    async with (
        Downstreams.from_config(config.for_servers, early=early) as downstreams,
        Toolbox(rwx_policy, downstreams),
    ):
        await downstreams.wait_ready()
    received = [json.loads(line) for line in log.read_text().splitlines()]
    [initialize] = [m for m in received if m.get("method") == "initialize"]
    capabilities = initialize["params"]["capabilities"]
    assert "roots" in capabilities
    assert ("sampling" in capabilities and "elicitation" in capabilities) == serving
