"""JSON-RPC message streams straight over non-blocking pipe file descriptors.

The SDK's stdio transports put a task and a zero-buffer memory stream between each pipe and the
dispatcher (and its server side reads and writes through worker threads), which costs several
event-loop round trips per message: most of what a proxy hop costs. These two classes implement
the SDK's `ReadStream` / `WriteStream` protocols directly on the descriptor: `receive()` reads
and parses in the caller's task, `send()` writes in the caller's task and only waits when the
pipe is full (later senders queue behind, in order, with a bounded backlog). One reader at a time.
A reader bounds what one message may take (`max_message_bytes`): a longer line is never held. With
an `oversize` hook the reader drops it as it reads (keeping its head and tail, `oversize.py`) and
the hook says what stands in for it (an error answer for that request only); without one, the
line ends the stream, with `overflow` saying so. A reader may carry an
`intercept` hook that sees each message as plain JSON first and can take it
(the tools/call relay in relay.py); a writer can also send already-encoded messages (`send_raw`).
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.lowlevel
from mcp import types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from omega_mcp.jsonline import decode
from omega_mcp.narrow import object_or_none
from omega_mcp.oversize import HEAD, TAIL, Oversize, limit_text

__all__ = ["MessageReadStream", "PipeReader", "PipeWriter"]

logger = logging.getLogger(__name__)

_READ_SIZE = 1 << 16
_HIGH_WATER = 1 << 20  # bytes queued behind a full pipe before senders wait
_FAIRNESS = 32  # messages delivered from the buffer before yielding to other tasks once

Intercept = Callable[[dict[str, Any]], Awaitable[bool]]
"""Sees each decoded message before the SDK does; returns True when it took the message."""
OversizeHook = Callable[[Oversize], Awaitable[dict[str, Any] | None]]
"""Told of each line over the bound (after it was dropped); returns a message to deliver instead, or None."""


class MessageReadStream:
    """The iteration and context-manager protocol of an SDK read stream, over `receive`/`aclose`."""

    async def receive(self) -> SessionMessage | Exception:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class PipeReader(MessageReadStream):
    """Newline-delimited JSON-RPC messages from a non-blocking descriptor (not closed by us)."""

    def __init__(self, fd: int, *, label: str = "", max_message_bytes: int | None = None) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.label = label
        self.max_message_bytes = max_message_bytes
        self.overflow: str | None = None
        """Set when a message longer than `max_message_bytes` ended the stream: why, in words."""
        self._lines: deque[bytes | Oversize] = deque()
        self._partial = bytearray()
        self._skipping: Oversize | None = None
        """The line over the bound being dropped as it arrives (its head and tail are kept)."""
        self.oversize: OversizeHook | None = None
        self._eof = False
        self._aborted = False
        self._closed = False
        self._streak = 0
        self.intercept: Intercept | None = None

    @property
    def at_eof(self) -> bool:
        """Whether the other end closed the pipe (as opposed to `abort()`)."""
        return self._eof and not self._aborted

    def abort(self) -> None:
        """End the stream once what is already in the pipe has been read (the writer is gone)."""
        if not self._aborted:
            self._aborted = True
            anyio.notify_closing(self.fd)  # wakes a receive() parked in wait_readable

    def _invalid(self, line: bytes, exc: Exception) -> Exception:
        logger.warning("%s ignoring a line that is not JSON-RPC: %.200r", self.label, line)
        return exc

    async def _next(self, line: bytes) -> SessionMessage | Exception | None:
        """The message on `line` for the SDK, or None when the intercept hook took it."""
        intercept = self.intercept
        try:
            if intercept is None:
                return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
            decoded: object = decode(line)
            message = object_or_none(decoded)
            if message is not None and await self._taken(intercept, message):
                return None
            return SessionMessage(types.jsonrpc_message_adapter.validate_python(decoded, by_name=False))
        except (ValidationError, ValueError) as exc:
            return self._invalid(line, exc)

    async def _taken(self, intercept: Intercept, message: dict[str, Any]) -> bool:
        try:
            return await intercept(message)
        except Exception:  # boundary: a hook bug must not end the connection; the SDK path takes over
            logger.exception("%s intercept hook failed; passing the message on", self.label)
            return False

    async def receive(self) -> SessionMessage | Exception:
        while True:
            if self._lines:
                self._streak += 1
                if self._streak >= _FAIRNESS:  # a peer that never pauses must not starve the loop
                    self._streak = 0
                    await anyio.lowlevel.checkpoint()
                line = self._lines.popleft()
                message = await self._next(line) if isinstance(line, bytes) else await self._instead(line)
                if message is not None:
                    return message
                continue
            if self._eof or self._closed:
                raise anyio.EndOfStream
            try:
                chunk = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                if self._aborted:
                    self._eof = True
                    continue
                self._streak = 0
                try:
                    await anyio.wait_readable(self.fd)
                except anyio.ClosedResourceError:
                    pass  # abort(): read what is left, then end
                continue
            except OSError as exc:
                logger.debug("%s read failed: %s", self.label, exc)
                chunk = b""
            if not chunk:
                self._eof = True
                if self._skipping is not None:
                    self._lines.append(self._skipping)
                    self._skipping = None
                elif self._partial.strip():
                    self._lines.append(bytes(self._partial))
                continue
            if self._skipping is not None:
                chunk = self._skip(chunk)
                if not chunk:
                    continue
            self._partial += chunk
            if b"\n" in chunk:
                *lines, rest = self._partial.split(b"\n")
                self._partial = rest
                self._lines.extend(bytes(line) for line in lines if line.strip())
            self._bound()

    async def _instead(self, oversize: Oversize) -> SessionMessage | Exception | None:
        """What the hook delivers in place of a line over the bound (None: nothing)."""
        assert self.oversize is not None
        try:
            replacement = await self.oversize(oversize)
        except Exception:  # boundary: a hook bug must not end the connection
            logger.exception("%s oversize hook failed", self.label)
            return None
        return await self._next(json.dumps(replacement).encode()) if replacement is not None else None

    def _skip(self, chunk: bytes) -> bytes:
        """Drop `chunk` up to the end of the line over the bound (keeping its tail); returns what follows it."""
        skipping = self._skipping
        assert skipping is not None
        end = chunk.find(b"\n")
        part = chunk if end < 0 else chunk[:end]
        skipping.size += len(part)
        skipping.tail = (skipping.tail + part)[-TAIL:]
        if end < 0:
            return b""
        self._lines.append(skipping)
        self._skipping = None
        return chunk[end + 1 :]

    def _bound(self) -> None:
        """Never hold a message over the bound: the buffer holds at most it and one read.

        With an `oversize` hook a long line is dropped as it arrives and the reading goes on;
        without one, messages before the long one are still delivered and nothing after it is read.
        """
        limit = self.max_message_bytes
        if limit is None:
            return
        if self.oversize is not None:
            for index, line in enumerate(self._lines):
                if isinstance(line, bytes) and len(line) > limit:
                    self._lines[index] = Oversize(line[:HEAD], line[-TAIL:], len(line))
            if len(self._partial) > limit:
                partial = self._partial
                self._skipping = Oversize(bytes(partial[:HEAD]), bytes(partial[-TAIL:]), len(partial))
                self._partial = bytearray()
            return
        for index, line in enumerate(self._lines):  # only this read's lines: receive() reads when none are left
            if isinstance(line, bytes) and len(line) > limit:
                while len(self._lines) > index:
                    self._lines.pop()
                break
        else:
            if len(self._partial) <= limit:
                return
        self._end(f"a message exceeded {limit_text(limit)}")

    def _end(self, overflow: str) -> None:
        self.overflow = overflow
        logger.warning("%s %s; closing the connection", self.label, overflow)
        self._partial = bytearray()
        self._skipping = None
        self._eof = True

    def stop(self, overflow: str) -> None:
        """End the stream now, for `overflow` (what was read and not yet delivered is dropped)."""
        self._lines.clear()
        self._end(overflow)

    async def aclose(self) -> None:
        self._closed = True


class PipeWriter:
    """Newline-delimited JSON-RPC messages to a non-blocking descriptor (not closed by us)."""

    def __init__(self, fd: int, *, label: str = "") -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.label = label
        self._backlog = bytearray()
        self._flushing = False
        self._drained = anyio.Event()
        self._closed = False

    def _write(self, data: bytes | bytearray) -> int:
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:  # the reader went away: nothing more can be delivered
            logger.debug("%s write failed: %s", self.label, exc)
            self._closed = True
            self._backlog.clear()
            raise anyio.BrokenResourceError from exc

    async def send(self, item: SessionMessage, /) -> None:
        await self.send_raw((item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode())

    async def send_raw(self, data: bytes) -> None:
        """Send one already-encoded message (a JSON object and its newline).

        Raises:
            anyio.ClosedResourceError: the writer was closed or aborted.
            anyio.BrokenResourceError: the reader of the pipe went away.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if self._backlog or self._flushing:
            self._backlog += data  # keep the order: behind what is already waiting for the pipe
            while self._flushing and len(self._backlog) > _HIGH_WATER:
                await self._drained.wait()
            if not self._flushing:
                await self._flush()
            return
        written = self._write(data)
        if written < len(data):
            self._backlog += data[written:]
            await self._flush()

    async def _flush(self) -> None:
        self._flushing = True
        try:
            while self._backlog:
                await anyio.wait_writable(self.fd)
                del self._backlog[: self._write(self._backlog)]
        finally:
            # A cancelled flush leaves its backlog to the next sender (order is kept either way).
            self._flushing = False
            self._drained.set()
            self._drained = anyio.Event()

    def abort(self) -> None:
        """Stop writing (the reader is gone or we are shutting down); wakes a parked flush."""
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self.fd)

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None
