"""Which directories changed since the last look: Linux inotify through ctypes, or nothing (then poll).

`Watcher` adds a watch per directory (creations, deletions and renames in it, and its own removal or
move) and `changed()` drains the queue without blocking: the directories that saw an event, or
`OVERFLOW` when the kernel dropped events (look at everything again). The kernel queues an event
inside the system call that changed the directory, so once a command has exited, everything it did
is in the queue. Where inotify is missing or the watch limit is reached, `add` returns False and the
caller polls that directory's mtime instead. Stdlib only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys

__all__ = ["OVERFLOW", "Watcher"]

OVERFLOW = "\0overflow"
"""Returned by `changed()` (alone) when events were lost: every directory must be looked at again."""

_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
_IN_ONLYDIR, _IN_DONT_FOLLOW = 0x01000000, 0x02000000
_MASK = (_IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF) | (
    _IN_ONLYDIR | _IN_DONT_FOLLOW
)
_HEADER = struct.Struct("iIII")


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


class Watcher:
    """One inotify instance; `fd` is -1 when this system has none (every `add` then returns False)."""

    def __init__(self) -> None:
        self._libc = _libc()
        self.fd = -1
        if self._libc is not None and hasattr(self._libc, "inotify_init1"):
            self.fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        self._paths: dict[int, str] = {}
        self._wds: dict[str, int] = {}

    def add(self, path: str) -> bool:
        """Watch the directory `path` (again: a no-op); False when it cannot be watched (poll it)."""
        if self.fd < 0 or self._libc is None:
            return False
        if path in self._wds:
            return True
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            return False
        old = self._paths.get(wd)
        if old is not None and old != path:  # the same directory under a new name (it was moved)
            self._wds.pop(old, None)
        self._paths[wd] = path
        self._wds[path] = wd
        return True

    def watched(self, path: str) -> bool:
        return path in self._wds

    def forget(self, path: str) -> None:
        """Stop trusting the watch of `path` (it was removed or moved): it is looked at by polling."""
        wd = self._wds.pop(path, None)
        if wd is not None and self._libc is not None:
            self._paths.pop(wd, None)
            self._libc.inotify_rm_watch(self.fd, wd)

    def changed(self) -> set[str]:
        """The watched directories with an event since the last call, or `{OVERFLOW}`."""
        found: set[str] = set()
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                return {OVERFLOW}
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _, size = _HEADER.unpack_from(data, offset)
                offset += _HEADER.size + size
                if mask & _IN_Q_OVERFLOW:
                    return {OVERFLOW}
                path = self._paths.get(wd)
                if path is None:
                    continue
                found.add(path)
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED):
                    # Gone or elsewhere: its parent saw the change too; stop trusting this watch.
                    self._wds.pop(path, None)
                    self._paths.pop(wd, None)
        return found

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._paths.clear()
        self._wds.clear()
