"""SIGINT/SIGTERM for the `omega-mcp` commands: hold them while nothing listens, act on them when something does.

Dying of a signal would orphan the downstream servers, so `main` creates one `SignalGuard`, calls
`hold()` before the first server is started, and passes the guard down to the command, whose
`until_signalled` task turns a signal (one held during startup included) into a cancellation of
the command's scope. All state lives on the guard: importing this module installs nothing.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence

import anyio
from anyio.abc import TaskStatus

__all__ = ["SignalGuard"]

logger = logging.getLogger("omega_mcp")


class SignalGuard:
    """Notes the SIGINT/SIGTERM that arrive while no receiver listens (startup, cleanup), for later."""

    def __init__(self) -> None:
        self._held: list[int] = []

    @property
    def held(self) -> Sequence[int]:
        """The signals noted while held, oldest first."""
        return tuple(self._held)

    def _note(self, signum: int, frame: object) -> None:
        self._held.append(signum)

    def hold(self) -> None:
        """Note SIGINT/SIGTERM instead of dying of them: dying would orphan the downstream servers.

        Installed before the first server is started, and again once a receiver is gone, so that a
        signal during startup cancels the command as soon as it listens, and one during the (bounded)
        cleanup cannot cut it short.
        """
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, self._note)

    async def until_signalled(
        self,
        scope: anyio.CancelScope,
        received: list[int] | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Cancel `scope` on SIGINT/SIGTERM, so shutdown runs the normal (bounded) cleanup path."""
        try:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                task_status.started()
                if self._held:
                    signum = self._held[0]  # it came while omega was starting
                else:
                    signum = await anext(aiter(signals))
                logger.info("received %s, shutting down", signal.Signals(signum).name)
                if received is not None:
                    received.append(signum)
                scope.cancel()
        finally:
            self.hold()
