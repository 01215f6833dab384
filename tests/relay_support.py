"""Driving omega's stdio front-end over real pipes, with and without the relay (tests/fastpath)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from omega_mcp._sdk import SESSION_MESSAGES
from omega_mcp.server.server import OmegaServer
from omega_mcp.server.stdio import serve_streams
from omega_mcp.wire.pipes import PipeReader, PipeWriter
from waits import deadline


@asynccontextmanager
async def pipe_client(
    server: OmegaServer, *, relay: bool, mode: str = "legacy", raw: list[int] | None = None, **callbacks: Any
) -> AsyncIterator[mcp.Client]:
    """An SDK client (`legacy`: handshake era, `auto`: 2026-07-28) talking to `server` over two real pipes.

    `raw` gets the descriptor the client writes to, for a test to write raw lines of its own."""
    to_server_r, to_server_w = os.pipe()
    if raw is not None:
        raw.append(to_server_w)
    to_client_r, to_client_w = os.pipe()
    open_fds = {to_server_r, to_server_w, to_client_r, to_client_w}
    served = anyio.Event()

    async def serve() -> None:
        await serve_streams(
            server, PipeReader(to_server_r, SESSION_MESSAGES), PipeWriter(to_client_w, SESSION_MESSAGES), relay=relay
        )
        served.set()

    @asynccontextmanager
    async def transport() -> AsyncIterator[tuple[PipeReader[SessionMessage], PipeWriter[SessionMessage]]]:
        yield PipeReader(to_client_r, SESSION_MESSAGES), PipeWriter(to_server_w, SESSION_MESSAGES)

    try:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(serve)
            async with mcp.Client(transport(), mode=mode, **callbacks) as client:  # pyright: ignore[reportArgumentType]
                yield client
            os.close(to_server_w)  # EOF: the server's session ends as with a real client going away
            open_fds.discard(to_server_w)
            with deadline(10):
                await served.wait()
    finally:
        for fd in open_fds:
            os.close(fd)


async def outcome(
    client: mcp.Client, name: str, arguments: dict[str, Any], *, envelope: bool = False
) -> dict[str, Any]:
    updates: list[tuple[float, float | None, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    try:
        result = await client.call_tool(name, arguments, progress_callback=progress)
    except MCPError as exc:
        return {"error": exc.message, "code": exc.code}
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not envelope:
        dumped.pop("_meta", None)
        dumped.pop("resultType", None)  # the 2026 envelope's own field
    return {"result": dumped, "progress": updates}
