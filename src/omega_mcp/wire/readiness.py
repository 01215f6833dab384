"""Readiness callbacks that stay registered: the one place omega reaches below anyio.

anyio's `wait_readable` adds the descriptor to the event loop's selector for each wait and removes
it after (two `epoll_ctl` calls), and the task it wakes runs one loop iteration after the
wake-up. For the stdio relay, which moves one small message per wake-up, that was most of what a
relayed call cost. A `Watch` keeps one callback registered for as long as it is wanted and runs it
in the loop iteration that saw the descriptor ready, where the relay does its whole job
synchronously (read, route, write).

anyio has no such primitive; asyncio's loop (the backend `anyio.run` uses, and the only one omega
runs on) has: `add_reader` / `add_writer`. This module is the only user of asyncio in `src`.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - see the module docstring
from collections.abc import Callable

__all__ = ["Watch"]


class Watch:
    """`callback()` each time `fd` is ready (readable, or writable with `writable=True`) while started.

    Created in the event loop's thread, with a running asyncio loop. `start()` raises OSError when the
    descriptor cannot be polled (a regular file, `/dev/null`): such descriptors never block.
    """

    def __init__(self, fd: int, callback: Callable[[], None], *, writable: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._callback = callback
        self._writable = writable
        self.started = False

    def start(self) -> None:
        if not self.started:
            if self._writable:
                self._loop.add_writer(self._fd, self._callback)
            else:
                self._loop.add_reader(self._fd, self._callback)
            self.started = True

    def stop(self) -> None:
        if self.started:
            self.started = False
            if self._writable:
                self._loop.remove_writer(self._fd)
            else:
                self._loop.remove_reader(self._fd)
