"""The file tools' worker: opens files for `read` inside a client session's sandbox world.

omega starts one per session through the bash zygote, exactly as it starts a bash command
(`sandbox/fileworker_client.py`): the same namespaces, private /tmp and /proc, covers, binds and
Landlock. Its stdout is one end of a SOCK_SEQPACKET socketpair; each request is one message
(`open\\0PATH\\0`, fields as `zygote_init.encode`), each answer one message: `ok\\0r\\0` with the
file opened read-only (a regular file, or /dev/null), `ok\\0p\\0` with an O_PATH fd of anything else
(omega names its kind; opening a FIFO or a device to read could block or have effects), or
`err\\0ERRNO\\0` when the kernel refused. The path is resolved here, by the kernel, in this world:
so a symbolic link, `/proc/<pid>/root` or a rename leads only where bash could go. End of file on
the socket ends the worker. Stdlib only, started as `python -I -S` like its siblings.
"""

from __future__ import annotations

import array
import os
import socket
import stat

__all__ = ["main"]

_MAX_REQUEST = 8192  # a path is at most 4096 bytes (`paths.MAX_PATH_BYTES`)
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _answer(sock: socket.socket, fields: list[str], fd: int = -1) -> None:
    body = b"".join(field.encode() + b"\0" for field in fields)
    if fd < 0:
        sock.sendmsg([body])
    else:
        sock.sendmsg([body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])


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


def main() -> int:
    """Serve requests on fd 1 until end of file; 0 then."""
    sock = socket.socket(fileno=os.dup(1))
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 1)  # nothing may write into the protocol by accident
    os.dup2(devnull, 2)
    os.close(devnull)
    while True:
        try:
            data = sock.recv(_MAX_REQUEST)
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not data:
            return 0
        fields = data.split(b"\0")[:-1]
        try:
            if len(fields) == 2 and fields[0] == b"open" and fields[1]:
                _open(sock, fields[1])
            else:
                _answer(sock, ["err", "22"])  # EINVAL: not a request of this worker
        except OSError:
            return 0  # omega is gone
