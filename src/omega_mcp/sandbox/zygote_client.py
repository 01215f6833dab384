"""omega's side of the bash zygote (`zygote.py`): start it once, a session per private world, a process per command.

`start(launch)` runs one command of a `launch.BashLaunch` whose plan has namespaces and returns a
`ConfinedProcess` (an anyio `Process`: its pid is the command's process group, `wait()` its exit
status, `stdout` its combined output). The zygote is started on first use (or by `prestart`) from one
long-lived thread, so its PR_SET_PDEATHSIG is tied to omega's life, not to a worker thread's. A
session is keyed by what its commands share: the session options (`exec.CALL_OPTIONS` aside), the
identity (device, inode) of every path they name and the generation of omega's mount table, so a
secret that appears, a root that is replaced or a new host mount gets a fresh session instead of a
stale one. `forget(tmp_dir)` ends the sessions of a private /tmp (its client session ended).

Fail closed: a zygote or session that died is replaced, and a command whose launch never reached
the zygote is retried there; a command that ran is never retried; when no zygote can be started
the call fails with `SandboxUnavailableError`. Nothing here runs bash any other way.
"""

from __future__ import annotations

import array
import atexit
import errno
import os
import queue
import select
import socket
import stat
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from omega_mcp.errors import SandboxUnavailableError, ToolError
from omega_mcp.sandbox import probe
from omega_mcp.sandbox.child import exec as trampoline
from omega_mcp.sandbox.child.zygote import MAX_REQUEST_BYTES, encode
from omega_mcp.sandbox.confined import GONE_SECONDS, ConfinedProcess, NotStartedError, abandon, started

if TYPE_CHECKING:
    from omega_mcp.sandbox.launch import BashLaunch

__all__ = ["MAX_SESSIONS", "START_SECONDS", "forget", "launcher_pid", "prestart", "start"]

MAX_SESSIONS = 32
"""Sessions kept open at once; the least recently used beyond this are closed."""

_ZYGOTE = Path(__file__).parent / "child" / "zygote.py"
_BOOTSTRAP = "import sys;sys.path.append(sys.argv.pop(1));import zygote;raise SystemExit(zygote.main(sys.argv[1:]))"
_PATH_OPTIONS = frozenset({"--pin", "--protect", "--hide", "--rw", "--dev", "--tmp-source", "--private-tmp"})
START_SECONDS = 60.0
"""How long a launch may wait for the launcher to start the command (a zygote and session made first)."""
_ATTEMPTS = 3
_SPAWN_SECONDS = 30.0
_SOCKET_BUFFER = 1 << 20
_LOCALE = ("LANG", "LC_ALL", "LC_CTYPE")  # so the zygote encodes paths as omega does


_Key = tuple[object, ...]


# -- the zygote and its sessions ------------------------------------------------------------------


class _Spawner:
    """The one thread that starts zygotes. PR_SET_PDEATHSIG fires when the thread that forked a
    process exits, so the zygote is forked from this daemon thread, which lives as long as omega."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[list[str], int, list[object], threading.Event]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def spawn(self, argv: list[str], fd: int) -> subprocess.Popen[bytes]:
        """Start `argv` (passing `fd`) from the spawner thread; blocking.

        Raises:
            OSError: it cannot be started.
        """
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="omega-zygote-spawner", daemon=True)
                self._thread.start()
        box: list[object] = []
        done = threading.Event()
        self._requests.put((argv, fd, box, done))
        if not done.wait(_SPAWN_SECONDS):
            raise OSError(errno.ETIMEDOUT, "the zygote spawner thread did not answer")
        result = box[0]
        if isinstance(result, subprocess.Popen):
            return result  # pyright: ignore[reportUnknownVariableType]
        raise result if isinstance(result, OSError) else OSError(str(result))

    def _run(self) -> None:
        while True:
            argv, fd, box, done = self._requests.get()
            env = {name: os.environ[name] for name in _LOCALE if name in os.environ}
            try:
                box.append(
                    subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        pass_fds=(fd,),
                        env=env,
                        cwd="/",
                        start_new_session=True,
                    )
                )
            except BaseException as exc:  # handed to the caller
                box.append(exc)
            done.set()


@dataclass(eq=False)
class _Session:
    sock: socket.socket
    tmp: str

    def hung_up(self) -> bool:
        """Whether the session process is gone (its end of the socket is closed)."""
        poller = select.poll()
        try:
            poller.register(self.sock, select.POLLOUT)
        except (OSError, ValueError):
            return True
        return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


@dataclass(eq=False)
class _Zygote:
    process: subprocess.Popen[bytes]
    sock: socket.socket
    sessions: OrderedDict[_Key, _Session] = field(default_factory=OrderedDict[_Key, _Session])

    broken: bool = False
    """Its socket failed: it is replaced (and killed, should it still run)."""

    def alive(self) -> bool:
        return not self.broken and self.process.poll() is None

    def drop(self, session: _Session) -> None:
        for key, known in list(self.sessions.items()):
            if known is session:
                del self.sessions[key]
        session.sock.close()

    def close(self) -> None:
        for session in self.sessions.values():
            session.sock.close()
        self.sessions.clear()
        self.sock.close()


class _MountTable:
    """A counter that moves whenever omega's mount table changed (poll on /proc/self/mountinfo)."""

    def __init__(self) -> None:
        self.generation = 0
        self._poller: select.poll | None = None
        try:
            self._fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        self._poller = select.poll()
        self._poller.register(self._fd, select.POLLPRI)

    def current(self) -> int:
        if self._poller is not None and self._poller.poll(0):
            self.generation += 1
        return self.generation


_spawner = _Spawner()
_lock = threading.Lock()
_start_lock = threading.Lock()
_zygote: _Zygote | None = None
_mounts: _MountTable | None = None


@atexit.register
def _close() -> None:
    """omega exits: close our ends (the zygote dies with omega anyway, by PR_SET_PDEATHSIG)."""
    with _lock:
        if _zygote is not None:
            _zygote.close()


def _start_zygote() -> _Zygote:
    """The running zygote, started now if there is none (blocking: run it in a worker thread).

    Raises:
        SandboxUnavailableError: it cannot be started.
    """
    global _zygote  # noqa: PLW0603 - one zygote per omega process
    with _start_lock:
        current = _zygote
        if current is not None and current.alive():
            return current
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(_ZYGOTE.parent)]
        argv += ["--parent-pid", str(os.getpid()), "--fd", str(theirs.fileno())]
        try:
            process = _spawner.spawn(argv, theirs.fileno())
        except OSError as exc:
            mine.close()
            raise SandboxUnavailableError(f"bash cannot run: the sandbox launcher cannot be started: {exc}") from exc
        finally:
            theirs.close()
        mine.setblocking(False)
        with _lock:
            if current is not None:
                current.close()
            _zygote = _Zygote(process, mine)
        if current is not None:
            current.process.kill()  # when broken but still running: never two for one omega
            try:
                current.process.wait(GONE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        return _zygote


async def _running_zygote() -> _Zygote:
    current = _zygote
    if current is not None and current.alive():
        return current
    return await anyio.to_thread.run_sync(_start_zygote)


def prestart() -> None:
    """Start the zygote in the background where bash will use it (Linux with user namespaces), so the
    first bash call does not wait for it; a zygote that died meanwhile is replaced likewise."""
    current = _zygote
    if (current is None or not current.alive()) and sys.platform.startswith("linux"):
        threading.Thread(target=_start_quietly, name="omega-zygote-start", daemon=True).start()


def _start_quietly() -> None:
    if not probe.support().pid_namespace:
        return  # bash runs through the trampoline here
    try:
        _start_zygote()
    except SandboxUnavailableError:
        pass  # the first bash call reports it


def launcher_pid() -> int | None:
    """The zygote's pid, None when none runs (for tests and diagnostics)."""
    current = _zygote
    return current.process.pid if current is not None and current.alive() else None


def forget(tmp: Path) -> None:
    """Close the sessions of the private /tmp `tmp` (its client session ended); their commands still
    running finish as they would."""
    with _lock:
        current = _zygote
        if current is None:
            return
        for session in [s for s in current.sessions.values() if s.tmp == str(tmp)]:
            current.drop(session)


def _identity(path: str) -> tuple[int, ...] | None:
    try:
        found = os.lstat(path)
        if stat.S_ISLNK(found.st_mode):
            target = os.stat(path)
            return (found.st_dev, found.st_ino, found.st_mode, target.st_dev, target.st_ino)
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_mode)


def _split(options: Sequence[str]) -> tuple[list[str], list[str], _Key, str]:
    """(the session options, the command's own options, the session's key, its private /tmp directory)
    of a trampoline option list."""
    global _mounts  # noqa: PLW0603 - opened once, on first use
    shared: list[str] = []
    own: list[str] = []
    identities: list[object] = []
    tmp = ""
    i = 0
    while i < len(options):
        option = options[i]
        if option in trampoline.FLAGS:
            shared.append(option)
            i += 1
            continue
        value = options[i + 1]
        i += 2
        if option in trampoline.CALL_OPTIONS:
            if option != "--parent-pid":  # the zygote's parent is omega's, checked when it started
                own += [option, value]
            continue
        shared += [option, value]
        if option in _PATH_OPTIONS:
            identities.append(_identity(value))
        if option == "--tmp-source":
            tmp = value
    if _mounts is None:
        _mounts = _MountTable()
    return shared, own, (tuple(shared), tuple(identities), _mounts.current()), tmp


async def _session(zygote: _Zygote, shared: list[str], key: _Key, tmp: str) -> _Session:
    with _lock:
        known = zygote.sessions.get(key)
        if known is not None:
            zygote.sessions.move_to_end(key)
            return known
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    mine.setblocking(False)
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER)
    try:
        await _send(zygote.sock, encode(["session", *shared]), [theirs.fileno()])
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    session = _Session(mine, tmp)
    with _lock:
        known = zygote.sessions.get(key)
        if known is not None:  # another call made it meanwhile
            mine.close()
            return known
        if tmp:  # the same private /tmp under another key: stale, its commands finish on their own
            for stale in [s for s in zygote.sessions.values() if s.tmp == tmp]:
                zygote.drop(stale)
        zygote.sessions[key] = session
        while len(zygote.sessions) > MAX_SESSIONS:
            zygote.drop(next(iter(zygote.sessions.values())))
    return session


async def _send(sock: socket.socket, body: bytes, fds: list[int]) -> None:
    """One message with `fds`, waiting (cancellably) while the receiver's queue is full.

    Raises:
        NotStartedError: the receiver is gone.
        ToolError: the message is too large.
    """
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
    while True:
        try:
            sock.sendmsg([body], ancillary)
            return
        except BlockingIOError:
            try:
                await anyio.wait_writable(sock)
            except anyio.BusyResourceError:
                await anyio.sleep(0.005)  # another call waits on the same session: take turns
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:
                raise ToolError(
                    "The command and its environment are too large for the sandbox launcher; "
                    "shorten the command or write it to a file and run that."
                ) from None
            raise NotStartedError(f"the sandbox launcher is gone ({exc.strerror or exc})") from None


async def start(launch: BashLaunch, io: socket.socket | None = None) -> ConfinedProcess:
    """Run `launch` (its options, program, env and cwd) through the zygote; with `io`, a socket, the
    program's stdout and stderr are that socket (a helper omega talks to, `fileworker_client.py`) and
    the process's `stdout` reads nothing.

    Raises:
        SandboxUnavailableError: no sandbox launcher can be started, it keeps dying, or it does not start
            the command within `START_SECONDS`.
        ToolError: the launcher could not set the command's sandbox up, or the request is too large.
    """
    shared, own, key, tmp = _split(launch.options)
    env = [f"{name}={value}" for name, value in launch.env.items()]
    # The session's options went to the zygote once, with the session: each request has the rest.
    body = encode(["run", str(launch.cwd), str(len(own)), *own, str(len(env)), *env, *launch.program])
    if len(body) > MAX_REQUEST_BYTES:
        raise ToolError(
            f"The command and its environment ({len(body)} bytes) are too large for the sandbox launcher; "
            "write the command to a file and run that."
        )
    why = ""
    zygote: _Zygote | None = None
    session: _Session | None = None
    try:
        with anyio.fail_after(START_SECONDS):
            for _ in range(_ATTEMPTS):
                zygote, session = await _running_zygote(), None
                try:
                    session = await _session(zygote, shared, key, tmp)
                except NotStartedError as exc:
                    why = str(exc)
                    zygote.broken = True  # its socket failed: a new one is started
                    continue
                try:
                    return await _run(session, body, io)
                except NotStartedError as exc:
                    why = str(exc)
                    with _lock:
                        zygote.drop(session)
    except TimeoutError:
        # What did not answer (a session stopped or stuck setting up, or the zygote itself) is not asked
        # again; `_run` abandoned the launch, so the command never runs.
        with _lock:
            if zygote is not None and session is not None:
                zygote.drop(session)
            elif zygote is not None:
                zygote.broken = True
        raise SandboxUnavailableError(
            f"bash cannot run: the sandbox launcher did not start the command within {START_SECONDS:g} s; "
            "the command did not run"
        ) from None
    raise SandboxUnavailableError(
        f"bash cannot run: the sandbox launcher died {_ATTEMPTS} times before the command started ({why}); "
        "the command did not run"
    )


async def _run(session: _Session, body: bytes, io: socket.socket | None) -> ConfinedProcess:
    channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # before the command can say its pid
    channel.setblocking(False)
    out_r, out_w = os.pipe()
    try:
        try:
            await _send(session.sock, body, [theirs.fileno(), out_w if io is None else io.fileno()])
        finally:
            theirs.close()
            os.close(out_w)
        pid, pidfd = await started(channel)
    except anyio.get_cancelled_exc_class():
        abandon(channel)
        channel.close()
        os.close(out_r)
        raise
    except BaseException:
        channel.close()
        os.close(out_r)
        raise
    return ConfinedProcess(pid, pidfd, channel, out_r, session.hung_up)
