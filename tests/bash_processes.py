"""Find a bash command's processes on the host by a unique argument, for the bash and shells tests.

Every command runs in its own PID namespace, so `$$`, `$!` and the pids it prints mean nothing on
the host. The tests start `sleep MARKER` with a unique fractional MARKER (e.g. `30.004711081`) and
look for MARKER as a whole argument in /proc/*/cmdline; zombies count as gone. The kernel needs a
moment to tear a namespace down, so absence is polled with a bound of a few seconds.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import anyio

GONE_BOUND_SECONDS = 5.0
START_BOUND_SECONDS = 10.0
_POLL_SECONDS = 0.02


def _state(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"  # exited meanwhile


def pids_with_arg(arg: str) -> list[int]:
    """Live (non-zombie) host processes with `arg` as one whole element of their argv."""
    wanted = os.fsencode(arg)
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in argv and _state(entry) not in ("Z", "X"):
            found.append(int(entry))
    return found


async def wait_running(arg: str) -> None:
    """Wait (bounded) until a host process has `arg` in its argv."""
    with anyio.move_on_after(START_BOUND_SECONDS):
        while not pids_with_arg(arg):  # noqa: ASYNC110 - nothing signals another process's start
            await anyio.sleep(_POLL_SECONDS)
    assert pids_with_arg(arg), f"no process with {arg!r} in its argv started"


async def assert_gone(*args: str, bound: float = GONE_BOUND_SECONDS) -> None:
    """Wait at most `bound` seconds until no live host process has any of `args` in its argv, else fail."""

    def left() -> dict[str, list[int]]:
        return {arg: pids for arg in args if (pids := pids_with_arg(arg))}

    with anyio.move_on_after(bound):
        while left():  # noqa: ASYNC110 - nothing signals another process's death
            await anyio.sleep(_POLL_SECONDS)
    survivors = left()
    assert not survivors, f"still running {bound:g} s later: {survivors}"


def started_sleep(marker: str, redirect: str = "") -> str:
    """Shell text: start `sleep MARKER` (+ `redirect`) in the background, print `started` once it runs."""
    return (
        f"sleep {marker}{redirect} & "
        # `comm` turns from bash into sleep at exec; the forked bash's cmdline holds the marker too.
        'for i in $(seq 200); do [ "$(cat /proc/$!/comm 2>/dev/null)" = sleep ] && echo started && break; '
        "sleep 0.05; done"
    )


class Markers:
    """Makes unique `sleep` arguments; `kill_leftovers` SIGKILLs whatever still runs with one."""

    def __init__(self) -> None:
        self._made: list[str] = []

    def __call__(self) -> str:
        marker = f"30.{uuid.uuid4().int % 10**9:09d}"
        self._made.append(marker)
        return marker

    def kill_leftovers(self) -> None:
        # Only after a failure: a broken kill must not leave 30 s sleeps behind the test run.
        for marker in self._made:
            for pid in pids_with_arg(marker):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
