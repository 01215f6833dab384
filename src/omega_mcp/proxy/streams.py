"""Small pieces around the downstream transports, kept out of `session.py`.

`quiet_transport_logs` turns the SDK's HTTP and SSE client transport logs into debug records while
the supervisor runs (omega reports a failed connection itself, once, in one line); `EofWatch` is
the read stream wrapper through which a session notices that its server went away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

import anyio
from mcp.shared.message import SessionMessage

from omega_mcp._sdk import ReadStream
from omega_mcp.pipes import MessageReadStream

__all__ = ["EofWatch", "quiet_transport_logs"]


class _Demote(logging.Filter):
    """Turns the SDK client transports' own log records into debug records.

    They log every failed connection attempt as an error with its traceback; omega reports the
    reason itself, once, in one line ("server X is down: ..."), and retries.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


@contextmanager
def quiet_transport_logs() -> Generator[None]:
    """While entered, the SDK's HTTP and SSE client transports log at debug level only."""
    demote, names = _Demote(), ("mcp.client.sse", "mcp.client.streamable_http")
    for name in names:
        logging.getLogger(name).addFilter(demote)
    try:
        yield
    finally:
        for name in names:
            logging.getLogger(name).removeFilter(demote)


class EofWatch(MessageReadStream):
    """A read stream that reports its end (the peer went away) before passing it on."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    def __getattr__(self, name: str) -> Any:  # `last_context` and friends, when the inner stream has them
        return getattr(self._inner, name)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_eof()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()
