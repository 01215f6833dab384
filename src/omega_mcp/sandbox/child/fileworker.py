"""The file tools' worker: opens and replaces files for read, write and edit inside a session's sandbox world.

omega starts one per session through the bash zygote, exactly as it starts a bash command
(`sandbox/fileworker_client.py`): the same namespaces, private /tmp and /proc, covers, binds and
Landlock. Its stdout is one end of a SOCK_SEQPACKET socketpair; each request is one message
(`open\\0PATH\\0`, fields as `zygote_init.encode`), each answer one message: `ok\\0r\\0` with the
file opened read-only (a regular file, or /dev/null), `ok\\0p\\0` with an O_PATH fd of anything else
(omega names its kind; opening a FIFO or a device to read could block or have effects), or
`err\\0ERRNO\\0` when the kernel refused. The path is resolved here, by the kernel, in this world:
so a symbolic link, `/proc/<pid>/root` or a rename leads only where bash could go.

`write` and `edit` replace files here too: `replace\0PATH\0PARENT\0CREATE\0EXPECT\0` with the new
content as an fd (a memfd) walks to PATH's directory from `/` (making missing ones when CREATE is
`1`), refuses it (EXDEV) unless it really is PARENT (where omega's checks found it: a link swapped
in since leads nowhere else), then writes a temp file beside the target (O_EXCL|O_NOFOLLOW), fsyncs
it, keeps the old mode (minus set-id bits) and owner, and renames it over the target; with EXPECT
(`dev:ino:size:mtime_ns:ctime_ns`, edit) only if the target still is that file, else `changed\0`.
Answers: `ok\0NOTE\0` (created, updated, link), `link\0TARGET\0` (a link to a directory),
`notreg\0MODE\0`. `leaf\0PATH\0PARENT\0` opens the target itself for edit, never following it
(`link\0TARGET\0` when it is a link). `root\0` answers `ok\0` with an O_PATH fd of this world's `/`
and one of its mount namespace: omega opens files for reading from there itself where the answer is
this process's (`sandbox/worldopen.py`), and asks here otherwise. Landlock, read-only binds and
covers decide what it may write. End of file on the socket ends the worker. Stdlib only, started as
`python -I -S` like its siblings.
"""

from __future__ import annotations

import array
import errno
import os
import socket
import stat

__all__ = ["main"]

_MAX_REQUEST = 16384  # a replace names a path and its directory, each at most 4096 bytes (`paths.MAX_PATH_BYTES`)
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_BYTES = 1024 * 1024


def _answer(sock: socket.socket, fields: list[str], *fds: int) -> None:
    body = b"".join(field.encode() + b"\0" for field in fields)
    if not fds:
        sock.sendmsg([body])
    else:
        sock.sendmsg([body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def _root(sock: socket.socket) -> None:
    """This world's `/` and its mount namespace: omega opens files for reading from there itself
    (`sandbox/worldopen.py`), the namespace held so that its mounts stay as they are should this
    process end."""
    root = os.open("/", _DIR_FLAGS)
    try:
        ns = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _answer(sock, ["ok"], root, ns)
        finally:
            os.close(ns)
    finally:
        os.close(root)


def _open(sock: socket.socket, path: bytes) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        _answer(sock, ["err", str(exc.errno or 0)])
        return
    try:
        mode = os.fstat(pfd).st_mode
        readable = stat.S_ISREG(mode) or (stat.S_ISCHR(mode) and os.readlink(f"/proc/self/fd/{pfd}") == "/dev/null")
        if not readable:
            _answer(sock, ["ok", "p"], pfd)
            return
        # Reopened here, not in omega: the permission check is this process's (bash's uid), and the
        # inode is the one just looked at.
        fd = os.open(f"/proc/self/fd/{pfd}", _READ_FLAGS)
        try:
            _answer(sock, ["ok", "r"], fd)
        finally:
            os.close(fd)
    except OSError as exc:
        _answer(sock, ["err", str(exc.errno or 0)])
    finally:
        os.close(pfd)


def _parent(path: bytes, expected: bytes, create: bool) -> tuple[int, bytes]:
    """An O_PATH fd of `path`'s directory (resolved by the kernel, here) and the entry name; EXDEV
    unless the directory really is `expected`."""
    head, _, name = path.rpartition(b"/")
    if not name or not path.startswith(b"/"):
        raise OSError(errno.EINVAL, "not an absolute file path")
    fd = os.open(b"/", _DIR_FLAGS)
    try:
        for part in (p for p in head.split(b"/") if p):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)  # just made: a link here is an attack
            os.close(fd)
            fd = nxt
        if os.readlink(b"/proc/self/fd/%d" % fd) != expected:
            raise OSError(errno.EXDEV, "the directory is not where it was checked")
        return fd, name
    except BaseException:
        os.close(fd)
        raise


def _identity(st: os.stat_result) -> bytes:
    return b"%d:%d:%d:%d:%d" % (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _copy(source: int, target: int) -> None:
    while chunk := os.read(source, _COPY_BYTES):
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]


def _write_temp(dfd: int, content: int, old: os.stat_result | None) -> bytes:
    for _ in range(16):
        name = b".omega-%s.tmp" % os.urandom(8).hex().encode()  # fixed length, as omega's own
        try:
            fd = os.open(name, _TEMP_FLAGS, 0o600 if old is not None else 0o666, dir_fd=dfd)
        except FileExistsError:
            continue
        try:
            try:
                _copy(content, fd)
                if old is not None:
                    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                        try:
                            os.fchown(fd, old.st_uid, old.st_gid)
                        except OSError:
                            pass  # only root may give a file away
                    os.fchmod(fd, stat.S_IMODE(old.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _unlink(dfd, name)
            raise
        return name
    raise OSError(errno.EEXIST, "temporary file name collisions")


def _unlink(dfd: int, name: bytes) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def _replace(sock: socket.socket, fields: list[bytes], content: int) -> None:
    path, expected, create, expect = fields
    dfd, name = _parent(path, expected, create == b"1")
    try:
        try:
            old: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if expect and (old is None or _identity(old) != expect):
            _answer(sock, ["changed"])
            return
        note = "created" if old is None else "updated"
        if old is not None and stat.S_ISLNK(old.st_mode):
            try:
                if stat.S_ISDIR(os.stat(name, dir_fd=dfd).st_mode):
                    _answer(sock, ["link", os.fsdecode(os.readlink(name, dir_fd=dfd))])
                    return
            except OSError:
                pass  # dangling or unreadable: the link is simply replaced
            note, old = "link", None
        elif old is not None and not stat.S_ISREG(old.st_mode):
            _answer(sock, ["notreg", str(old.st_mode)])
            return
        temp = _write_temp(dfd, content, old)
        try:
            os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            _unlink(dfd, temp)
            raise
        try:
            dir_fd = os.open(b".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass  # best effort: the rename is done
        _answer(sock, ["ok", note])
    finally:
        os.close(dfd)


def _leaf(sock: socket.socket, fields: list[bytes]) -> None:
    path, expected = fields
    dfd, name = _parent(path, expected, False)
    try:
        try:
            fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            _answer(sock, ["link", os.fsdecode(os.readlink(name, dir_fd=dfd))])
            return
        try:
            _answer(sock, ["ok", "r"], fd)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    found = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            found.frombytes(payload[: len(payload) - len(payload) % found.itemsize])
    return list(found)


def _serve(sock: socket.socket, fields: list[bytes], fds: list[int]) -> None:
    try:
        if len(fields) == 2 and fields[0] == b"open" and fields[1]:
            _open(sock, fields[1])
        elif len(fields) == 5 and fields[0] == b"replace" and len(fds) == 1:
            _replace(sock, fields[1:], fds[0])
        elif len(fields) == 3 and fields[0] == b"leaf":
            _leaf(sock, fields[1:])
        elif fields == [b"root"]:
            _root(sock)
        else:
            _answer(sock, ["err", "22"])  # EINVAL: not a request of this worker
    except (BrokenPipeError, ConnectionError):
        raise
    except OSError as exc:
        _answer(sock, ["err", str(exc.errno or errno.EIO)])
    finally:
        for fd in fds:
            os.close(fd)


def main() -> int:
    """Serve requests on fd 1 until end of file; 0 then."""
    sock = socket.socket(fileno=os.dup(1))
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 1)  # nothing may write into the protocol by accident
    os.dup2(devnull, 2)
    os.close(devnull)
    while True:
        try:
            data, ancillary, _, _ = sock.recvmsg(_MAX_REQUEST, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC)
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not data:
            return 0
        fds = _fds(ancillary)
        try:
            _serve(sock, data.split(b"\0")[:-1], fds)
        except OSError:
            return 0  # omega is gone
