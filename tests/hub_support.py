"""Starting `omega-mcp serve --http` in a subprocess and talking to it with its token.

`start_hub` waits (bounded) for the hub's "serving" line, so its token file exists by then, and then
for `/readyz` (every configured server connected or failed once: `serve` answers at once, so a list
sent before would miss a server still starting, by design, with `list_changed` to follow); the
token is `OMEGA_TOKEN` when the test sets it, else the generated `$OMEGA_HOME/token` ("" when
there is none: an old hub that checked no token on loopback). `hub_client` is an `mcp.Client` whose
every request carries the token. `configured_hub` is a module's shared hub: its config written, started,
stopped after.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Hub:
    proc: subprocess.Popen[bytes]
    port: int
    home: Path
    log: Path
    given_token: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def token(self) -> str:
        if self.given_token:
            return self.given_token
        token_file = self.home / "token"
        return token_file.read_text().strip() if token_file.exists() else ""

    def auth(self, token: str | None = None) -> dict[str, str]:
        token = self.token if token is None else token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def start_hub(
    tmp_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
    home: Path | None = None,
    preexec_fn: Callable[[], Any] | None = None,
    wait_serving: bool = True,
    wait_ready: bool = True,
) -> Hub:
    """`omega-mcp serve --http --mode rwx --workspace tmp/ws` on a free loopback port, serving."""
    port = port or free_port()
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    home = home or tmp_path / "home"
    proc_env = {**os.environ, "OMEGA_HOME": str(home), **(env or {})}
    proc_env.pop("OMEGA_CONFIG", None)
    argv = [sys.executable, "-m", "omega_mcp", "serve", "--http", "--port", str(port)]
    if "--mode" not in extra:
        argv += ["--mode", "rwx"]
    if "--workspace" not in extra:
        argv += ["--workspace", str(ws)]
    log = tmp_path / f"hub-{port}-{time.monotonic_ns()}.log"
    with log.open("wb") as out:  # the child keeps its own copy of the fd
        proc = subprocess.Popen([*argv, *extra], env=proc_env, cwd=tmp_path, stderr=out, preexec_fn=preexec_fn)
    hub = Hub(proc, port, home, log, proc_env.get("OMEGA_TOKEN", ""))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"hub exited early: {log.read_text()}")
        if not wait_serving:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return hub
            except OSError:
                pass
        elif "serving streamable HTTP" in log.read_text() and (not wait_ready or _ready(port)):
            return hub
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise AssertionError(f"hub did not serve (and turn ready) within 60 s: {log.read_text()}")


@contextmanager
def configured_hub(tmp_path: Path, config: str, env: dict[str, str] | None = None) -> Iterator[Hub]:
    """`start_hub` on `config` (the text of tmp/omega.toml, written here), stopped when the block ends."""
    path = tmp_path / "omega.toml"
    path.write_text(config)
    hub = start_hub(tmp_path, "--config", str(path), env=env)
    try:
        yield hub
    finally:
        hub.stop()


def _ready(port: int) -> bool:
    try:
        return httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx2.HTTPError:
        return False


@asynccontextmanager
async def hub_client(url: str, token: str, *, mode: str = "legacy", **options: Any) -> AsyncIterator[mcp.Client]:
    """An `mcp.Client` on the hub at `url` sending `Authorization: Bearer <token>` ("" sends none)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with mcp.Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client:  # type: ignore[arg-type]
            yield client
