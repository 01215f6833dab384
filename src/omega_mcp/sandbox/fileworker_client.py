"""omega's side of the file tools' worker (`child/fileworker.py`): one per client session, doing their file work.

`worker_for(policy)` returns the session's worker (started on first use through the bash zygote, as
bash's commands are: `zygote_client.start` with the worker as the program and a socket as its
output), or None where a session has no sandbox world (rwx mode, no user namespaces, no private
/tmp): then the path checks of `paths.py` apply alone. `FileWorker.open` asks it to open a path for
`read`, `open_leaf` and `replace` to read and atomically replace a file for `edit` and `write` (the
content passed as a memfd, so its size is no concern of the socket's); the kernel, inside the world,
resolves each path, so a symbolic link, `/proc/<pid>/root` or a rename cannot lead anywhere bash could
not go, and Landlock, read-only binds and covers refuse what bash could not write. A worker that died
or stopped answering is replaced on the next call; `forget(tmp_dir)` ends the worker of a private /tmp
(its session ended); every wait is bounded.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import os
import socket
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from omega_mcp.errors import SandboxUnavailableError, ToolError
from omega_mcp.sandbox import mountplan, worldopen, zygote_client
from omega_mcp.sandbox.confined import ConfinedProcess
from omega_mcp.sandbox.launch import bash_launch
from omega_mcp.sandbox.policy import SandboxPolicy

if TYPE_CHECKING:
    from omega_mcp.sandbox.tracker import ProtectedTree

__all__ = [
    "ANSWER_SECONDS",
    "MAX_WORKERS",
    "FileWorker",
    "Replaced",
    "StaleWorkerError",
    "WorkerGoneError",
    "discard",
    "forget",
    "interpreter",
    "running",
    "started",
    "worker_for",
]

ANSWER_SECONDS = 10.0
"""How long one request may wait for the worker's answer before the worker counts as stuck."""
_WORKER = Path(__file__).parent / "child" / "fileworker.py"


def interpreter(policy: SandboxPolicy) -> str:
    """The interpreter the worker runs on: the one running omega, resolved (a venv's link leads to its
    base), unless that lies where the world does not show it: a venv made with copies
    (`venv.EnvBuilder()`'s default, `python -m venv --copies`) has a binary of its own, which under
    /tmp lies below the session's private /tmp, and hidden paths are covered. Then the base
    installation's (a venv's `home`): the worker needs the standard library only, which the base has."""
    own = os.path.realpath(sys.executable)
    unseen = (mountplan.real_own(policy.tmp_dir), *(mountplan.real_own(p) for p in policy.hidden))
    if not any(mountplan.within(Path(own), place) for place in unseen):
        return own
    base: str = getattr(sys, "_base_executable", "") or sys.executable
    return os.path.realpath(base)


@functools.cache
def _source() -> str:
    return _WORKER.read_text(encoding="utf-8") + "\nraise SystemExit(main())\n"


def _worker_argv(policy: SandboxPolicy) -> tuple[str, ...]:
    """The worker's command line: an interpreter the world shows (`interpreter`) running the module's
    source given on the command line, so nothing is looked up by path inside the world, where omega's
    own install may be hidden (a venv under /tmp lies below the session's private /tmp)."""
    return (interpreter(policy), "-I", "-S", "-c", _source())


_FDS_SPACE = socket.CMSG_SPACE(2 * array.array("i").itemsize)  # the most an answer carries: `root`
_MAX_ANSWER = 8192  # a link's target is at most 4096 bytes


@dataclass(frozen=True, slots=True)
class Replaced:
    """What `FileWorker.replace` did: `created`, `updated`, `link` (a symbolic link replaced), or did not:
    `changed` (not the file `expect` named), `link-to-directory` (`target`), `not-regular` (`mode`)."""

    outcome: str
    target: str = ""
    mode: int = 0


class WorkerGoneError(Exception):
    """The worker died or did not answer in time: it is replaced on the next `worker_for`."""


class StaleWorkerError(Exception):
    """The worker's read-only binds are older than the protected names (`FileWorker.stale`): nothing
    was done; discard it and ask `worker_for` with the tree again."""


@dataclass(eq=False)
class FileWorker:
    """One session's worker: its process (a zygote command) and the socket omega asks it on."""

    process: ConfinedProcess
    sock: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)
    broken: bool = False
    generation: int = -1
    """The `ProtectedTree.generation` whose protected names it has bound read-only (-1: none)."""
    _root: worldopen.WorldRoot | None = None
    _root_asked: bool = False
    _root_lock: threading.Lock = field(default_factory=threading.Lock)

    def alive(self) -> bool:
        return not self.broken and not self.process.gone

    def stale(self, tree: ProtectedTree) -> bool:
        """Whether a protected name appeared, was replaced or went since it started (blocking: a worker
        thread): its read-only binds are not the ones bash would get now."""
        return tree.current()[0] != self.generation

    def _ask(self, fields: list[bytes], fd: int = -1, seconds: float = ANSWER_SECONDS) -> tuple[list[bytes], list[int]]:
        """Send one request (with `fd` attached) and take its answer: (fields, fds received).

        Raises:
            OSError: the kernel refused inside the world (`err` answer).
            WorkerGoneError: the worker is gone, stuck or answered nonsense.
        """
        body = b"".join(f + b"\0" for f in fields)
        rights = [] if fd < 0 else [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
        with self.lock:
            if self.broken:
                raise WorkerGoneError("the file worker stopped")
            try:
                self.sock.settimeout(seconds)
                self.sock.sendmsg([body], rights)
                data, ancillary, _, _ = self.sock.recvmsg(_MAX_ANSWER, _FDS_SPACE, socket.MSG_CMSG_CLOEXEC)
            except OSError as exc:  # TimeoutError included
                self.broken = True
                raise WorkerGoneError(f"the file worker did not answer ({exc.strerror or exc})") from None
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                found = array.array("i")
                found.frombytes(payload[: len(payload) - len(payload) % found.itemsize])
                fds.extend(found)
        answer = data.split(b"\0")[:-1]
        if answer[:1] == [b"err"] and len(answer) == 2 and answer[1].isdigit():
            for got in fds:
                os.close(got)
            number = int(answer[1])
            raise OSError(number, os.strerror(number))
        if not answer:
            self.broken = True
            raise WorkerGoneError("it died")
        return answer, fds

    def _gibberish(self, fds: list[int]) -> WorkerGoneError:
        for got in fds:
            os.close(got)
        self.broken = True
        return WorkerGoneError("the file worker gave an answer omega does not understand")

    def world_root(self) -> worldopen.WorldRoot | None:
        """The world's `/`, asked of the worker once (`worldopen.py`), or None where omega cannot open
        from it (no openat2, a worker that cannot say): then every open is the worker's."""
        with self._root_lock:
            if not self._root_asked and not self.broken and worldopen.usable():
                self._root_asked = True
                try:
                    answer, fds = self._ask([b"root"])
                except (OSError, WorkerGoneError):
                    return None
                if answer != [b"ok"] or len(fds) != 2:
                    for got in fds:
                        os.close(got)
                    return None
                self._root = worldopen.WorldRoot(*fds)
            return self._root

    def open(self, path: Path) -> tuple[int, bool]:
        """Open `path` in the session's world: (an fd, whether it is open for reading). A regular file
        (or /dev/null) comes open read-only; anything else as an O_PATH fd, for its kind to be named.
        Opened by omega from the world's root where the kernel's answer is the worker's (`worldopen.py`),
        else by the worker. Blocking, bounded by `ANSWER_SECONDS`: call it from a worker thread.

        Raises:
            OSError: the kernel refused inside the world (ENOENT, EACCES, ...).
            WorkerGoneError: the worker is gone or stuck.
        """
        encoded = os.fsencode(path)
        root = None if self.broken else self.world_root()
        if root is not None and (fd := root.open_readable(encoded)) is not None:
            return fd, True
        answer, fds = self._ask([b"open", encoded])
        if answer[0] == b"ok" and len(answer) == 2 and len(fds) == 1:
            return fds[0], answer[1] == b"r"
        raise self._gibberish(fds)

    def open_leaf(self, path: Path, parent: Path) -> int | str:
        """Open the file `path` for reading in the world without following it (edit), its directory
        being really `parent` (in the world's terms): an fd, or the target of the link it is.

        Raises:
            OSError: refused or missing inside the world (EXDEV: the directory is elsewhere now).
            WorkerGoneError: the worker is gone or stuck.
        """
        encoded, where = os.fsencode(path), os.fsencode(parent)
        root = None if self.broken else self.world_root()
        if root is not None and (fd := root.open_leaf(encoded, where)) is not None:
            return fd
        answer, fds = self._ask([b"leaf", encoded, where])
        if answer[0] == b"ok" and len(fds) == 1:
            return fds[0]
        if answer[0] == b"link" and len(answer) == 2 and not fds:
            return os.fsdecode(answer[1])
        raise self._gibberish(fds)

    def replace(
        self, path: Path, parent: Path, data: bytes, *, create: bool, expect: os.stat_result | None
    ) -> Replaced:
        """Atomically make `path` a regular file holding `data`, in the world (`child/fileworker.py`).

        `parent` is where `path`'s directory must really be (world terms); `create` makes missing
        directories; `expect` (edit) replaces only the file that was read.

        Raises:
            OSError: the kernel refused inside the world (EACCES, EROFS, ENOENT, EXDEV, ...).
            WorkerGoneError: the worker is gone or stuck.
        """
        content = os.memfd_create("omega-write", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(content, view) :]
            os.lseek(content, 0, os.SEEK_SET)
            identity = b""
            if expect is not None:
                identity = b"%d:%d:%d:%d:%d" % (
                    expect.st_dev,
                    expect.st_ino,
                    expect.st_size,
                    expect.st_mtime_ns,
                    expect.st_ctime_ns,
                )
            fields = [b"replace", os.fsencode(path), os.fsencode(parent), b"1" if create else b"0", identity]
            # Writing and fsyncing a large file takes time: the bound grows with the size (10 MB/s).
            answer, fds = self._ask(fields, content, ANSWER_SECONDS + len(data) / 10e6)
        finally:
            os.close(content)
        if fds:
            raise self._gibberish(fds)
        if answer[0] == b"ok" and len(answer) == 2 and answer[1] in (b"created", b"updated", b"link"):
            return Replaced(os.fsdecode(answer[1]))
        if answer[0] == b"changed" and len(answer) == 1:
            return Replaced("changed")
        if answer[0] == b"link" and len(answer) == 2:
            return Replaced("link-to-directory", os.fsdecode(answer[1]))
        if answer[0] == b"notreg" and len(answer) == 2 and answer[1].isdigit():
            return Replaced("not-regular", mode=int(answer[1]))
        raise self._gibberish([])

    def close(self) -> None:
        self.broken = True
        self.sock.close()  # end of file: the worker exits
        self.process.discard()
        with self._root_lock:  # after an `_ask` for it under way (bounded), which the broken flag ends
            if self._root is not None:
                self._root.close()


MAX_WORKERS = zygote_client.MAX_SESSIONS
"""Workers kept at once (one per session that read something); the least recently used beyond this
are stopped, and started again should their session read once more."""
_workers: OrderedDict[str, FileWorker] = OrderedDict()
_lock = threading.Lock()


async def worker_for(policy: SandboxPolicy, tree: ProtectedTree | None = None) -> FileWorker | None:
    """The worker of `policy`'s session (started now if it has none or it died), None where the
    session has no sandbox world to work in. With `tree` (the session's protected names), one it
    starts has the protected names that exist bound read-only, as each bash command has
    (`FileWorker.stale` says when they changed since).

    Raises:
        ToolError: the session has a world but its worker cannot be started (fail closed: the file
            tools never fall back to opening its files from omega's process).
    """
    tmp = policy.private_tmp
    if tmp is None or policy.mode == "rwx" or not sys.platform.startswith("linux"):
        return None
    key = str(tmp)
    known = _workers.get(key)
    if (live := started(policy)) is not None:
        return live
    # The worker's world grants what the file tools may write (`file_write_roots`): bash's roots plus
    # those only the file tools have ($OMEGA_HOME); omega's checks still refuse its protected parts.
    extra = tuple(r for r in policy.file_write_roots if r not in policy.bash_write_roots)
    generation, binds = -1, list[str]()
    if tree is not None:
        generation, binds = await anyio.to_thread.run_sync(functools.partial(tree.current, binds=True))
    try:
        launch = bash_launch(policy.with_write_roots(extra) if extra else policy, "", binds)
    except SandboxUnavailableError:
        return None  # bash itself cannot run here: the path checks apply alone, as without a world
    if not launch.zygote:
        return None
    program = _worker_argv(policy)
    launch = dataclasses.replace(launch, program=program, env={"PATH": "/usr/bin:/bin"})
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        process = await zygote_client.start(launch, theirs)
    except (SandboxUnavailableError, ToolError) as exc:
        mine.close()
        raise ToolError(f"the file tools cannot work in this session's sandbox: {exc}") from None
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    worker = FileWorker(process, mine, generation=generation)
    with _lock:
        current = _workers.get(key)
        if current is not None and current is not known and current.alive():
            stale, worker = worker, current  # another call started one meanwhile
        else:
            stale, _workers[key] = current, worker
        evicted = [_workers.popitem(last=False)[1] for _ in range(len(_workers) - MAX_WORKERS)]
    for old in [stale, *evicted]:
        if old is not None:
            old.close()
    return worker


def started(policy: SandboxPolicy) -> FileWorker | None:
    """The live worker of `policy`'s session if one runs (marked as just used), else None; never starts one."""
    tmp = policy.private_tmp
    if tmp is None or policy.mode == "rwx":
        return None
    key = str(tmp)
    known = _workers.get(key)
    if known is None or not known.alive():
        return None
    with _lock:
        if key in _workers:
            _workers.move_to_end(key)
    return known


def discard(worker: FileWorker) -> None:
    """Stop `worker` (it broke); the next `worker_for` of its session starts another."""
    with _lock:
        for key, known in list(_workers.items()):
            if known is worker:
                del _workers[key]
    worker.close()


def forget(tmp: Path) -> None:
    """End the worker of the private /tmp `tmp` (its client session ended)."""
    with _lock:
        worker = _workers.pop(str(tmp), None)
    if worker is not None:
        worker.close()


def running(tmp: Path) -> FileWorker | None:
    """The worker of the private /tmp `tmp` if one runs (for tests and diagnostics)."""
    worker = _workers.get(str(tmp))
    return worker if worker is not None and worker.alive() else None
