"""A command's PID 1: run the command as PID 2, reap every orphan, report how the command ended, linger.

Stdlib only and no package import, like `exec.py` (the trampoline) and `zygote.py` (the bash zygote),
which both end their setup here: `fork_init` forks the command (the trampoline execs it in the
child), `spawn_init` starts it with `posix_spawn` (no copy of the zygote's memory). Either way this
process stays the namespace's PID 1 and writes a 3-byte record when the command ends (`s` or `x`,
the signal or exit status, whether leftovers remain) to the status fd: the trampoline's supervisor
reads it from a pipe, omega reads it from the zygote's channel.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from omega_mcp.sandbox.child import landlock
elif __package__:
    from omega_mcp.sandbox.child import landlock
else:
    import landlock  # exec.py or zygote.py put this directory on sys.path

__all__ = ["EXIT_SANDBOX_FAILURE", "LINGER_SECONDS", "fork_init", "prctl", "spawn_init"]

EXIT_SANDBOX_FAILURE = 125
"""Exit status when the sandbox could not be set up (the command did not run)."""
LINGER_SECONDS = 3.0
"""How long background leftovers may outlive the command when nobody kills them first (the bash
tool drains their output for 1.5 s, then kills the group)."""

_PR_SET_PDEATHSIG = 1


def prctl(option: int, arg: int) -> int:
    c_ulong = landlock.c_ulong
    return landlock.libc_function("prctl")(option, c_ulong(arg), c_ulong(0), c_ulong(0), c_ulong(0))


def fork_init(status_w: int) -> None:
    """Stay PID 1 (reaping orphans) and return in a child, which runs the command as PID 2.

    The kernel drops default-action signals sent to a namespace's PID 1 from inside it, so a
    command running as PID 1 could not `kill $$`, nor die of SIGPIPE or SIGXFSZ. When the command
    exits, its status goes to the supervisor (which exits with it at once) while PID 1 keeps the
    namespace, and so any background leftovers, for at most `LINGER_SECONDS`: the caller sees them
    as its process group still alive, may drain their output, and kills the group (PID 1
    included, which ends the namespace). Without a caller that lingers, they die on the deadline.
    """
    pid = os.fork()
    if pid == 0:
        return
    _init(pid, status_w, keep_deathsig=False)


def spawn_init(command: list[str], env: dict[str, str], status_fd: int) -> None:
    """Stay PID 1 and run `command` as PID 2 with `posix_spawn` (no copy of this process: the bash
    zygote's way), then report on `status_fd` as `fork_init` does; never returns. PID 1 keeps dying
    with its parent (the zygote's session process, which lives on) even while it lingers.
    """
    try:
        pid = os.posix_spawn(command[0], command, env)
    except OSError as exc:
        os.write(2, f"omega-mcp sandbox: cannot run {command[0]}: {exc.strerror}\n".encode(errors="replace"))
        os.write(status_fd, b"x\x7f\x00")  # 127, as a shell says for a command it cannot run
        os._exit(127)
    _init(pid, status_fd, keep_deathsig=True)


def _init(pid: int, status_w: int, *, keep_deathsig: bool) -> None:
    try:  # never hold the caller's pipe: its EOF must mean "no leftovers write to it"
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    except OSError:
        pass
    while True:
        try:
            reaped, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(EXIT_SANDBOX_FAILURE)
        if reaped == pid:
            break
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
        leftovers = True
    except ChildProcessError:
        leftovers = False
    if leftovers and not keep_deathsig:
        # Disarm PDEATHSIG: the supervisor exits as soon as it reads the record.
        prctl(_PR_SET_PDEATHSIG, 0)
    if os.WIFSIGNALED(status):
        record = b"s" + bytes([os.WTERMSIG(status)])
    else:
        record = b"x" + bytes([os.waitstatus_to_exitcode(status) & 0xFF])
    os.write(status_w, record + bytes([leftovers]))
    os.close(status_w)
    if leftovers:
        _linger()
    os._exit(0)


def _linger() -> None:
    import time

    deadline = time.monotonic() + LINGER_SECONDS
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass  # reap every orphan that has exited
        except ChildProcessError:
            break  # nothing left in the namespace
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    os._exit(0)  # as PID 1: the kernel kills whatever is left
