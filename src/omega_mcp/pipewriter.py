"""The writing half of the pipe streams (`pipes.py`): JSON-RPC messages to a non-blocking descriptor.

A writer writes in the caller's turn what the pipe takes (`send_nowait`, or `send` / `send_raw`
for the SDK and other tasks) and the rest as the pipe drains, from a writability callback
(`readiness.Watch`), in order; `send_raw` waits only while more than a bounded backlog is queued,
and `congested` tells the relay to stop taking more for it (backpressure). Before the descriptor
is closed, `detach()` takes its callback off the loop.
"""

from __future__ import annotations

import logging
import os
from types import TracebackType
from typing import Self

import anyio
from mcp.shared.message import SessionMessage

from omega_mcp.readiness import Watch

__all__ = ["Closing", "PipeWriter"]

logger = logging.getLogger(__name__)

_HIGH_WATER = 1 << 20  # bytes queued behind a full pipe before senders wait


class Closing:
    """`async with` over `aclose()`: the context-manager half of the SDK's stream protocols, shared by
    the writer here and the read streams (`pipes.MessageReadStream`)."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class PipeWriter(Closing):
    """Newline-delimited JSON-RPC messages to a non-blocking descriptor (not closed by us)."""

    def __init__(self, fd: int, *, label: str = "") -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.label = label
        self._backlog = bytearray()
        self._drained = anyio.Event()
        self._watch: Watch | None = None
        self._closed = False

    def _write(self, data: bytes | bytearray) -> int:
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:  # the reader went away: nothing more can be delivered
            logger.debug("%s write failed: %s", self.label, exc)
            self._lost()
            raise anyio.BrokenResourceError from exc

    def _lost(self) -> None:
        self._closed = True
        self._backlog.clear()
        self.detach()
        self._drained.set()

    async def send(self, item: SessionMessage, /) -> None:
        await self.send_raw((item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode())

    def send_nowait(self, data: bytes) -> None:
        """Send one already-encoded message (a JSON object and its newline) without waiting.

        What the pipe does not take now is written, in order, as it drains.

        Raises:
            anyio.ClosedResourceError: the writer was closed or aborted.
            anyio.BrokenResourceError: the reader of the pipe went away.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if self._backlog:
            self._backlog += data  # keep the order: behind what is already waiting for the pipe
            return
        written = self._write(data)
        if written < len(data):
            self._backlog += data[written:]
            if self._watch is None:
                self._watch = Watch(self.fd, self._writable, writable=True)
            self._watch.start()

    async def send_raw(self, data: bytes) -> None:
        """`send_nowait`, then wait while more than a bounded backlog is queued behind a full pipe."""
        self.send_nowait(data)
        await self.wait_drained()

    @property
    def closed(self) -> bool:
        """Whether the writer was closed or aborted, or its reader went away."""
        return self._closed

    @property
    def congested(self) -> bool:
        """Whether more than a bounded backlog waits for the pipe (senders should wait: `wait_drained`)."""
        return len(self._backlog) > _HIGH_WATER

    async def wait_drained(self) -> None:
        """Wait until the backlog is no longer over the bound (or the writer is closed)."""
        while self.congested and not self._closed:
            await self._drained.wait()

    def _writable(self) -> None:
        """The writability callback: write what the pipe takes of the backlog."""
        try:
            del self._backlog[: self._write(self._backlog)]
        except anyio.BrokenResourceError:
            return
        if not self._backlog:
            self.detach()
            self._drained.set()
            self._drained = anyio.Event()

    def detach(self) -> None:
        """Stop watching the descriptor (before it is closed); a backlog then stays unwritten."""
        if self._watch is not None:
            self._watch.stop()

    def abort(self) -> None:
        """Stop writing (the reader is gone or we are shutting down); wakes senders waiting on the backlog."""
        if not self._closed:
            self._lost()

    async def aclose(self) -> None:
        self._closed = True
        self.detach()
