"""PID 1's setup inside bash's namespaces: private mounts and /proc, pid_max, loopback, binds, covers, /dev.

Stdlib only and no package import, like `landlock.py` (imported the same way by `exec.py` and the
bash zygote, `zygote.py`). `setup` is the trampoline's whole sequence; the zygote does the part a
client session shares once (`session_setup`) and each command's own part in a copy (`call_setup`).
Read-only binds keep omega's own files and the protected names that exist unchanged where they lie
inside a writable root; a pin (a bind of a directory onto itself) makes a directory a mount point,
which cannot be renamed or removed (EBUSY). A hidden path is covered: a directory by an empty
read-only tmpfs (mode 0), anything else (a file, a socket) by a read-only bind of /dev/null, so
reads see nothing and `connect()` to a covered socket is refused. The private /tmp is the session's
directory bound over /tmp (or an empty tmpfs), with the write roots that live below /tmp bound back.
The private /dev is a tmpfs holding binds of the host's null, zero, full, random, urandom and tty
(and GPUs), a devpts instance of its own (no host terminal), and an empty /dev/shm. The host's
pathname UNIX sockets come from /proc/net/unix, which lists those of the reader's network
namespace: read it before entering one (or keep it open from before).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from omega_mcp.sandbox.child import landlock
elif __package__:
    from omega_mcp.sandbox.child import landlock
else:
    import landlock  # exec.py put this directory on sys.path

__all__ = ["DEV_NODES", "call_setup", "host_sockets", "mount", "private_dev", "session_setup", "setup"]

DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
"""The host devices a private /dev holds (plus GPUs, a pts instance of its own and /dev/ptmx)."""

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_RELATIME = 1 << 21
_MS_LOCKABLE = 2 | 4 | 8 | 1024 | 2048  # NOSUID NODEV NOEXEC NOATIME NODIRATIME: same bits as ST_*
_ST_RELATIME = 4096
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
_S_IFMT, _S_IFDIR, _S_IFSOCK, _S_IFLNK = 0o170000, 0o040000, 0o140000, 0o120000


def mount(source: str | None, target: str | None, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2). Raises: OSError whose strerror reads `mount TARGET: REASON`."""

    def enc(value: str | None) -> bytes | None:
        return None if value is None else os.fsencode(value)

    if landlock.libc_function("mount")(enc(source), enc(target), enc(fstype), landlock.c_ulong(flags), enc(data)):
        err = landlock.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def setup(
    pid_max: int,
    netns: bool,
    binds: list[tuple[str, str]],
    hide: list[str],
    sockets: list[str],
    *,
    private_tmp: tuple[str, list[str]] = ("", []),
    writable: list[str] | None = None,
    tmp_source: str = "",
    read_only: list[str] | None = None,
    devices: list[str] | None = None,
) -> bool:
    """Everything PID 1 sets up before Landlock; returns whether a private /proc could be mounted
    (everything else happens either way). `private_tmp` is (path, command): the path gets `tmp_source`
    bound over it (the session's directory) or else an empty tmpfs of its own, what the command runs
    from there (`_runs_from`) is bound back read-only and the `writable` roots beneath it read-write,
    so a server living under /tmp still runs. `read_only` paths (protected names) that exist get a
    read-only bind; `devices` (not None) asks for the private /dev, with those extra devices in it.
    The trampoline's order; the zygote splits it into `session_setup` and `call_setup`.

    Raises:
        OSError: a mount that must not be skipped failed (binds, configured hides, the private /dev).
    """
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Held before the binds: the session's /tmp may lie below omega's home, which they make read-only.
    source_fd = os.open(tmp_source, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC) if tmp_source else -1
    try:
        own_proc = _proc(pid_max)
        if netns:
            _loopback_up()
        _binds(binds)
        _read_only(read_only or [])
        tmp, command = private_tmp
        if tmp:
            _private_tmp(tmp, _runs_from(tmp, command), _below(tmp, writable), source_fd)
    finally:
        if source_fd >= 0:
            os.close(source_fd)
    for path in hide:
        _cover(path)
    _cover_sockets(sockets)
    if devices is not None:
        private_dev(devices)
    if binds or read_only or hide or sockets or tmp:
        # The cwd still points into the mounts as they were before the binds: re-enter it by
        # name, or relative paths would reach the protected files underneath.
        os.chdir(os.getcwd())
    return own_proc


def session_setup(
    netns: bool,
    binds: list[tuple[str, str]],
    hide: list[str],
    *,
    private_tmp: str = "",
    writable: list[str] | None = None,
    tmp_source: str = "",
    devices: list[str] | None = None,
) -> None:
    """The part of `setup` every command of a client session shares, done once per session in the
    zygote's session mount namespace (each command gets a copy): loopback, binds and pins, the
    session's /tmp (`tmp_source` over `private_tmp`; without one, each command gets an empty /tmp
    of its own from `call_setup`), covers over hidden paths, the private /dev.

    Raises:
        OSError: a mount that must not be skipped failed.
    """
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    source_fd = os.open(tmp_source, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC) if tmp_source else -1
    try:
        if netns:
            _loopback_up()
        _binds(binds)
        if private_tmp and tmp_source:
            _private_tmp(private_tmp, [], _below(private_tmp, writable), source_fd)
    finally:
        if source_fd >= 0:
            os.close(source_fd)
    for path in hide:
        _cover(path)
    if devices is not None:
        private_dev(devices)


def call_setup(
    pid_max: int,
    sockets: list[str],
    *,
    read_only: list[str] | None = None,
    private_tmp: str = "",
    writable: list[str] | None = None,
) -> bool:
    """The part of `setup` that is each command's own, in a copy of the session's mount namespace:
    its /proc and pid_max, read-only binds over the protected names that exist now, an empty /tmp
    when `private_tmp` is given (a session without a directory of its own), covers over the host's
    sockets listed now. Returns whether a private /proc could be mounted.

    Raises:
        OSError: a mount that must not be skipped failed.
    """
    own_proc = _proc(pid_max)
    _read_only(read_only or [])
    if private_tmp:
        _private_tmp(private_tmp, [], _below(private_tmp, writable))
    _cover_sockets(sockets)
    return own_proc


def _proc(pid_max: int) -> bool:
    try:
        mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    except OSError:
        return False  # e.g. a container with masked /proc: pids outside stay visible, nothing else
    if pid_max:
        try:
            fd = os.open("/proc/sys/kernel/pid_max", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(pid_max).encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # kernels before 6.14 have no per-namespace pid_max; the probe reports it
    return True


def _binds(binds: list[tuple[str, str]]) -> None:
    for op, path in binds:
        if not os.path.lexists(path):
            continue
        mount(path, path, None, _MS_BIND | _MS_REC)
        if op == "protect":
            _remount_read_only(path)


def _read_only(paths: list[str]) -> None:
    for path in paths:
        try:
            mount(path, path, None, _MS_BIND | _MS_REC)
            _remount_read_only(path)
        except FileNotFoundError:
            continue  # removed since omega looked: nothing left to protect there


def _below(tmp: str, writable: list[str] | None) -> list[str]:
    return [w for w in writable or [] if w != tmp and _under(w, [tmp])]


def _cover_sockets(sockets: list[str]) -> None:
    for path in sockets:
        try:
            _cover(path, socket_only=True)
        except OSError:
            pass  # a listed socket may vanish meanwhile: one that cannot be covered is skipped


def _private_tmp(path: str, keep: list[str], writable: list[str], source_fd: int = -1) -> None:
    """The directory `source_fd` bound over `path`, or else an empty, world-writable (sticky) tmpfs;
    `keep` bound back read-only first, then `writable` read-write (each opened before `path` is covered)."""
    held: list[tuple[str, int, bool]] = []
    try:
        for root, read_only in [*((k, True) for k in keep), *((w, False) for w in writable)]:
            try:
                held.append((root, os.open(root, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC), read_only))
            except OSError:
                continue  # gone: nothing to keep (Landlock skips a missing root too)
        if source_fd >= 0:
            mount(f"/proc/self/fd/{source_fd}", path, None, _MS_BIND)
        else:
            mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
        for root, fd, read_only in held:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(root, exist_ok=True)
            elif not os.path.lexists(root):
                os.makedirs(os.path.dirname(root), exist_ok=True)
                os.close(os.open(root, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))  # a file's mount point
            # A kept entry alone (no submounts: a rw pin inside it would stay writable); a root with the
            # read-only binds that protect omega's files inside it.
            mount(f"/proc/self/fd/{fd}", root, None, _MS_BIND if read_only else _MS_BIND | _MS_REC)
            if read_only:
                _remount_read_only(root)
    finally:
        for _, fd, _ in held:
            os.close(fd)


def private_dev(extra: list[str]) -> None:
    """A minimal /dev (see the module docstring); `extra` devices below /dev (GPUs) are bound in too.

    Raises:
        OSError: a mount failed (the probe tells whether this machine can).
    """
    held: list[tuple[str, int, bool]] = []
    try:
        for path in dict.fromkeys([*(f"/dev/{n}" for n in DEV_NODES), *extra]):
            if not path.startswith("/dev/") or path in ("/dev/ptmx", "/dev/pts") or path.startswith("/dev/pts/"):
                continue
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not on this machine
            held.append((path, fd, os.path.isdir(f"/proc/self/fd/{fd}")))
        mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC | _MS_NODEV, "mode=755,size=64k")
        for path, fd, is_dir in held:
            if is_dir:
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | (_MS_REC if is_dir else 0))
    finally:
        for _, fd, _ in held:
            os.close(fd)
    os.mkdir("/dev/pts", 0o755)
    mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    os.symlink("pts/ptmx", "/dev/ptmx")
    os.mkdir("/dev/shm", 0o1777)
    mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, f"/dev/{name}")
    os.symlink("/proc/self/fd/2", "/dev/stderr")


def _runs_from(tmp: str, command: list[str]) -> list[str]:
    """The top entries under `tmp` of the command's words that are absolute paths there (its program,
    also where a link to it leads: a venv's python; a script; a data directory)."""
    kept: dict[str, None] = {}
    for word in command:
        if word.startswith("/"):
            for path in (os.path.normpath(word), os.path.realpath(word)):
                if _under(path, [tmp]) and path != tmp:
                    kept[os.path.join(tmp, path[len(tmp.rstrip("/")) + 1 :].split("/")[0])] = None
    return list(kept)


def _remount_read_only(path: str) -> None:
    """Make the bind at `path` read-only, keeping the flags the kernel locked on the original mount."""
    flags = os.statvfs(path).f_flag
    keep = (flags & _MS_LOCKABLE) | (_MS_RELATIME if flags & _ST_RELATIME else 0)
    mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | keep)


def _loopback_up() -> None:
    """Bring `lo` up in a new network namespace; on any failure it stays down (still no network)."""
    import fcntl

    fd = landlock.libc_function("socket")(2, 2, 0)  # AF_INET, SOCK_DGRAM: any socket takes interface ioctls
    if fd < 0:
        return
    try:
        request = b"lo".ljust(16, b"\0")  # struct ifreq: the name, then a 24-byte union (flags first)
        current = fcntl.ioctl(fd, _SIOCGIFFLAGS, request + bytes(24))
        flags = int.from_bytes(current[16:18], sys.byteorder) | _IFF_UP
        fcntl.ioctl(fd, _SIOCSIFFLAGS, request + flags.to_bytes(2, sys.byteorder) + bytes(22))
    except OSError:
        pass
    finally:
        os.close(fd)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def host_sockets(writable: list[str], hidden: list[str], table_fd: int = -1) -> list[str]:
    """The bound pathname UNIX sockets of this network namespace outside `writable` and `hidden`;
    with `table_fd` (a /proc/net/unix opened before entering another network namespace) those of
    the namespace it was opened in, read again from its start.

    Raises:
        OSError: /proc/net/unix cannot be read.
    """
    if table_fd < 0:
        with open("/proc/net/unix", "rb") as f:
            data = f.read()
    else:
        os.lseek(table_fd, 0, os.SEEK_SET)
        chunks: list[bytes] = []
        while chunk := os.read(table_fd, 1 << 16):
            chunks.append(chunk)
        data = b"".join(chunks)
    found: dict[str, None] = {}
    for line in data.splitlines()[1:]:
        # Num RefCount Protocol Flags Type St Inode Path: only the path (the 8th field) holds a "/"
        # (abstract ones start with @), so the first " /" starts it, whatever spaces it holds.
        at = line.find(b" /")
        if at > 0 and len(line[:at].split()) == 7:
            path = os.fsdecode(line[at + 1 :])
            if not _under(path, writable) and not _under(path, hidden):
                found[path] = None
    return list(found)


def _cover(path: str, *, socket_only: bool = False) -> None:
    """Cover `path`; a missing path is skipped, and with `socket_only` anything no longer a socket."""
    try:
        mode = os.lstat(path).st_mode & _S_IFMT
        if mode == _S_IFLNK:
            mode = os.stat(path).st_mode & _S_IFMT  # a link (/var/run): cover what it leads to
    except OSError:
        return
    if socket_only and mode != _S_IFSOCK:
        return
    if mode == _S_IFDIR:
        mount("tmpfs", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "mode=0,size=4k")
    else:
        mount("/dev/null", path, None, _MS_BIND)
        if not socket_only:
            _remount_read_only(path)  # a hidden file reads empty and cannot be written either
