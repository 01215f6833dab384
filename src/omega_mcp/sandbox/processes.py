"""Process groups: start a child in a new session, tell whether its group still lives, stop it (bounded).

A child started here leads a new session, so its process group id is its own pid for as long as any
member lives, even once the leader was reaped: callers pass that pid, never `os.getpgid()`. A group
whose only members are zombies counts as dead, so an init that does not reap orphans (some
containers) cannot keep a wait running to its bound; every wait here is bounded. Shared by the bash
tool, background shells and stdio downstream servers; stdlib and anyio only (no `mcp` import). A
command of the bash zygote knows when its whole tree is gone (`tree_alive`, `terminate_tree`).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import Process

from omega_mcp.sandbox.confined import ConfinedProcess

__all__ = [
    "TERMINATE_GRACE_SECONDS",
    "group_alive",
    "open_group",
    "popen_group",
    "signal_group",
    "terminate_group",
    "terminate_tree",
    "tree_alive",
    "wait_group_exit",
]

TERMINATE_GRACE_SECONDS = 2.0
"""Between SIGTERM and SIGKILL of a process group."""

_POLL_SECONDS = 0.02
"""No event tells us another process group died: it is polled this often, within a bound."""


def popen_group(
    argv: Sequence[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
) -> subprocess.Popen[bytes]:
    """Start `argv` as the leader of a new session (its pid is the group id); blocking API.

    Raises:
        OSError: the command cannot be started.
    """
    return subprocess.Popen(
        list(argv), stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True
    )


async def open_group(
    argv: Sequence[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
) -> Process:
    """Start `argv` as the leader of a new session (its pid is the group id); anyio API.

    Raises:
        OSError: the command cannot be started.
    """
    return await anyio.open_process(
        list(argv), stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True
    )


def _live_member(pgid: int) -> bool:
    """Whether /proc lists a non-zombie process in group `pgid` (True when /proc cannot tell)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile, or unreadable
        # After the command name: state, ppid, pgrp.
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` still has a live (non-zombie) member.

    Zombies count as gone: an init that does not reap orphans (some containers) would otherwise
    keep every wait on the group running to its bound.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # EPERM proves nothing; ask /proc
    return _live_member(pgid)


def tree_alive(process: Process) -> bool:
    """Whether `process` (a new session's leader) or anything else of its process group still runs.

    A command the bash zygote started (`ConfinedProcess`) whose PID 1 is gone has nothing left, as
    its PID namespace died with it: no walk of /proc (its PID 1 may be a zombie nobody reaped yet).
    """
    if isinstance(process, ConfinedProcess) and process.gone:
        return False
    return group_alive(process.pid)


async def terminate_tree(process: Process) -> None:
    """`terminate_group` of `process`'s group, unless it is known to be gone (`tree_alive`). Bounded."""
    if not (isinstance(process, ConfinedProcess) and process.gone):
        await terminate_group(process.pid)


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to the group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # some member is not ours to signal; keep escalating for the rest
    return True


async def wait_group_exit(pgid: int, seconds: float, *, reap: Callable[[], object] | None = None) -> bool:
    """Wait at most `seconds` until group `pgid` has no live member; True if it is gone.

    `reap` (e.g. `Popen.poll`) is called before every look, so a leader nobody else waits for is reaped.
    """
    with anyio.move_on_after(seconds):
        while True:
            if reap is not None:
                reap()
            if not group_alive(pgid):
                return True
            await anyio.sleep(_POLL_SECONDS)
    return False


async def terminate_group(
    pgid: int,
    grace_seconds: float = TERMINATE_GRACE_SECONDS,
    *,
    kill_wait_seconds: float = 0.0,
    reap: Callable[[], object] | None = None,
) -> None:
    """SIGTERM group `pgid`, wait at most `grace_seconds`, then SIGKILL what is left.

    With `kill_wait_seconds`, also wait that long for the group to die after the SIGKILL. `reap` is
    passed to `wait_group_exit`. Bounded; safe to call on a dead group.
    """
    if not signal_group(pgid, signal.SIGTERM):
        return
    if await wait_group_exit(pgid, grace_seconds, reap=reap):
        return
    if signal_group(pgid, signal.SIGKILL) and kill_wait_seconds > 0:
        await wait_group_exit(pgid, kill_wait_seconds, reap=reap)
