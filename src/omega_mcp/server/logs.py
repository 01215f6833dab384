"""MCP logging for the hub: `logging/setLevel` and `notifications/message` to the clients.

omega's own log records (logger `omega_mcp` and below) are queued by a `logging.Handler` and sent
by one task to every handshake-era connection that asked for logs with `logging/setLevel`, at or
above the level it asked for. A downstream server's log messages are not among them: each goes to
the client whose call it belongs to, as the server sent it (proxy/session.py, at the level that
client asked for: `level_of`), and its copy in omega's log is marked `ROUTED`. The queue is
bounded and drops when full, so a chatty server can never block or grow the server. (The
2026-07-28 era has no connection-wide log channel.)
"""

from __future__ import annotations

import logging
import weakref

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.connection import Connection

from omega_mcp.loglevels import ROUTED, McpLevel, mcp_level, python_level

__all__ = ["LogForwarder"]

_QUEUE = 256
_SEND_SECONDS = 2.0


class _QueueHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.send: MemoryObjectSendStream[tuple[int, str, str]] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.send is None or getattr(record, ROUTED, False):
            return
        try:
            self.send.send_nowait((record.levelno, record.name, record.getMessage()))
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # full or shutting down: logs are best effort, the server never waits for them
        except Exception:  # boundary: a logging handler must never raise into the caller
            self.handleError(record)


class LogForwarder:
    """Per-connection log levels and the task that delivers log records to those connections."""

    def __init__(self, logger_name: str = "omega_mcp") -> None:
        self._levels: weakref.WeakKeyDictionary[Connection, int] = weakref.WeakKeyDictionary()
        self._names: weakref.WeakKeyDictionary[Connection, McpLevel] = weakref.WeakKeyDictionary()
        self._logger = logging.getLogger(logger_name)
        self._handler = _QueueHandler()

    def set_level(self, connection: Connection, level: str) -> None:
        """Deliver records at or above `level` to `connection` from now on."""
        self._levels[connection] = python_level(level)
        self._names[connection] = mcp_level(python_level(level))
        # The logger's own level gates records before any handler sees them.
        lowest = min(self._levels.values(), default=logging.WARNING)
        if self._logger.getEffectiveLevel() > lowest:
            self._logger.setLevel(lowest)

    def level_of(self, connection: object) -> McpLevel | None:
        """The level `connection` asked for with `logging/setLevel`, or None when it never asked."""
        return self._names.get(connection) if isinstance(connection, Connection) else None

    async def run(self) -> None:
        """Queue omega's log records and deliver them until cancelled (then detach and close)."""
        send, receive = anyio.create_memory_object_stream[tuple[int, str, str]](_QUEUE)
        self._handler.send = send
        self._logger.addHandler(self._handler)
        try:
            async with send, receive:
                async for levelno, name, message in receive:
                    await self._deliver(levelno, name, message)
        finally:
            self._logger.removeHandler(self._handler)
            self._handler.send = None

    async def _deliver(self, levelno: int, name: str, message: str) -> None:
        for connection, threshold in list(self._levels.items()):
            if levelno < threshold:
                continue
            with anyio.move_on_after(_SEND_SECONDS):
                try:
                    # Connection.log is marked deprecated (the 2026 era dropped logging); the
                    # handshake-era notification it would send is exactly this one.
                    params = {"level": mcp_level(levelno), "logger": _short(name), "data": message}
                    await connection.notify("notifications/message", params)
                except Exception:  # boundary: a gone client must not stop delivery to others
                    self._levels.pop(connection, None)


def _short(name: str) -> str:
    return name.removeprefix("omega_mcp.").removeprefix("downstream.") or "omega"
