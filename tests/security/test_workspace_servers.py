"""Nothing the model can write runs unconfined: a server you develop in the workspace runs confined.

The shapes the MCP quickstarts give for a server under development, each with its code in the
workspace (where omega's tools may write, so the model's next edit runs at the server's next start):
a script (`python3 ws/server.py`), a node script (`node ws/build/index.js`), `-m pkg` with
`PYTHONPATH` (a colon-separated list) and `uv --directory ws run ...` (a stand-in `uv` outside the
write roots: uv itself is not needed to show the shape). With `[sandbox] servers` at its default
("none"), each starts, answers, and is confined: it cannot write outside its own directories nor read
a hidden secret. `sandbox = "none"` on such a server is refused with a status naming the setting and
the path; the control, a server outside every write root with `sandbox = "none"`, runs unconfined.

Everything lives under /var/tmp: a confined server has a private /tmp, so a target under pytest's
tmp_path would prove nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import mcp
import pytest
from mcp import StdioServerParameters

from omega_mcp.sandbox import untrusted
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux-only")

HOSTILE = Path(__file__).parents[1] / "fixtures" / "hostile_server.py"
_SECRET = "SECRET-KEY-5d1c"
_BOUND_SECONDS = 20.0

_NODE_SERVER = r"""
const fs = require('fs');
const rl = require('readline').createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const schema = { type: 'object', properties: { action: { type: 'string' }, target: { type: 'string' } } };
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch (e) { return; }
  if (m.id === undefined) return;
  if (m.method === 'initialize') {
    return send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: 'node-dev', version: '1' } } });
  }
  if (m.method === 'tools/list') {
    return send({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'attempt', inputSchema: schema }] } });
  }
  if (m.method === 'tools/call') {
    const a = m.params.arguments;
    let text;
    try {
      if (a.action === 'write') { fs.writeFileSync(a.target, 'planted'); text = 'allowed: wrote'; }
      else { text = 'allowed: read ' + fs.readFileSync(a.target, 'utf8').slice(0, 64); }
    } catch (e) { text = 'denied: ' + e.code; }
    return send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text }] } });
  }
  if (m.method === 'ping') return send({ jsonrpc: '2.0', id: m.id, result: {} });
  send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'no method ' + m.method } });
});
"""

_FAKE_UV = """#!/bin/sh
# uv's shape: uv --directory DIR run PROGRAM ARGS... (runs PROGRAM from DIR)
[ "$1" = "--directory" ] || exit 2
cd "$2" || exit 2
shift 3
exec "$@"
"""


@dataclass
class Place:
    base: Path
    home: Path
    omega_home: Path
    ws: Path
    outside: Path
    config: Path


def _server(name: str, command: str, args: list[str], extra: str = "") -> str:
    return f"[servers.{name}]\ncommand = {json.dumps(command)}\nargs = {json.dumps(args)}\n{extra}"


@pytest.fixture(scope="module")
def place() -> Iterator[Place]:
    if not os.path.isdir("/var/tmp"):
        pytest.skip("needs /var/tmp: a directory outside /tmp that confined servers share with the host")
    base = Path(tempfile.mkdtemp(prefix="omega-devserver-", dir="/var/tmp"))
    home, omega_home, outside = base / "home", base / "omega", base / "outside"
    ws = home / "proj"
    for directory in (home / ".ssh", omega_home, outside, ws / "build", ws / "src" / "devpkg", base / "bin"):
        directory.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(_SECRET)
    shutil.copy(HOSTILE, ws / "server.py")
    shutil.copy(HOSTILE, ws / "src" / "devpkg" / "__main__.py")
    (ws / "build" / "index.js").write_text(_NODE_SERVER)
    uv = base / "bin" / "uv"
    uv.write_text(_FAKE_UV)
    uv.chmod(0o755)
    python = sys.executable
    servers = [
        _server("script", python, [str(ws / "server.py")]),
        _server("module", python, ["-m", "devpkg"], f'env = {{ PYTHONPATH = "/nonexistent:{ws / "src"}" }}\n'),
        _server("uvdir", str(uv), ["--directory", str(ws), "run", python, "server.py"]),
        _server("refused", python, [str(ws / "server.py")], 'sandbox = "none"\n'),
        _server("incwd", python, ["server.py"], f'cwd = "{ws}"\n'),
        _server("control", python, [str(HOSTILE)], 'sandbox = "none"\n'),
    ]
    if shutil.which("node") is not None:
        servers.append(_server("node", "node", [str(ws / "build" / "index.js")]))
    config = base / "servers.toml"
    config.write_text(f'[sandbox]\nworkspace = "{ws}"\n' + "".join(servers))
    os.chmod(base, 0o755)
    try:
        yield Place(base, home, omega_home, ws, outside, config)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _env(place: Place) -> dict[str, str]:
    return {**os.environ, "OMEGA_HOME": str(place.omega_home), "HOME": str(place.home)}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope: the tests below share one omega


@pytest.fixture(scope="module")
async def client(place: Place) -> AsyncIterator[mcp.Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(place.config), "--log-level", "error"],
        env=_env(place),
        cwd=place.base,
    )
    async with mcp.Client(params, mode="legacy") as connected:
        yield connected


async def _attempt(client: mcp.Client, server: str, action: str, target: Path) -> str:
    with deadline(_BOUND_SECONDS):
        result = await client.call_tool(f"mcp__{server}__attempt", {"action": action, "target": str(target)})
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, text
    return text


def _servers_json(place: Place) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "omega_mcp", "tools", "--json", "--config", str(place.config)],
        capture_output=True,
        text=True,
        env=_env(place),
        cwd=place.base,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)["servers"]


_DEVELOPED = ["script", "module", "uvdir", "node", "incwd"]


@pytest.mark.parametrize("server", _DEVELOPED)
@pytest.mark.e2e
async def test_a_server_developed_in_the_workspace_answers_confined(
    client: mcp.Client, place: Place, server: str
) -> None:
    if server == "node" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    target = place.outside / f"{server}.txt"
    wrote = await _attempt(client, server, "write", target)
    assert wrote.startswith("denied"), wrote
    assert not target.exists()
    secret = await _attempt(client, server, "read", place.home / ".ssh" / "id_rsa")
    assert _SECRET not in secret, secret
    readme = place.ws / "README.md"
    readme.write_text("the project's own file")
    assert "the project's own file" in await _attempt(client, server, "read", readme)  # it still reads its code


@pytest.mark.e2e
async def test_the_control_outside_every_write_root_runs_unconfined(client: mcp.Client, place: Place) -> None:
    target = place.outside / "control.txt"
    assert (await _attempt(client, "control", "write", target)).startswith("allowed")
    assert target.read_text() == "planted"
    assert _SECRET in await _attempt(client, "control", "read", place.home / ".ssh" / "id_rsa")


@pytest.mark.e2e
def test_tools_shows_them_confined_and_refuses_sandbox_none_naming_the_setting_and_path(place: Place) -> None:
    servers = _servers_json(place)
    refused = servers["refused"]
    reason = str(refused["reason"])
    assert refused["state"] == "failed", refused
    assert 'servers.refused.sandbox = "none"' in reason and "servers.refused.args[0]" in reason, reason
    assert str(place.ws / "server.py").replace(str(Path.home()), "~") in reason or "server.py" in reason, reason
    for name in [s for s in _DEVELOPED if s in servers]:
        assert servers[name]["state"] == "connected", (name, servers[name])
        assert servers[name]["sandbox"]["confined"] is True, (name, servers[name])  # type: ignore[index]
    assert servers["control"]["sandbox"] == {"confined": False}


def _guard(tmp_path: Path) -> untrusted.LaunchGuard:
    ws = tmp_path / "proj"
    (ws / "src").mkdir(parents=True)
    return untrusted.LaunchGuard.of(SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=ws))


@pytest.mark.parametrize(
    ("args", "env", "setting"),
    [
        (["~/proj/server.py"], {}, "args[0]"),
        (["run", "--directory", "{ws}"], {}, "args[2]"),
        (["run", "--directory={ws}"], {}, "args[1]"),
        (["-m", "pkg"], {"PYTHONPATH": "/usr/lib:{ws}/src"}, "env.PYTHONPATH"),
        (["index.js"], {"NODE_PATH": "~/proj/node_modules"}, "env.NODE_PATH"),
        (["proj/server.py"], {}, "args[0]"),  # relative to the configured cwd
    ],
)
def test_every_argument_and_env_value_that_names_a_path_in_a_write_root_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], setting: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    guard = _guard(tmp_path)
    ws = str(tmp_path / "proj")
    args = [a.replace("{ws}", ws) for a in args]
    env = {k: v.replace("{ws}", ws) for k, v in env.items()}
    outside = Path(sys.prefix)  # a cwd outside every write root
    reach = guard.reach(sys.executable, tmp_path, cwd_configured=False, args=args, env=env)
    assert reach is not None and reach.setting == setting, reach
    assert reach.root == tmp_path / "proj"
    assert guard.reach(sys.executable, outside, cwd_configured=True, args=["-m", "pkg", "--port=8080"]) is None


def test_a_symbolic_link_into_the_workspace_is_followed(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    link = tmp_path / "elsewhere"
    link.symlink_to(tmp_path / "proj" / "src")
    reach = guard.reach(sys.executable, Path(sys.prefix), cwd_configured=False, args=[str(link / "server.py")])
    assert reach is not None and reach.setting == "args[0]"


def test_named_paths_splits_flags_and_lists(tmp_path: Path) -> None:
    assert Path("/a/b") in untrusted.named_paths("--directory=/a/b", tmp_path)
    assert untrusted.named_paths("/x:/y", tmp_path) == [Path("/x"), Path("/y")]
    assert untrusted.named_paths("UTC", tmp_path) == []


@pytest.mark.e2e
async def test_a_server_whose_cwd_is_in_the_workspace_runs_there_but_cannot_write_it(
    client: mcp.Client, place: Place
) -> None:
    """What it wrote there (`.git/hooks`, `.mcp.json`) would run next outside any sandbox."""
    assert (await _attempt(client, "incwd", "cwd", place.ws)).removeprefix("allowed: ") == str(place.ws)
    for target in (place.ws / "planted.txt", place.ws / ".mcp.json"):
        assert (await _attempt(client, "incwd", "write", target)).startswith("denied")
        assert not target.exists()
    own = place.omega_home / "servers" / "incwd" / "state.json"
    assert (await _attempt(client, "incwd", "write", own)).startswith("allowed")  # its own directory
