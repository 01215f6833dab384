"""omega as the client under test: the suite's test server is a downstream of an omega hub.

The suite runs `python omega_client.py URL` for each client scenario. This writes a servers.toml
whose one server `ref` is URL (with `auth = "oauth"` on `auth/` scenarios: the pre-registered
client of the scenario's context, its secret from the environment, and the client ID metadata
document URL the reference client uses), logs in the way a person would (`omega-mcp login`'s own
code, its browser a plain HTTP client following the redirect to omega's loopback callback), runs
the hub in this process, and drives it with the reference client's scenario logic
(reference_client.py) through a shim that undoes omega's `mcp__ref__` names and does nothing else. A
scope step-up the hub reports (`needs login ... asks for scope`) is answered as a person would:
one more login, then the scenario once more.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import types

sys.path.insert(0, str(Path(__file__).parent))
import reference_client

from omega_mcp.cli.login import run_login
from omega_mcp.config import Config, load_config
from omega_mcp.proxy.oauth import step_up_needed
from omega_mcp.proxy.spec import DownstreamSpec
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.server import build_server
from omega_mcp.toolbox import Toolbox

PREFIX = "mcp__ref__"
_SECRET_ENV = "CONFORMANCE_CLIENT_SECRET"


class Renamed:
    """An entered `mcp.Client` of omega, seen with the downstream's own tool names."""

    def __init__(self, client: mcp.Client) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def list_tools(self, **options: Any) -> types.ListToolsResult:
        listed = await self._client.list_tools(**options)
        tools = [
            t.model_copy(update={"name": t.name[len(PREFIX) :]}) for t in listed.tools if t.name.startswith(PREFIX)
        ]
        return listed.model_copy(update={"tools": tools})

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, **options: Any) -> Any:
        return await self._client.call_tool(PREFIX + name, arguments, **options)


def write_config(home: Path, url: str, auth: bool, ctx: dict[str, Any]) -> Config:
    lines = [f'[sandbox]\nmode = "rwx"\nworkspace = "{home / "ws"}"\n']
    server = [f'[servers.ref]\nurl = "{url}"']
    if auth:
        server += ['auth = "oauth"', f'client_metadata_url = "{reference_client.CIMD_URL}"']
        if ctx.get("client_id"):
            server.append(f'client_id = "{ctx["client_id"]}"')
            if ctx.get("client_secret"):
                os.environ[_SECRET_ENV] = ctx["client_secret"]
                server.append(f'client_secret_env = "{_SECRET_ENV}"')
    path = home / "servers.toml"
    path.write_text("\n".join(lines) + "\n" + "\n".join(server) + "\n")
    return load_config(path, environ={**os.environ, "OMEGA_HOME": str(home)})


def follow(url: str) -> bool:
    """The person's browser: open the URL, follow the redirects (to omega's loopback callback)."""
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=30) as page:
        page.read()
    return True


async def login(config: Config) -> None:
    await run_login(config, argparse.Namespace(server="ref", timeout=30.0), io.StringIO(), opener=follow)


@asynccontextmanager
async def hub(config: Config) -> AsyncIterator[Any]:
    policy = SandboxPolicy(mode="rwx", home=config.home, workspace=config.home / "ws", tmp_dir=config.home / "tmp")
    async with Downstreams.from_config(config.for_servers) as downstreams, Toolbox(policy, downstreams) as toolbox:
        await downstreams.wait_ready()
        yield build_server(toolbox, catalog=downstreams)


async def run(url: str) -> None:
    name, ctx = reference_client.scenario(), reference_client.context()
    auth = name.startswith("auth/")
    home = Path(tempfile.mkdtemp(prefix="omega-conformance-"))
    (home / "ws").mkdir()
    (home / "tmp").mkdir()
    config = write_config(home, url, auth, ctx)
    if auth:
        await login(config)
    for _ in range(2):
        async with hub(config) as omega:

            @asynccontextmanager
            async def connect(**callbacks: Any) -> AsyncIterator[Renamed]:
                async with mcp.Client(omega, mode=reference_client.mode(), **callbacks) as client:
                    yield Renamed(client)

            await reference_client.drive(connect, name, ctx)
        settings = DownstreamSpec.from_config("ref", config.servers["ref"], home=config.home).oauth
        if settings is None or step_up_needed(settings) is None:
            return
        await login(config)  # the hub said which scope it needs: a person logs in once more


def main() -> None:
    anyio.run(run, sys.argv[-1])


if __name__ == "__main__":
    main()
