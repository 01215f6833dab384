"""JSON-RPC message streams straight over non-blocking pipe file descriptors.

The SDK's stdio transports put a task and a zero-buffer memory stream between each pipe and the
dispatcher (and its server side reads and writes through worker threads), which costs several
event-loop round trips per message: most of what a proxy hop costs. These two classes implement
the SDK's `ReadStream` / `WriteStream` protocols directly on the descriptor.

A reader keeps a readiness callback registered (`readiness.Watch`) while nothing waits in its
buffer: each time the pipe is readable it reads, splits lines and offers each message, as plain
JSON, to its `take` hook (the tools/call relay in fastpath/relay.py), which can handle it right
there, in the same loop iteration, without a task switch. The first message the hook leaves is
kept, with everything after it, for `receive()` (the SDK's reading task), and the reader stops
watching until that task has taken them all: what the SDK reads is read at the SDK's pace, as
before, and a message never overtakes an earlier one. One reader at a time. A reader bounds what
one message may take (`max_message_bytes`): a longer line is never held. With an `oversize` hook
the reader drops it as it reads (keeping its head and tail, `oversize.py`) and the hook says what
stands in for it (an error answer for that request only); without one, the line ends the stream,
with `overflow` saying so. A line nobody can decode (bad JSON or UTF-8, nested too deeply, no
object) is dropped with a warning and told to the `unreadable` hook (the serving side answers it
with a parse error); reading goes on. A regular file (or `/dev/null`), which cannot be polled and
never blocks, is simply read when the buffer is empty.

The writer writes in the caller's turn what the pipe takes (`send_nowait`, or `send` / `send_raw`
for the SDK and other tasks) and the rest as the pipe drains, from a writability callback, in order;
`send_raw` waits only while more than a bounded backlog is queued, and `congested` tells the relay
to stop taking more for it (backpressure). Before the descriptors are closed, `detach()` takes their
callbacks off the loop. Both are generic over the message type the SDK side reads and writes: a
`Codec` handed in by the caller turns lines into those messages and back (`_sdk.SESSION_MESSAGES`
for the SDK's `SessionMessage`), so this module itself deals in bytes and dicts only.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

import anyio
import anyio.lowlevel

from omega_mcp.narrow import object_or_none
from omega_mcp.wire.jsonline import decode, encode_line
from omega_mcp.wire.oversize import HEAD, TAIL, Oversize, limit_text
from omega_mcp.wire.readiness import Watch

__all__ = ["Closing", "Codec", "MessageReadStream", "PipeReader", "PipeWriter"]

logger = logging.getLogger(__name__)

_READ_SIZE = 1 << 16
_FAIRNESS = 32  # messages delivered from the buffer before yielding to other tasks once
_HIGH_WATER = 1 << 20  # bytes queued behind a full pipe before senders wait

M = TypeVar("M")


class Codec(Protocol[M]):
    """How the SDK side's messages are read off a line and written to one (the hand-over to the SDK).

    `from_json` and `from_object` raise ValueError (pydantic's ValidationError is one) for what is not
    a message."""

    def from_json(self, line: bytes, /) -> M: ...

    def from_object(self, decoded: object, /) -> M: ...

    def to_json(self, item: M, /) -> bytes: ...


Take = Callable[[dict[str, Any]], bool]
"""Sees each decoded message before the SDK does (synchronously, in order); returns True when it took it."""
OversizeHook = Callable[[Oversize], Awaitable[dict[str, Any] | None]]
"""Told of each line over the bound (after it was dropped); returns a message to deliver instead, or None."""


class Closing:
    """`async with` over `aclose()`: the context-manager half of the SDK's stream protocols, shared by
    the writer and the read streams."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


@dataclass(slots=True)
class _Decoded:
    """A line already decoded and offered to `take`, which left it: the SDK's."""

    message: object


class MessageReadStream(Closing, Generic[M]):
    """The iteration and context-manager protocol of an SDK read stream, over `receive`/`aclose`."""

    async def receive(self) -> M | Exception:
        raise NotImplementedError

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> M | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class PipeReader(MessageReadStream[M]):
    """Newline-delimited JSON-RPC messages from a non-blocking descriptor (not closed by us)."""

    def __init__(self, fd: int, codec: Codec[M], *, label: str = "", max_message_bytes: int | None = None) -> None:
        os.set_blocking(fd, False)
        self.codec = codec
        self.fd = fd
        self.label = label
        self.max_message_bytes = max_message_bytes
        self.overflow: str | None = None
        """Set when a message longer than `max_message_bytes` ended the stream: why, in words."""
        self._lines: deque[bytes | Oversize | _Decoded] = deque()
        self._partial = bytearray()
        self._skipping: Oversize | None = None
        """The line over the bound being dropped as it arrives (its head and tail are kept)."""
        self.oversize: OversizeHook | None = None
        self.take: Take | None = None
        self.unreadable: Callable[[str], None] | None = None
        """Told of each line that is no JSON object (not JSON, bad UTF-8, nested too deeply, an array...),
        why in words, after it was dropped: the serving side answers it with a parse error."""
        self.congested: Callable[[], PipeWriter[Any] | None] | None = None
        """Where `take` writes, a writer with more than a bounded backlog (None: none is): `take` is then
        not offered more until `receive()` has waited for that writer to drain (backpressure)."""
        self._eof = False
        self._aborted = False
        self._closed = False
        self._streak = 0
        self._watch: Watch | None = None
        self._pollable = True
        self._waiting: anyio.Event | None = None
        """Set by the readiness callback for a `receive()` parked on an empty buffer."""

    @property
    def at_eof(self) -> bool:
        """Whether the other end closed the pipe (as opposed to `abort()`)."""
        return self._eof and not self._aborted

    def abort(self) -> None:
        """End the stream once what is already in the pipe has been read (the writer is gone)."""
        if self._aborted:
            return
        self._aborted = True
        while not self._eof and self._read_once():  # what is there now; nothing more will come
            pass
        self._eof = True
        self._advance()
        self._settle()

    def detach(self) -> None:
        """Stop watching the descriptor (before it is closed); what is buffered can still be received."""
        if self._watch is not None:
            self._watch.stop()

    # -- reading ------------------------------------------------------------------------------

    def _read_once(self) -> bool:
        """Read what the pipe has into the line buffer; False when it had nothing (it would block)."""
        try:
            chunk = os.read(self.fd, _READ_SIZE)
        except BlockingIOError:
            return False
        except OSError as exc:
            logger.debug("%s read failed: %s", self.label, exc)
            chunk = b""
        self._feed(chunk)
        return True

    def _feed(self, chunk: bytes) -> None:
        if not chunk:
            self._eof = True
            if self._skipping is not None:
                self._lines.append(self._skipping)
                self._skipping = None
            elif self._partial.strip():
                self._lines.append(bytes(self._partial))
                self._partial = bytearray()
            return
        if self._skipping is not None:
            chunk = self._skip(chunk)
            if not chunk:
                return
        self._partial += chunk
        if b"\n" in chunk:
            *lines, rest = self._partial.split(b"\n")
            self._partial = rest
            self._lines.extend(bytes(line) for line in lines if line.strip())
        self._bound()

    def _readable(self) -> None:
        """The readiness callback: read, let `take` have what it takes, leave the rest to `receive()`."""
        if self._read_once():
            self._advance()
        self._settle()

    def _advance(self) -> None:
        """Offer the buffered lines to `take` in order, up to the first one it leaves."""
        take, lines = self.take, self._lines
        while take is not None and lines:
            line = lines[0]
            if not isinstance(line, bytes) or self._blocked() is not None:
                return  # decoded already, over the bound, or backpressure: receive() takes it from here
            try:
                decoded = decode(line)
            except ValueError:
                return  # receive() reports it
            if not self._taken(take, decoded):
                lines[0] = _Decoded(decoded)
                return
            lines.popleft()

    def _blocked(self) -> PipeWriter[Any] | None:
        return self.congested() if self.congested is not None else None

    def _settle(self) -> None:
        """Watch the pipe only while the buffer is empty; wake a parked `receive()` when it is not."""
        if not (self._lines or self._eof or self._closed):
            return
        if self._watch is not None:
            self._watch.stop()
        if self._waiting is not None:
            self._waiting.set()

    def _taken(self, take: Take, decoded: object) -> bool:
        """Whether `take` took the decoded line (only a JSON object is offered to it)."""
        message = object_or_none(decoded)
        if message is None:
            return False
        try:
            return take(message)
        except Exception:  # boundary: a hook bug must not end the connection; the SDK path takes over
            logger.exception("%s take hook failed; passing the message on", self.label)
            return False

    async def _wait(self) -> None:
        """Wait for the readiness callback to fill the buffer (or end the stream)."""
        if self._pollable:
            if self._watch is None:
                self._watch = Watch(self.fd, self._readable)
            try:
                self._watch.start()
            except OSError:  # a regular file or /dev/null: never blocks, so it is just read
                self._pollable = False
        if not self._pollable:
            if not self._read_once():
                await anyio.sleep(0.01)  # cannot happen for such descriptors; never spin
            else:
                self._advance()
            return
        self._streak = 0
        waiting = self._waiting = anyio.Event()
        try:
            await waiting.wait()
        finally:
            self._waiting = None

    async def receive(self) -> M | Exception:
        while True:
            if self._lines:
                self._streak += 1
                if self._streak >= _FAIRNESS:  # a peer that never pauses must not starve the loop
                    self._streak = 0
                    await anyio.lowlevel.checkpoint()
                if not self._lines:
                    continue  # stop() emptied it meanwhile
                if isinstance(self._lines[0], bytes) and (blocked := self._blocked()) is not None:
                    await blocked.wait_drained()
                    continue
                message = await self._deliver(self._lines.popleft())
                if message is not None:
                    return message
                continue
            if self._eof or self._closed:
                raise anyio.EndOfStream
            await self._wait()

    async def _deliver(self, line: bytes | Oversize | _Decoded) -> M | Exception | None:
        if isinstance(line, Oversize):
            return await self._instead(line)
        try:
            if isinstance(line, _Decoded):
                return self.codec.from_object(line.message)
            return self._next(line)
        except (ValueError, RecursionError) as exc:  # a model nested deeper than validation recurses
            return self._invalid(line, exc)

    def _next(self, line: bytes) -> M | None:
        """The message on `line` for the SDK, or None when `take` took it (raises when it is not JSON-RPC)."""
        take = self.take
        if take is None:
            return self.codec.from_json(line)
        decoded: object = decode(line)
        if self._taken(take, decoded):
            return None
        return self.codec.from_object(decoded)

    def _invalid(self, line: bytes | _Decoded, exc: Exception) -> Exception | None:
        """A line that is not a JSON-RPC message: dropped with a warning, and a line that is no JSON object at
        all told to `unreadable` (else, as a JSON object the SDK could not read, handed to it as `exc`)."""
        why = _unreadable(line)
        shown = line if isinstance(line, bytes) else _shown(line.message)
        if why is None:
            logger.warning("%s ignoring a line that is not JSON-RPC: %.200r", self.label, shown)
            return exc
        logger.warning("%s ignoring a line that is %s: %.200r", self.label, why, shown)
        if self.unreadable is None:
            return exc
        try:
            self.unreadable(why)
        except Exception:  # boundary: a hook bug must not end the connection
            logger.exception("%s unreadable hook failed", self.label)
        return None

    async def _instead(self, oversize: Oversize) -> M | Exception | None:
        """What the hook delivers in place of a line over the bound (None: nothing)."""
        assert self.oversize is not None
        try:
            replacement = await self.oversize(oversize)
        except Exception:  # boundary: a hook bug must not end the connection
            logger.exception("%s oversize hook failed", self.label)
            return None
        if replacement is None:
            return None
        line = encode_line(replacement)
        try:
            return self._next(line)
        except (ValueError, RecursionError) as exc:  # a model nested deeper than validation recurses
            return self._invalid(line, exc)

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
        self._settle()

    async def aclose(self) -> None:
        self._closed = True
        self._settle()


class PipeWriter(Closing, Generic[M]):
    """Newline-delimited JSON-RPC messages to a non-blocking descriptor (not closed by us)."""

    def __init__(self, fd: int, codec: Codec[M], *, label: str = "") -> None:
        os.set_blocking(fd, False)
        self.codec = codec
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

    async def send(self, item: M, /) -> None:
        await self.send_raw(self.codec.to_json(item))

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


def _shown(decoded: object) -> bytes:
    try:
        return encode_line(decoded)[:200]
    except (ValueError, RecursionError):
        return b"(a line that cannot be shown)"


def _unreadable(line: bytes | _Decoded) -> str | None:
    """Why `line` is no JSON object, in words (None: it is one)."""
    if isinstance(line, _Decoded):
        decoded = line.message
    else:
        try:
            decoded = decode(line)
        except ValueError as exc:
            return f"not JSON ({str(exc)[:120]})"
    return None if isinstance(decoded, dict) else "not a JSON object"
