"""omega's side of the file tools' worker (`child/fileworker.py`): one per client session, opening files there.

`worker_for(policy)` returns the session's worker (started on first use through the bash zygote, as
bash's commands are: `zygote_client.start` with the worker as the program and a socket as its
output), or None where a session has no sandbox world (rwx mode, no user namespaces, no private
/tmp): then the path checks of `paths.py` apply alone. `FileWorker.open` asks it to open a path for
`read`; the kernel, inside the world, resolves it, so a symbolic link, `/proc/<pid>/root` or a rename
cannot lead anywhere bash could not go. A worker that died or stopped answering is replaced on the next
call; `forget(tmp_dir)` ends the worker of a private /tmp (its session ended); every wait is bounded.
"""

from __future__ import annotations

import array
import dataclasses
import os
import socket
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from omega_mcp.errors import SandboxUnavailableError, ToolError
from omega_mcp.sandbox import zygote_client
from omega_mcp.sandbox.confined import ConfinedProcess
from omega_mcp.sandbox.launch import bash_launch
from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = [
    "ANSWER_SECONDS",
    "MAX_WORKERS",
    "FileWorker",
    "WorkerGoneError",
    "discard",
    "forget",
    "running",
    "worker_for",
]

ANSWER_SECONDS = 10.0
"""How long one request may wait for the worker's answer before the worker counts as stuck."""
_WORKER = Path(__file__).parent / "child" / "fileworker.py"
_BOOTSTRAP = "import sys;sys.path.append(sys.argv.pop(1));import fileworker;raise SystemExit(fileworker.main())"
_FDS_SPACE = socket.CMSG_SPACE(array.array("i").itemsize)


class WorkerGoneError(Exception):
    """The worker died or did not answer in time: it is replaced on the next `worker_for`."""


@dataclass(eq=False)
class FileWorker:
    """One session's worker: its process (a zygote command) and the socket omega asks it on."""

    process: ConfinedProcess
    sock: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)
    broken: bool = False

    def alive(self) -> bool:
        return not self.broken and not self.process.gone

    def open(self, path: Path) -> tuple[int, bool]:
        """Open `path` in the session's world: (an fd, whether it is open for reading). A regular file
        (or /dev/null) comes open read-only; anything else as an O_PATH fd, for its kind to be named.
        Blocking, bounded by `ANSWER_SECONDS`: call it from a worker thread.

        Raises:
            OSError: the kernel refused inside the world (ENOENT, EACCES, ...).
            WorkerGoneError: the worker is gone or stuck.
        """
        with self.lock:
            if self.broken:
                raise WorkerGoneError("the file worker stopped")
            try:
                self.sock.sendmsg([b"open\0" + os.fsencode(path) + b"\0"])
                data, ancillary, _, _ = self.sock.recvmsg(64, _FDS_SPACE, socket.MSG_CMSG_CLOEXEC)
            except OSError as exc:  # TimeoutError included
                self.broken = True
                raise WorkerGoneError(f"the file worker did not answer ({exc.strerror or exc})") from None
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                found = array.array("i")
                found.frombytes(payload[: len(payload) - len(payload) % found.itemsize])
                fds.extend(found)
        fields = data.split(b"\0")[:-1]
        if fields[:1] == [b"ok"] and len(fields) == 2 and len(fds) == 1:
            return fds[0], fields[1] == b"r"
        for fd in fds:
            os.close(fd)
        if fields[:1] == [b"err"] and len(fields) == 2 and fields[1].isdigit():
            number = int(fields[1])
            raise OSError(number, os.strerror(number))
        self.broken = True
        raise WorkerGoneError("the file worker gave an answer omega does not understand" if data else "it died")

    def close(self) -> None:
        self.broken = True
        self.sock.close()  # end of file: the worker exits
        self.process.discard()


MAX_WORKERS = zygote_client.MAX_SESSIONS
"""Workers kept at once (one per session that read something); the least recently used beyond this
are stopped, and started again should their session read once more."""
_workers: OrderedDict[str, FileWorker] = OrderedDict()
_lock = threading.Lock()


async def worker_for(policy: SandboxPolicy) -> FileWorker | None:
    """The worker of `policy`'s session (started now if it has none or it died), None where the
    session has no sandbox world to work in.

    Raises:
        ToolError: the session has a world but its worker cannot be started (fail closed: the file
            tools never fall back to opening its files from omega's process).
    """
    tmp = policy.private_tmp
    if tmp is None or policy.mode == "rwx" or not sys.platform.startswith("linux"):
        return None
    key = str(tmp)
    known = _workers.get(key)
    if known is not None and known.alive():
        with _lock:
            if key in _workers:
                _workers.move_to_end(key)
        return known
    try:
        launch = bash_launch(policy, "")
    except SandboxUnavailableError:
        return None  # bash itself cannot run here: the path checks apply alone, as without a world
    if not launch.zygote:
        return None
    program = (sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(_WORKER.parent))
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
    mine.settimeout(ANSWER_SECONDS)
    worker = FileWorker(process, mine)
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
