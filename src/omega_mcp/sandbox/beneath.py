"""Opening directories by fd without being redirected by a symbolic link: the mechanism under `paths`.

`openat2` (raw syscall through ctypes) resolves a relative path beneath a directory fd
(`RESOLVE_BENEATH`), or through no symbolic link at all (`RESOLVE_NO_SYMLINKS`), never through a
magic link (`/proc/*/fd/*`). Where openat2 is missing (old kernel, a seccomp filter) the same
answers come from a walk that opens one component at a time with `O_NOFOLLOW`. Every fd returned is
an `O_PATH | O_DIRECTORY` fd the caller closes, but `open_in_root`'s (the caller's flags), which
resolves a path as if the fd were `/` (`RESOLVE_IN_ROOT`: a session world's root, `worldopen.py`;
openat2 only). Nothing here knows the write policy, and every function blocks (call it from a
worker thread).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from contextlib import suppress
from pathlib import Path

__all__ = ["have_openat2", "make_exact", "open_beneath", "open_exact", "open_in_root", "real_fd_path", "walk"]

_SYS_OPENAT2 = 437  # same number on every architecture (generic syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE_IN_ROOT = 0x10
_AT_FDCWD = -100
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_EAGAIN_RETRIES = 8


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_openat2_usable: bool | None = None  # probed once; tests flip it to exercise the fallback walk


def _openat2(dir_fd: int, rel: str | bytes, resolve: int, flags: int = _DIR_FLAGS) -> int:
    """openat2(dir_fd, rel, flags (O_PATH|O_DIRECTORY), resolve); raises OSError like `os.open`."""
    how = _OpenHow(flags, 0, resolve)
    encoded = os.fsencode(rel)
    for _ in range(_EAGAIN_RETRIES):  # EAGAIN: a concurrent rename raced a `..` lookup; retry is the documented fix
        fd = int(
            _syscall(
                ctypes.c_long(_SYS_OPENAT2),
                ctypes.c_int(dir_fd),
                ctypes.c_char_p(encoded),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), os.fsdecode(rel))
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), os.fsdecode(rel))


def have_openat2() -> bool:
    """Whether this process can use openat2 (probed on first call, then remembered)."""
    global _openat2_usable  # noqa: PLW0603 - a process-wide probe result
    if _openat2_usable is None:
        try:
            os.close(_openat2(_AT_FDCWD, "/", 0))
            _openat2_usable = True
        except OSError as exc:  # ENOSYS: old kernel; EPERM: a seccomp filter (containers)
            _openat2_usable = exc.errno not in (errno.ENOSYS, errno.EPERM)
    return _openat2_usable


def open_in_root(root_fd: int, path: bytes, flags: int, *, symlinks: bool) -> int:
    """Open `path` as if `root_fd` were the root directory (`RESOLVE_IN_ROOT`: `..` and absolute links
    stay below it), never through a magic link (`/proc/*/fd/*`, `/proc/*/root`), with `symlinks` through
    no symbolic link at all (a trailing one opened itself with `O_PATH | O_NOFOLLOW`).

    Raises:
        OSError: as `os.open`; ENOSYS where this process has no openat2 (`have_openat2`).
    """
    if not have_openat2():
        raise OSError(errno.ENOSYS, "openat2 is not available")
    resolve = _RESOLVE_IN_ROOT | (_RESOLVE_NO_MAGICLINKS if symlinks else _RESOLVE_NO_SYMLINKS)
    return _openat2(root_fd, path, resolve, flags)


def real_fd_path(fd: int, fallback: Path) -> Path:
    """Where the open `fd` really is (its /proc/self/fd link), or the realpath of `fallback` without /proc."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # /proc not mounted: the best remaining answer
        return Path(os.path.realpath(fallback))


def walk(dir_fd: int, parts: tuple[str, ...], *, follow: bool) -> int:
    """Open each directory component below `dir_fd` in turn; a symlink is refused (EXDEV) unless `follow`."""
    fd = os.dup(dir_fd)
    try:
        for part in parts:
            flags = _DIR_FLAGS if follow else _DIR_FLAGS | os.O_NOFOLLOW
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except NotADirectoryError:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    raise OSError(errno.EXDEV, "symbolic link component refused", part) from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_beneath(root_fd: int, parts: tuple[str, ...], *, contained: bool, exact: bool) -> int:
    """Open `parts` below `root_fd`: beneath it if `contained`, through no symbolic link at all if `exact`."""
    if not parts:
        return os.dup(root_fd)
    if have_openat2():
        resolve = _RESOLVE_NO_MAGICLINKS | (_RESOLVE_NO_SYMLINKS if exact else _RESOLVE_BENEATH if contained else 0)
        return _openat2(root_fd, "/".join(parts), resolve)
    return walk(root_fd, parts, follow=not (contained or exact))


def open_exact(real: Path) -> int:
    """Open the absolute directory `real` through no symbolic link at all."""
    if have_openat2():
        return _openat2(_AT_FDCWD, str(real), _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    top = os.open("/", _DIR_FLAGS)
    try:
        return walk(top, real.parts[1:], follow=False)
    finally:
        os.close(top)


def make_exact(real: Path) -> None:
    """Create the missing directories of the absolute `real`, component by component, never through a symbolic link."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in real.parts[1:]:
            with suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            nxt = walk(fd, (part,), follow=False)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
