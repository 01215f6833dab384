"""The bash zygote: one pre-forked, single-threaded launcher that starts every bash command.

omega starts it once (`zygote_client.py`, from a long-lived thread, so PR_SET_PDEATHSIG ties it to
omega) as `python -I -S` holding one end of a UNIX socketpair; it never execs anything itself. Its
processes each die with their parent (PDEATHSIG, armed, then the parent checked to be still there):

- the zygote (host namespaces) forks a *keeper* for each session omega opens (a message with the
  session's trampoline options and a socket for the session's requests);
- the keeper enters the session's user, mount and PID namespaces (a network namespace too in sandbox
  mode), maps root to an unprivileged id, prepares once what the session's commands share
  (`mounts.session_setup`: binds, pins, the session's /tmp, covers, the private /dev, loopback; the
  Landlock ruleset; the host's socket table held open), forks the *session* process (the PID 1 of
  the session's PID namespace) and waits for it;
- the session process serves the session's requests (options, cwd, env, argv; a channel and the
  output pipe as SCM_RIGHTS) until omega closes its end: each command gets a PID namespace of its
  own (below the session's) and a fork, `zygote_init.CommandInit`, which tells omega its pid, sets
  the command up and reports its end on the channel itself; the session process only reaps it.
  `error\0MESSAGE` on the channel means the command could not be started at all.

A session that cannot be set up answers every request with `omega-mcp sandbox: ...; the command did
not run`. When the zygote dies, every keeper, session and command dies with it, and omega starts a
new zygote: bash never runs any other way. Stdlib only, like `exec.py`.
"""

from __future__ import annotations

import array
import gc
import os
import select
import socket
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from omega_mcp.sandbox.child import exec as trampoline
    from omega_mcp.sandbox.child import landlock, mounts, private, reaper
    from omega_mcp.sandbox.child.zygote_init import (
        CommandInit,
        Prepared,
        close_all_but,
        decode,
        die_with_parent_alive,
        encode,
    )
elif __package__:  # imported as part of the package (omega's client, tests)
    from omega_mcp.sandbox.child import exec as trampoline
    from omega_mcp.sandbox.child import landlock, mounts, private, reaper
    from omega_mcp.sandbox.child.zygote_init import (
        CommandInit,
        Prepared,
        close_all_but,
        decode,
        die_with_parent_alive,
        encode,
    )
else:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.append(_HERE)  # appended, so a stdlib module always wins over a file here
    import exec as trampoline
    import landlock
    import mounts
    import private
    import reaper
    from zygote_init import CommandInit, Prepared, close_all_but, decode, die_with_parent_alive, encode

__all__ = ["MAX_REQUEST_BYTES", "decode", "encode", "main"]

MAX_REQUEST_BYTES = 1 << 20
"""The largest request (options, env and argv): omega passes longer commands through a file."""

_CLONE_NEWPID = 0x20000000
_SIGKILL = 9
_MAX_FDS = 4
_FDS_SPACE = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)
_REFUSE_SECONDS = 0.2
_PROCESS_COUNT_SECONDS = 1.0


def _receive(sock: socket.socket, buffer: bytearray) -> tuple[list[str], list[int]] | None:
    """One message and the fds it carries; None at end of file.

    Raises:
        ValueError: the message was too long (its fds are closed).
    """
    size, ancillary, flags, _ = sock.recvmsg_into([buffer], _FDS_SPACE, socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            found = array.array("i")
            found.frombytes(data[: len(data) - len(data) % found.itemsize])
            fds.extend(found)
    if size == 0 and not fds:
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        raise ValueError("a request too large for the launcher")
    return decode(bytes(buffer[:size])), fds


def _say(channel: socket.socket, *fields: str) -> None:
    try:
        channel.send(encode(list(fields)))
    except OSError:
        pass  # omega no longer listens (a cancelled call): nothing to tell


# -- the zygote --------------------------------------------------------------------------------


def _serve_zygote(sock: socket.socket) -> None:
    """Fork a keeper for each session request until omega closes its end."""
    buffer = bytearray(MAX_REQUEST_BYTES)
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    keepers: dict[int, int] = {}  # pidfd -> pid
    while True:
        for fd, _ in poller.poll():
            if fd != sock.fileno():
                os.waitpid(keepers.pop(fd), 0)
                poller.unregister(fd)
                os.close(fd)
                continue
            try:
                message = _receive(sock, buffer)
            except (OSError, ValueError) as exc:
                sys.stderr.write(f"omega-mcp zygote: {exc}\n")
                continue
            if message is None:
                return  # omega is gone
            fields, fds = message
            if fields[:1] != ["session"] or len(fds) != 1:
                for extra in fds:
                    os.close(extra)
                sys.stderr.write(f"omega-mcp zygote: ignored a malformed request {fields[:1]!r}\n")
                continue
            pid = _fork_keeper(sock, fds[0], fields[1:])
            os.close(fds[0])
            if pid:
                pidfd = os.pidfd_open(pid)
                keepers[pidfd] = pid
                poller.register(pidfd, select.POLLIN)


def _fork_keeper(sock: socket.socket, session_fd: int, options: list[str]) -> int:
    zygote = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        _refuse(socket.socket(fileno=os.dup(session_fd)), f"cannot fork: {exc.strerror}")
        return 0
    if pid:
        return pid
    try:
        sock.detach()  # the zygote's socket is not the keeper's to close
        close_all_but([session_fd])
        _keeper(socket.socket(fileno=session_fd), options, zygote)
    finally:
        os._exit(0)


def _refuse(session: socket.socket, reason: str) -> None:
    """Answer every request already sent to a session that could not be set up, then give up."""
    buffer = bytearray(MAX_REQUEST_BYTES)
    message = f"omega-mcp sandbox: {reason}; the command did not run"
    poller = select.poll()
    poller.register(session, select.POLLIN)
    while poller.poll(int(_REFUSE_SECONDS * 1000)):
        try:
            received = _receive(session, buffer)
        except (OSError, ValueError):
            continue
        if received is None:
            break
        for fd in received[1][:1]:
            _say(socket.socket(fileno=fd), "error", message)
        for fd in received[1][1:]:
            os.close(fd)
    session.close()


# -- the keeper: a session's namespaces, made once ----------------------------------------------


def _keeper(session: socket.socket, options: list[str], zygote: int) -> None:
    try:
        trampoline.die_with_parent(zygote)
        spec = trampoline.parse([*options, "--", "/bin/true"])
        if not spec.pidns or spec.keep_program:
            raise ValueError("the zygote runs commands with --pidns (and never --keep-program)")
        # The host's socket table, opened before the network namespace: read again for every command.
        table = os.open("/proc/self/net/unix", os.O_RDONLY | os.O_CLOEXEC) if spec.hide_sockets else -1
        outer_uid = os.getuid()  # inside the user namespace root is someone else, and not exempt
        private.set_rlimits(spec.rlimits, 0)  # every command inherits them; RLIMIT_NPROC is per command
        trampoline.unshare_namespaces(net=spec.netns)
        # Only now: a process that is not dumpable cannot write its own id maps (its /proc files are root's).
        private.undumpable()
        mounts.session_setup(
            spec.netns,
            spec.binds,
            spec.hide,
            private_tmp=spec.private_tmp,
            writable=spec.writable,
            tmp_source=spec.tmp_source,
            devices=spec.devices if spec.private_dev else None,
        )
        ruleset, skipped = -1, []
        # Without a session directory each command gets an empty /tmp of its own, mounted after this:
        # its PID 1 builds the ruleset then (Landlock grants inodes, and that one does not exist yet).
        if spec.landlock_abi and not (spec.private_tmp and not spec.tmp_source):
            ruleset, skipped = landlock.ruleset(
                spec.landlock_abi, writable=spec.writable, devices=spec.devices, deny_tcp=spec.deny_tcp
            )
    except (ValueError, OSError, OverflowError, trampoline.SetupFailure) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _refuse(session, reason)
        return
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        _Session(session, spec, Prepared(ruleset, skipped, table), outer_uid).serve(alive_r)
        os._exit(0)
    # Only the session process holds the session's socket: omega sees EPIPE when it is gone.
    session.close()
    os.close(alive_r)
    for fd in (ruleset, table):
        if fd >= 0:
            os.close(fd)
    while True:
        try:
            if os.waitpid(pid, 0)[0] == pid:
                return
        except ChildProcessError:
            return


# -- the session process: one fork per command ---------------------------------------------------


class _Session:
    """The session's PID 1: forks each command's PID 1 and reaps it."""

    def __init__(self, sock: socket.socket, spec: trampoline.Spec, prepared: Prepared, outer_uid: int) -> None:
        self.sock = sock
        self.spec = spec
        self.prepared = prepared
        self.outer_uid = outer_uid
        self.processes = (0, -_PROCESS_COUNT_SECONDS)  # (count of outer_uid's processes, when counted)
        self.commands: dict[int, int] = {}  # pidfd -> pid (in the session's namespace)
        self.poller = select.poll()
        self.pidns = -1
        self.setns = landlock.libc_function("setns")

    def serve(self, keeper_alive: int) -> None:
        die_with_parent_alive(keeper_alive)
        private.undumpable()
        self.pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.prepared.alive_r, self.prepared.alive_w = os.pipe()
        buffer = bytearray(MAX_REQUEST_BYTES)
        accepting = True
        self.poller.register(self.sock, select.POLLIN)
        while accepting or self.commands:
            for fd, _ in self.poller.poll():
                if fd == self.sock.fileno():
                    accepting = self._accept(buffer)
                    if not accepting:
                        self.poller.unregister(self.sock)
                elif fd in self.commands:
                    os.waitpid(self.commands.pop(fd), 0)
                    self.poller.unregister(fd)
                    os.close(fd)

    def _accept(self, buffer: bytearray) -> bool:
        try:
            received = _receive(self.sock, buffer)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"omega-mcp zygote: {exc}\n")
            return True
        if received is None:
            return False
        fields, fds = received
        if fields[:1] != ["run"] or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            return True
        channel = socket.socket(fileno=fds[0])
        try:
            self._start(channel, fds[1], fields[1:])
        except (ValueError, OSError) as exc:
            _say(channel, "error", f"omega-mcp sandbox: {exc}; the command did not run")
        finally:
            channel.close()  # the command's PID 1 holds the channel from now on
            os.close(fds[1])
        return True

    def _nproc(self, headroom: int) -> list[tuple[str, int]]:
        """RLIMIT_NPROC as the trampoline sets it (the uid's processes + `headroom`; none for root), with
        the count (a walk of /proc) kept for a second: the real cap is the command's pid_max."""
        if not headroom or self.outer_uid == 0:
            return []
        count, when = self.processes
        if time.monotonic() - when >= _PROCESS_COUNT_SECONDS:
            found = private.processes_of(self.outer_uid)
            if found is None:
                return []
            count, when = self.processes = found, time.monotonic()
        return [("nproc", count + headroom)]

    def _start(self, channel: socket.socket, out: int, fields: list[str]) -> None:
        cwd, rest = fields[0], fields[1:]
        count = int(rest[0])
        options, rest = rest[1 : 1 + count], rest[1 + count :]
        count = int(rest[0])
        env: dict[str, str] = {}
        for item in rest[1 : 1 + count]:
            name, _, value = item.partition("=")
            env[name] = value
        spec = self.spec.for_command([*options, "--", *rest[1 + count :]])
        spec.rlimits = self._nproc(spec.nproc_headroom)  # the session's other limits are set already
        spec.nproc_headroom = 0  # decided here: inside the user namespace the uid is not the one that counts
        # A PID namespace of its own for each command: back to ours, then a new one for the next child.
        if self.setns(self.pidns, _CLONE_NEWPID) or self.prepared.unshare(_CLONE_NEWPID):
            raise OSError(landlock.get_errno(), "a PID namespace for the command")
        pid = os.fork()
        if pid == 0:
            gc.disable()  # short-lived: a collection would only copy pages shared with this process
            try:
                CommandInit(self.prepared, spec, cwd, env).run(channel, out)
            finally:
                os._exit(reaper.EXIT_SANDBOX_FAILURE)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            os.kill(pid, _SIGKILL)  # it could never be reaped in time: never leave it running
            os.waitpid(pid, 0)
            raise
        self.commands[pidfd] = pid
        self.poller.register(pidfd, select.POLLIN)


def main(argv: list[str]) -> int:
    """`--parent-pid PID --fd FD`: serve omega on socket FD, dying with PID."""
    try:
        options = dict(zip(argv[::2], argv[1::2], strict=True))
        parent, fd = int(options["--parent-pid"]), int(options["--fd"])
    except (KeyError, ValueError):
        sys.stderr.write("usage: zygote.py --parent-pid PID --fd FD\n")
        return 2
    try:
        trampoline.die_with_parent(parent)
    except trampoline.SetupFailure:
        return 1
    gc.freeze()  # the forked processes never copy pages to collect what exists now
    # What every command's PID 1 would otherwise import or look up, once per command.
    for preload in ("fcntl", "resource"):
        __import__(preload)
    for name in ("mount", "prctl", "setns", "signal", "socket", "syscall", "unshare"):
        landlock.libc_function(name)

    _serve_zygote(socket.socket(fileno=fd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
