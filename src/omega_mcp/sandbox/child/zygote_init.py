"""A command's PID 1 under the bash zygote (`zygote.py`), and what the zygote's processes share.

`CommandInit.run` is the child the session process forks for each command: it leads a new session,
sends omega its pid (as SCM_CREDENTIALS, with a pidfd of itself) on the command's channel, takes the
output pipe as stdout and stderr, then, in the trampoline's order, dies with the session process,
becomes undumpable, drops every other fd, lowers rlimits, copies the session's mount namespace and
adds the command's own /proc, read-only binds and socket covers (`mounts.call_setup`), enters the
working directory, joins a fresh keyring and enforces the session's Landlock ruleset, and finally
starts the command as PID 2 (`reaper.spawn_init`), whose end it reports on the channel. A failure is
one line on the output and exit 125: the command never runs. `encode`/`decode` are the wire format
of requests and answers. Stdlib only, imported like `exec.py`'s siblings.
"""

from __future__ import annotations

import array
import os
import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from omega_mcp.sandbox.child import exec as trampoline
    from omega_mcp.sandbox.child import landlock, mounts, private, reaper
elif __package__:
    from omega_mcp.sandbox.child import exec as trampoline
    from omega_mcp.sandbox.child import landlock, mounts, private, reaper
else:
    import exec as trampoline  # zygote.py put this directory on sys.path
    import landlock
    import mounts
    import private
    import reaper

__all__ = ["CommandInit", "Prepared", "close_all_but", "decode", "die_with_parent_alive", "encode", "fail"]

_CLONE_NEWNS = 0x00020000
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_MAX_FD = 1 << 20


def encode(fields: list[str]) -> bytes:
    """Fields as NUL-terminated bytes (paths and arguments cannot contain NUL)."""
    return b"".join(os.fsencode(field) + b"\0" for field in fields)


def decode(data: bytes) -> list[str]:
    """The fields of `encode`."""
    return [os.fsdecode(field) for field in data.split(b"\0")[:-1]]


def die_with_parent_alive(alive_r: int) -> None:
    """Die with the parent; `alive_r` reads end of file once the parent is gone (a process in a new
    PID namespace cannot compare getppid(), which is 0 there)."""
    if reaper.prctl(_PR_SET_PDEATHSIG, _SIGKILL):
        raise trampoline.errno_failure("prctl(PR_SET_PDEATHSIG)")
    os.set_blocking(alive_r, False)
    try:
        gone = os.read(alive_r, 1) == b""
    except BlockingIOError:
        gone = False
    os.close(alive_r)
    if gone:
        os._exit(reaper.EXIT_SANDBOX_FAILURE)


def close_all_but(keep: list[int]) -> None:
    """Close every fd from 3 up but `keep` (what a process forked from the zygote inherited)."""
    low = 3
    for fd in sorted(fd for fd in keep if fd >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _MAX_FD)


def fail(out: int, message: str) -> None:
    """One line on `out`, best effort (the command's output, where the model reads why it did not run)."""
    try:
        os.write(out, (message + "\n").encode(errors="replace"))
    except OSError:
        pass


class Prepared:
    """What a session process prepared once and hands to each command's PID 1 (fds it holds open)."""

    def __init__(self, ruleset: int, skipped: list[str], table: int) -> None:
        self.ruleset = ruleset
        """The session's Landlock ruleset, or -1 (none, or built per command: no session /tmp)."""
        self.skipped = skipped
        """Write roots the ruleset does not grant (gone, or reached through a symbolic link)."""
        self.table = table
        """The host's /proc/net/unix, or -1 (host sockets are not covered)."""
        self.alive_r = self.alive_w = -1
        """A pipe only the session process writes to: end of file means it is gone."""
        self.unshare = landlock.libc_function("unshare")


class CommandInit:
    """The command's PID 1, forked by the session process; `run` never returns."""

    def __init__(self, session: Prepared, spec: trampoline.Spec, cwd: str, env: dict[str, str]) -> None:
        self.session = session
        self.spec = spec
        self.cwd = cwd
        self.env = env

    def run(self, channel: socket.socket, out: int) -> None:
        session = self.session
        os.setsid()  # before omega learns the pid: it is the process group omega kills
        try:
            # The kernel attaches this process's host pid (SCM_CREDENTIALS); the pidfd tells omega
            # when this PID 1, and so its whole namespace, is gone.
            pidfd = os.pidfd_open(os.getpid())
            channel.sendmsg([encode(["pid"])], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd]))])
        except OSError:
            os._exit(reaper.EXIT_SANDBOX_FAILURE)  # omega gave up on the command: never run it
        os.close(pidfd)
        status = channel.detach()  # how the command ended goes here (`reaper.spawn_init`)
        os.close(session.alive_w)
        devnull = os.open("/dev/null", os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        try:
            self._setup(status)
        except (OSError, trampoline.SetupFailure) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            fail(2, f"omega-mcp sandbox: {reason}; the command did not run")
            os.write(status, b"x" + bytes([reaper.EXIT_SANDBOX_FAILURE]) + b"\0")
            os._exit(reaper.EXIT_SANDBOX_FAILURE)
        reaper.spawn_init(self.spec.command, self.env, status)

    def _setup(self, status: int) -> None:
        """Everything between the fork and the command's start, in the trampoline's order."""
        session, spec = self.session, self.spec
        die_with_parent_alive(session.alive_r)
        if not private.undumpable():
            raise trampoline.errno_failure("prctl(PR_SET_DUMPABLE)")
        close_all_but([status, session.ruleset, session.table])
        for signum in trampoline.DEFAULT_SIGNALS:
            trampoline.default_signal(signum)
        trampoline.set_limits(spec)
        sockets = mounts.host_sockets(spec.writable, spec.hide, session.table) if spec.hide_sockets else []
        if session.unshare(_CLONE_NEWNS):
            raise trampoline.errno_failure("unshare(mount namespace)")
        mounts.call_setup(
            spec.pid_max,
            sockets,
            read_only=spec.read_only,
            private_tmp="" if spec.tmp_source else spec.private_tmp,
            writable=spec.writable,
        )
        try:
            os.chdir(self.cwd)
        except OSError as exc:
            raise trampoline.SetupFailure(f"cannot enter {self.cwd}: {exc.strerror}") from None
        private.join_session_keyring()
        skipped = session.skipped
        if session.ruleset >= 0:
            landlock.enforce(session.ruleset)
        elif spec.landlock_abi:
            skipped = landlock.restrict_self(
                spec.landlock_abi, writable=spec.writable, devices=spec.devices, deny_tcp=spec.deny_tcp
            )
        for path in skipped:
            if os.path.lexists(path):
                fail(2, f"omega-mcp sandbox: {path} is no longer the directory omega started with; read-only")
        for fd in (session.ruleset, session.table):
            if fd >= 0:
                os.close(fd)
