"""Connection hygiene for the HTTP hub: half-open connections cannot starve the clients with a token.

A flood of connections that never send a complete request (1,100 of them against an open-files
limit of 1,024) would otherwise hold every descriptor: the accept loop fails with EMFILE and a real
client waits in the kernel's backlog forever. Three measures, decided: the soft open-files limit is
raised to the hard one at start (`raise_open_files_limit`); a connection must send a complete
request head within `HEADER_SECONDS` or it is closed; and connections that have not shown a valid
token (waiting for a first request, or idle after a refused one) are capped, the oldest closed
first, so the newest arrival (a real client's) always gets its turn. A connection whose request
carried a known token is trusted from then on (uvicorn's keep-alive timeout still ends it when idle).
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable, Sequence
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADER_SECONDS", "ConnectionGuard", "raise_open_files_limit"]

logger = logging.getLogger(__name__)

HEADER_SECONDS = 10.0
"""How long a connection may take to send a complete request head."""
_RESERVE_FDS = 256
"""Descriptors kept for everything but waiting connections: downstream pipes, bash, logs, trusted clients."""
_MIN_WAITING, _MAX_WAITING = 16, 4096


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            logger.debug("cannot raise the open-files limit: %s", exc)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def waiting_cap(open_files: int) -> int:
    """How many untrusted connections may wait at once under an open-files limit."""
    return max(_MIN_WAITING, min(_MAX_WAITING, (open_files - _RESERVE_FDS) // 2))


class ConnectionGuard:
    """The untrusted connections, oldest first; the protocol class uvicorn runs them with."""

    def __init__(self, authorized: Callable[[Sequence[tuple[bytes, bytes]]], bool], cap: int) -> None:
        self.authorized = authorized
        self.cap = cap
        self.header_seconds = HEADER_SECONDS
        self._waiting: dict[_GuardedH11, None] = {}
        self.evicted = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def wait(self, connection: _GuardedH11) -> None:
        self._waiting[connection] = None
        while len(self._waiting) > self.cap:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            self.evicted += 1
            oldest.drop()

    def leave(self, connection: _GuardedH11) -> None:
        self._waiting.pop(connection, None)

    def protocol(self) -> type[H11Protocol]:
        """uvicorn's h11 protocol bound to this guard (pass it as `uvicorn.Config(http=...)`)."""
        guard = self

        class _Bound(_GuardedH11):
            _guard = guard

        return _Bound


class _GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a request-head deadline and the guard's bookkeeping."""

    _guard: ConnectionGuard
    _timer: Any = None
    _trusted = False

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.leave(self)
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # a complete request head arrived
            self._cancel_timer()
            self._guard.leave(self)
            if not self._trusted and self._guard.authorized(self.headers):
                self._trusted = True
        elif self._timer is None and not self._trusted and self._idle():
            self._await_request()  # part of a next request: it has the same deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._trusted and not self.transport.is_closing():
            self._guard.wait(self)  # idle after a refused request: evictable again

    def _await_request(self) -> None:
        if self._trusted:
            return
        self._cancel_timer()
        self._timer = self.loop.call_later(self._guard.header_seconds, self._deadline)
        self._guard.wait(self)

    def _idle(self) -> bool:
        """No request of this connection is being answered (uvicorn types `cycle` as never None; it is at first)."""
        cycle: Any = self.cycle
        return cycle is None or bool(cycle.response_complete)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline(self) -> None:
        self._timer = None
        if self._idle():
            self.drop()

    def drop(self) -> None:
        """Close at once (no request of this connection is being answered)."""
        self._guard.leave(self)
        self._cancel_timer()
        if self.transport is not None and not self.transport.is_closing():  # pyright: ignore[reportUnnecessaryComparison]
            self.transport.abort()
