"""The HTTP hub's SSE event store: what a client missed on a closed stream, kept per session and bounded.

The SDK's session manager hands one `EventStore` to every session's transport and names a stream by
its request id, which each session numbers from 1: one shared store would replay one client's events
to another. So each session gets its own `SessionEvents` (`HubEvents.new`, given to the manager by
`_sdk.store_per_session`) and it is closed with the session: a `Last-Event-ID` is only ever looked up
among its own session's events. Event ids are a random per-session prefix and a counter, so they
cannot be guessed across sessions either. Memory is bounded per session (`SESSION_EVENTS` events,
`SESSION_BYTES` bytes) and for all sessions together (`TOTAL_BYTES`); past a bound the oldest events
go first (a client resuming from a dropped event then gets nothing replayed). A request id used again
in one session starts a new stream once its earlier stream has been answered, so a replay never
mixes two requests. `StreamPolling` (`[hub] sse_poll_seconds`) closes the stream of a request still
unanswered after that long, as SEP-1699 lets a server do: the client comes back with `Last-Event-ID`.

A resumed request stream is followed here, not handed back to the SDK: `replay_events_after` sends
what was missed and then what the request sends next, until its answer, and ends the stream there.
The SDK's own hand-over (register a new stream after the replay returns) loses a message routed in
between, and the closed POST stream's late clean-up can close the new one: under load a resumed call
then never got its answer, or its stream ended without it.
"""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore

__all__ = ["RETRY_MS", "SESSION_BYTES", "SESSION_EVENTS", "TOTAL_BYTES", "HubEvents", "SessionEvents", "StreamPolling"]

logger = logging.getLogger(__name__)

RETRY_MS = 1000
"""The `retry:` of every priming event: how long a client waits before it reconnects to a closed stream."""

SESSION_EVENTS = 1000
"""The most events one session keeps (its streams together, the priming events included)."""
SESSION_BYTES = 8 << 20
"""The most bytes of messages one session keeps; a longer message is sent but not kept."""
TOTAL_BYTES = 128 << 20
"""The most bytes of messages all sessions of one hub keep together."""
_COMPACT_SLACK = 1024
_STANDALONE = "_GET_stream"
"""The SDK's stream id of the standalone GET stream: it has no answer, so the SDK follows it after a replay."""


@dataclass(frozen=True, slots=True)
class _Event:
    stream: tuple[str, int]
    """The request id (the SDK's stream id) and which of its streams (a request id may come again)."""
    data: bytes | None
    """The message as JSON (None: a priming event, nothing to replay)."""
    answer: bool = False
    """The request's response: its stream ends with it."""


@dataclass(eq=False, slots=True)
class _Follower:
    """A resumed stream waiting for its request's next events (what `store_event` routes to it)."""

    stream: tuple[str, int]
    events: deque[tuple[str, _Event]] = field(default_factory=deque[tuple[str, _Event]])
    bytes: int = 0
    wake: anyio.Event = field(default_factory=anyio.Event)
    ended: bool = False
    """The session closed, or the client read too slowly for the bound: the stream ends (it may resume)."""


class HubEvents:
    """The stores of one hub's sessions, and the bound on their bytes together (oldest event first)."""

    def __init__(
        self,
        *,
        session_events: int = SESSION_EVENTS,
        session_bytes: int = SESSION_BYTES,
        total_bytes: int = TOTAL_BYTES,
    ) -> None:
        self.session_events = session_events
        self.session_bytes = session_bytes
        self.total_bytes = total_bytes
        self.bytes = 0
        """What all open sessions keep now."""
        self._order: deque[tuple[SessionEvents, str]] = deque()
        self._live = 0

    def new(self) -> SessionEvents:
        """The store of a session being opened."""
        return SessionEvents(self)

    def note_added(self, store: SessionEvents, event_id: str, size: int) -> None:
        self._order.append((store, event_id))
        self._live += 1
        self.bytes += size
        while self.bytes > self.total_bytes and self._order:
            old_store, old_id = self._order.popleft()
            old_store.forget(old_id)

    def note_removed(self, size: int) -> None:
        self._live -= 1
        self.bytes -= size
        if len(self._order) > 2 * self._live + _COMPACT_SLACK:  # entries of events already gone
            self._order = deque((s, e) for s, e in self._order if s.holds(e))


class SessionEvents(EventStore):
    """One session's events, in the order they were stored; closed (emptied) with the session."""

    def __init__(self, hub: HubEvents) -> None:
        self._hub = hub
        self._prefix = secrets.token_urlsafe(12)
        self._count = 0
        self._events: OrderedDict[str, _Event] = OrderedDict()
        self._bytes = 0
        self._streams: dict[str, int] = {}
        """Each request id's current stream (how many times it has been used before)."""
        self._answered: set[str] = set()
        """Request ids whose current stream has its answer: the next event of that id starts another."""
        self._followers: set[_Follower] = set()
        self.closed = False

    def holds(self, event_id: str) -> bool:
        return event_id in self._events

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def count(self) -> int:
        """How many events it keeps (no `__len__`: the SDK tests a store for truth)."""
        return len(self._events)

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        self._count += 1
        event_id = f"{self._prefix}.{self._count}"
        if self.closed:
            return event_id  # the session is ending: nothing will resume it
        if stream_id in self._answered:
            self._answered.discard(stream_id)
            self._streams[stream_id] = self._streams.get(stream_id, 0) + 1
        stream = (stream_id, self._streams.get(stream_id, 0))
        answer = isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and str(message.id) == stream_id
        if answer:
            self._answered.add(stream_id)
        data = None if message is None else message.model_dump_json(by_alias=True, exclude_unset=True).encode()
        size = len(data) if data is not None else 0
        event = _Event(stream, data, answer)
        if data is not None:
            self._pass_on(event_id, event, size)
        if size > self._hub.session_bytes:
            return event_id  # sent, but too long to keep: a resume past it starts after it
        self._events[event_id] = event
        self._bytes += size
        self._hub.note_added(self, event_id, size)
        while self._events and (len(self._events) > self._hub.session_events or self._bytes > self._hub.session_bytes):
            self.forget(next(iter(self._events)))
        return event_id

    def _pass_on(self, event_id: str, event: _Event, size: int) -> None:
        for follower in self._followers:
            if follower.stream != event.stream or follower.ended:
                continue
            follower.events.append((event_id, event))
            follower.bytes += size
            if len(follower.events) > self._hub.session_events or follower.bytes > self._hub.session_bytes:
                follower.ended = True  # a client this slow resumes again, from the last event it read
            follower.wake.set()

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        """Send the events of `last_event_id`'s stream after it; for a request's stream, also what comes
        next, until its answer (None: the stream ends). The standalone stream's id goes back to the SDK."""
        event = self._events.get(last_event_id)
        if event is None:
            return None
        stream_id, generation = event.stream
        kept = list(self._events.items())
        start = next(n for n, (event_id, _) in enumerate(kept) if event_id == last_event_id) + 1
        missed = [(event_id, later) for event_id, later in kept[start:] if later.stream == event.stream]
        if stream_id == _STANDALONE:
            await self._send(missed, send_callback)
            return stream_id
        over = generation < self._streams.get(stream_id, 0) or stream_id in self._answered
        follower = _Follower(event.stream, ended=over or self.closed)
        self._followers.add(follower)  # before the first await: nothing stored from here on is missed
        try:
            if await self._send(missed, send_callback):
                return None
            while not follower.ended or follower.events:
                if not follower.events:
                    await follower.wake.wait()
                    follower.wake = anyio.Event()
                    continue
                event_id, later = follower.events.popleft()
                follower.bytes -= len(later.data or b"")
                if await self._send(((event_id, later),), send_callback):
                    return None
            return None
        finally:
            self._followers.discard(follower)

    @staticmethod
    async def _send(events: Iterable[tuple[str, _Event]], send_callback: EventCallback) -> bool:
        """Send events with a message; True once the request's answer was sent."""
        for event_id, event in events:
            if event.data is None:
                continue
            message = types.jsonrpc_message_adapter.validate_json(event.data, by_name=False)
            await send_callback(EventMessage(message, event_id))
            if event.answer:
                return True
        return False

    def forget(self, event_id: str) -> None:
        """Drop one event (a bound was reached); nothing when it is gone already."""
        event = self._events.pop(event_id, None)
        if event is None:
            return
        size = len(event.data) if event.data is not None else 0
        self._bytes -= size
        self._hub.note_removed(size)

    def close(self) -> None:
        """The session ended: its events go (idempotent)."""
        self.closed = True
        for follower in self._followers:
            follower.ended = True
            follower.wake.set()
        for event_id in list(self._events):
            self.forget(event_id)
        self._streams.clear()
        self._answered.clear()


class StreamPolling(ServerMiddleware[Any]):
    """Closes the event stream of a request still unanswered after `seconds` (only where the SDK offers
    to: a handshake-era client at 2025-11-25 or later, whose stream began with a priming event). The
    request runs on; what it sends meanwhile is kept, and the client's GET with `Last-Event-ID` gets it."""

    def __init__(self, seconds: float, counters: Sequence[tuple[Callable[[], None], Callable[[], None]]] = ()) -> None:
        self.seconds = seconds
        self.counters = counters
        """(started, finished) of what counts requests in flight: a call whose stream was closed still
        is one (its HTTP request has ended), so shutdown and drain wait for it as for any other."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        close = ctx.close_sse_stream
        if close is None:
            return await call_next(ctx)

        counted = False

        async def close_later() -> None:
            nonlocal counted
            await anyio.sleep(self.seconds)
            for started, _ in self.counters:
                started()
            counted = True
            try:
                await close()
            except Exception as exc:  # boundary: the stream may be gone already
                logger.debug("closing a request's event stream failed: %r", exc)

        failure: Exception | None = None
        results: list[HandlerResult] = []
        try:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(close_later, name="omega sse poll")
                try:
                    results.append(await call_next(ctx))
                except Exception as exc:  # raised below as it is, not in the task group's exception group
                    failure = exc
                task_group.cancel_scope.cancel()
        finally:
            if counted:
                for _, finished in self.counters:
                    finished()
        if failure is not None:
            raise failure
        return results[0]
