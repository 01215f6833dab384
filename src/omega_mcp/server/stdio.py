"""The stdio server transport: newline-delimited JSON-RPC on our own stdin/stdout, without threads.

`run_stdio` serves one client there; with downstream servers, handshake-era `tools/call` to stdio
servers goes through the relay (`fastpath/relay.py`), which `serve_streams(relay=False)` leaves out
(the SDK path it must match, compared call by call in tests/fastpath).

The SDK's `stdio_server` reads and writes through worker threads (one hop per line read, two per
message written), which is most of what a proxy hop costs. Here the pipes are non-blocking file
descriptors read and written by `wire.pipes.PipeReader` / `PipeWriter` in the event loop. As in the SDK,
the wire moves to private descriptors while serving: fd 0 reads /dev/null and fd 1 goes to
stderr, so a stray `print` or a child process cannot corrupt the protocol; both are restored on
exit. Regular files work too (they never block, so they are never polled). Only for anything else
is the SDK's transport used: its reader thread cannot be cancelled, so omega could not stop on a
signal while such a stdin stays open. A client's message longer than `[hub] max_message_mb` is
dropped as it is read; a request gets an error answer, as if it had been refused (`_too_long`). A
line that is no JSON object at all (bad JSON or UTF-8, nested too deeply to decode, an array) is
answered with a JSON-RPC parse error, id null (`_parse_errors`), and reading goes on.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from omega_mcp._sdk import SESSION_MESSAGES, ReadStream, Streams, WriteStream
from omega_mcp.fastpath.relay import Relay
from omega_mcp.server.profiles import ClientProfile
from omega_mcp.server.server import OmegaServer
from omega_mcp.wire.jsonline import encode_line
from omega_mcp.wire.oversize import Oversize, limit_text
from omega_mcp.wire.pipes import PipeReader, PipeWriter

__all__ = ["run_stdio", "serve_streams", "stdio_streams"]

logger = logging.getLogger(__name__)


def _usable(fd: int) -> bool:
    """Whether the pipe streams can serve this descriptor (pollable, or a regular file)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISREG(mode)


def _claim(fd: int, divert_to: int) -> int:
    """Move the wire at `fd` to a private descriptor and point `fd` at `divert_to`."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(divert_to, fd)
    return private


@asynccontextmanager
async def stdio_streams() -> AsyncGenerator[Streams]:
    """`(read_stream, write_stream)` over this process's stdin and stdout."""
    if not (_usable(0) and _usable(1)):
        async with stdio_server() as streams:
            yield streams
        return
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        wire_in = _claim(0, devnull)
        wire_out = _claim(1, 2)
    finally:
        os.close(devnull)
    blocking = (os.get_blocking(wire_in), os.get_blocking(wire_out))
    reader, writer = (
        PipeReader(wire_in, SESSION_MESSAGES, label="[client]"),
        PipeWriter(wire_out, SESSION_MESSAGES, label="[client]"),
    )
    try:
        yield reader, writer
    finally:
        reader.detach()
        writer.detach()
        # The descriptions are shared with whoever gave us the pipes (a terminal, a shell):
        # leave them blocking as we found them, and put the wire back on fds 0 and 1.
        os.set_blocking(wire_in, blocking[0])
        os.set_blocking(wire_out, blocking[1])
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)


def _too_long(reader: PipeReader[Any], writer: PipeWriter[Any], limit: int) -> None:
    """Bound what one client message may take: a longer request is answered with an error, the rest dropped."""

    async def oversized(oversize: Oversize) -> None:
        request_id = oversize.request_id
        text = f"the message is longer than {limit_text(limit)} ({oversize.size} bytes); omega dropped it"
        logger.warning("client: %s", text)
        if request_id is not None and oversize.has_method:
            answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": types.INVALID_REQUEST, "message": text}}
            await writer.send_raw(json.dumps(answer).encode() + b"\n")

    reader.max_message_bytes = limit
    reader.oversize = oversized


def _parse_errors(reader: PipeReader[Any], writer: PipeWriter[Any]) -> None:
    """Answer each client line that is no JSON object (bad JSON or UTF-8, nested too deeply, an array...)
    with a JSON-RPC parse error, id null, as JSON-RPC asks; the connection carries on."""

    def unreadable(why: str) -> None:
        error = {"code": types.PARSE_ERROR, "message": f"Parse error: the line is {why}"}
        try:
            writer.send_nowait(encode_line({"jsonrpc": "2.0", "id": None, "error": error}))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the client is gone: nothing to answer

    reader.unreadable = unreadable


async def serve_streams(
    server: OmegaServer,
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
    *,
    relay: bool = True,
    max_message_bytes: int | None = None,
    window: ClientProfile | None = None,
) -> None:
    """Serve one client on a pair of streams until it disconnects (the relay only on pipe streams); an
    attached `window`'s requests run as that client."""
    async with anyio.create_task_group() as task_group:
        if isinstance(read_stream, PipeReader) and isinstance(write_stream, PipeWriter):
            _parse_errors(read_stream, write_stream)
            if max_message_bytes is not None:
                _too_long(read_stream, write_stream, max_message_bytes)
        catalog = server.catalog
        if (
            relay
            and catalog is not None
            and isinstance(read_stream, PipeReader)
            and isinstance(write_stream, PipeWriter)
        ):
            relay_calls = Relay(
                server.toolbox,
                catalog,
                write_stream,
                task_group,
                server_info=server.server_info_stamp,
                accept=server.relay_accepts,
                log_level=server.client_log_level,
            )
            read_stream.take = relay_calls.from_client
            read_stream.congested = relay_calls.downstream_congested
        await server.run(read_stream, write_stream, server.initialization_options(), window=window)
        task_group.cancel_scope.cancel()


async def run_stdio(server: OmegaServer, *, max_message_bytes: int | None = None) -> None:
    """Serve one client over stdin/stdout until it disconnects (`[hub] max_message_mb` bounds its messages)."""
    async with stdio_streams() as (read_stream, write_stream):
        await serve_streams(server, read_stream, write_stream, max_message_bytes=max_message_bytes)
