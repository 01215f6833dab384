"""Opening a file of a session's sandbox world from omega's own process, where the answer is the worker's.

The session's file worker (`child/fileworker.py`) hands omega, once, an O_PATH fd of its world's `/`
and an fd of its mount namespace (held, so the world's mounts stay as they are should the worker
end). `WorldRoot.open_readable` (read) and `open_leaf` (edit) resolve a path from that root with
openat2(RESOLVE_IN_ROOT, never through a magic link): the kernel walks the world's own mounts (its
private /tmp and /proc, the covers over hidden paths, the binds), and `..` and absolute links stay
inside it, as for the worker; no round trip to the worker, whose wake-up is most of a small read's
cost on a busy machine. Where the answer could differ from the worker's, `None` says to ask the
worker instead: any error (a magic link, `/proc/self`, which names no process of omega's there),
anything but a regular file, anything on a procfs (what its entries are depends on who looks). The
permission checks are the worker's too: omega's own uid and groups are the world's
(`child/private.py` maps them, and the world's processes keep the groups), and the world's processes
hold no capability, so a thread of omega that has some (root) drops its effective set for the open
and takes it back after: root's omega opens only what its bash could. Blocking: call from a worker thread.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import threading
from collections.abc import Generator
from contextlib import contextmanager

from omega_mcp.sandbox.beneath import have_openat2, open_in_root

__all__ = ["WorldRoot", "usable"]

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_PROC_SUPER_MAGIC = 0x9FA0
_CAPABILITY_V3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)
# struct statfs begins with f_type: a long (__fsword_t) on Linux, an unsigned int on s390x.
_F_TYPE = ctypes.c_uint if os.uname().machine == "s390x" else ctypes.c_long
_STATFS_BYTES = 256  # 120 on 64-bit Linux: room to spare
_capable = True
"""Whether this process may hold capabilities (its permitted set was not found empty): a process
whose permitted set is empty never gets one back short of an exec, so the check stops there."""


def usable() -> bool:
    """Whether omega can open in a world itself here (Linux, openat2 not filtered out)."""
    return sys.platform.startswith("linux") and have_openat2()


def _fail(what: str) -> OSError:
    number = ctypes.get_errno()
    return OSError(number, f"{what}: {os.strerror(number)}")


@contextmanager
def _without_capabilities() -> Generator[None]:
    """This thread without effective capabilities inside (credentials are per thread: `capset` changes
    the calling thread's only, and the others keep theirs), as the world's processes are.

    Raises:
        OSError: the capabilities could not be read or dropped (the caller then asks the worker).
    """
    global _capable  # noqa: PLW0603 - a process-wide fact, found on first use
    if not _capable:
        yield
        return
    header = _CapHeader(_CAPABILITY_V3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise _fail("capget")
    if not (data[0].permitted or data[1].permitted):
        _capable = False
    if not (data[0].effective or data[1].effective):
        yield
        return
    saved = data[0].effective, data[1].effective
    data[0].effective = data[1].effective = 0
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise _fail("capset")
    try:
        yield
    finally:
        data[0].effective, data[1].effective = saved
        # Taking back a subset of the permitted set cannot fail; were it to, the thread is only left
        # with less than it had.
        _libc.capset(ctypes.byref(header), data)


def _on_procfs(fd: int) -> bool:
    buffer = ctypes.create_string_buffer(_STATFS_BYTES)
    if _libc.fstatfs(fd, buffer) != 0:
        raise _fail("fstatfs")
    return _F_TYPE.from_buffer(buffer).value & 0xFFFFFFFF == _PROC_SUPER_MAGIC


class WorldRoot:
    """A session world's `/` (and its mount namespace, held) in omega's process; `close` ends both."""

    def __init__(self, root_fd: int, ns_fd: int) -> None:
        self._root = root_fd
        self._ns = ns_fd
        self._lock = threading.Lock()  # no fd is closed (and its number reused) while a thread opens from it
        self._closed = False

    def open_readable(self, path: bytes) -> int | None:
        """An fd open for reading of the regular file `path` (absolute, in the world's terms) leads to,
        links followed; None: ask the worker."""
        return self._open(path, os.O_PATH | os.O_CLOEXEC, symlinks=True)

    def open_leaf(self, path: bytes, parent: bytes) -> int | None:
        """An fd open for reading of the regular file `path` itself, reached through no symbolic link,
        so its directory is `path`'s own; None (also for a link, which the worker names, and where that
        directory is not `parent`): ask the worker."""
        if os.path.dirname(path) != parent:
            return None
        return self._open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, symlinks=False)

    def _open(self, path: bytes, flags: int, *, symlinks: bool) -> int | None:
        with self._lock:
            if self._closed or not path.startswith(b"/"):
                return None
            try:
                with _without_capabilities():
                    pfd = open_in_root(self._root, path, flags, symlinks=symlinks)
                    try:
                        if not stat.S_ISREG(os.fstat(pfd).st_mode) or _on_procfs(pfd):
                            return None
                        # Reopened as the worker does: the inode just looked at, checked with this
                        # thread's (capability-less) rights.
                        return os.open(f"/proc/self/fd/{pfd}", _READ_FLAGS)
                    finally:
                        os.close(pfd)
            except OSError:
                return None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._root)
            os.close(self._ns)
