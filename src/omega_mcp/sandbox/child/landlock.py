"""Landlock through raw syscalls (ctypes): the ABI probe, rulesets, and their application.

Stdlib only and import-light on purpose: the exec trampoline (`exec.py`) imports this file in a
`python -I -S` process, without the omega_mcp package, and every millisecond of import time is
added to each bash call; that is why it binds libc through `_ctypes` (the C core of ctypes, also
exported here for the trampoline) instead of `import ctypes` (+3 ms). The ruleset handles every
right the running kernel knows (masked per ABI), so whatever is not granted is denied.
Restriction is per-thread and irreversible: call `restrict_self` only in the trampoline.
"""

from __future__ import annotations

import _ctypes
import os
import stat

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing/collections costs ms per command
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = [
    "FILE_RIGHTS",
    "READ_EXEC",
    "LandlockError",
    "abi_version",
    "c_long",
    "c_ulong",
    "c_void_p",
    "enforce",
    "fs_rights",
    "get_errno",
    "libc_function",
    "restrict_self",
    "ruleset",
    "set_no_new_privs",
]

# Syscall numbers are the same on every architecture (they were added after the unification).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
TRUNCATE = 1 << 14
IOCTL_DEV = 1 << 15
READ_EXEC = EXECUTE | READ_FILE | READ_DIR
"""What everyone gets on `/`: read and execute, nothing else."""
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The only rights a rule on a non-directory may carry (others give EINVAL)."""

NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1


# The same definitions as ctypes.c_long & co. Arguments go through these (never bare ints, which
# ctypes passes as 32-bit C ints) so 64-bit syscall and prctl arguments are well defined. The type
# checker sees the public ctypes classes they duplicate (the runtime base, `_SimpleCData`, is private).
if TYPE_CHECKING:
    from ctypes import c_int32 as _c_int32
    from ctypes import c_long, c_ulong, c_void_p
    from ctypes import c_uint64 as _c_uint64
else:

    class c_long(_ctypes._SimpleCData):
        _type_ = "l"

    class c_ulong(_ctypes._SimpleCData):
        _type_ = "L"

    class c_void_p(_ctypes._SimpleCData):
        _type_ = "P"

    class _c_uint64(_ctypes._SimpleCData):
        _type_ = "Q"

    class _c_int32(_ctypes._SimpleCData):
        _type_ = "i"


class _CFunction(_ctypes.CFuncPtr):
    _flags_ = 0x1 | 0x8  # FUNCFLAG_CDECL | FUNCFLAG_USE_ERRNO, as ctypes.CDLL(use_errno=True)
    _restype_ = c_long


_process_handle: int | None = None
_functions: dict[str, Callable[..., int]] = {}


def libc_function(name: str) -> Callable[..., int]:
    """A libc function of this process (`dlsym(RTLD_DEFAULT)`), returning a C long; errno is kept.
    Looked up once per process (the bash zygote's forks inherit what it looked up)."""
    global _process_handle  # noqa: PLW0603 - one dlopen per process, on first use
    found = _functions.get(name)
    if found is None:
        if _process_handle is None:
            _process_handle = _ctypes.dlopen(None, os.RTLD_NOW)  # pyright: ignore[reportArgumentType]
        found = _functions[name] = _CFunction(_ctypes.dlsym(_process_handle, name))
    return found


def get_errno() -> int:
    """errno as left by the last `libc_function` call."""
    return _ctypes.get_errno()


class LandlockError(OSError):
    """A Landlock syscall failed; the message names the step and the path where there is one."""


class _RulesetAttr(_ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", _c_uint64),
        ("handled_access_net", _c_uint64),
        ("scoped", _c_uint64),
    )


class _PathBeneathAttr(_ctypes.Structure):
    _pack_ = 1  # the kernel struct is packed: 12 bytes
    _fields_ = (
        ("allowed_access", _c_uint64),
        ("parent_fd", _c_int32),
    )


def _syscall(number: int, *args: int) -> int:
    return libc_function("syscall")(c_long(number), *(c_long(a) for a in args))


def _check(result: int, what: str) -> int:
    if result < 0:
        err = get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The Landlock ABI of the running kernel, or 0 when Landlock is missing or disabled."""
    if os.uname().sysname != "Linux":
        return 0
    result = _syscall(_SYS_CREATE_RULESET, 0, 0, _CREATE_RULESET_VERSION)
    return max(result, 0)


def fs_rights(abi: int) -> int:
    """Every filesystem right ABI `abi` knows (13 bits in ABI 1, +REFER 2, +TRUNCATE 3, +IOCTL_DEV 5)."""
    if abi <= 0:
        return 0
    bits = 13
    if abi >= 2:
        bits = 14
    if abi >= 3:
        bits = 15
    if abi >= 5:
        bits = 16
    return (1 << bits) - 1


def set_no_new_privs() -> None:
    """`prctl(PR_SET_NO_NEW_PRIVS, 1)`: no setuid/file-capability gains across exec from now on."""
    prctl = libc_function("prctl")
    if prctl(_PR_SET_NO_NEW_PRIVS, c_ulong(1), c_ulong(0), c_ulong(0), c_ulong(0)):
        err = get_errno()
        raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")


_ELOOP = 40  # errno.ELOOP on Linux (importing errno is cheap, but nothing else here needs it)


def _open_without_symlinks(path: str) -> int:
    """An O_PATH fd of `path` reached through no symbolic link at all, component by component.

    Write roots are granted this way: a root that lies inside another writable root (a workspace in
    /tmp) can be renamed by bash and replaced by a link to anywhere; following it would grant that.

    Raises:
        OSError: ELOOP when any component is a symbolic link; FileNotFoundError when it is missing.
    """
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                raise OSError(_ELOOP, "a '..' component")  # roots arrive normalized; never climb
            next_fd = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = next_fd
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(_ELOOP, "a symbolic link")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _add_path_rule(ruleset_fd: int, path: str, rights: int, handled: int, *, follow: bool = True) -> bool:
    """Grant `rights` beneath `path`; False when it is missing (or, with `follow=False`, reached by a link)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC) if follow else _open_without_symlinks(path)
    except FileNotFoundError:
        return False  # a root that vanished since the parent checked it: nothing to grant
    except OSError as exc:
        if not follow and exc.errno == _ELOOP:
            return False  # replaced by a symbolic link since omega started: it stays read-only
        raise LandlockError(exc.errno or 0, f"open {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS
        attr = _PathBeneathAttr(allowed_access=rights & handled, parent_fd=fd)
        _check(
            _syscall(_SYS_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, _ctypes.addressof(attr), 0),
            f"landlock_add_rule {path}",
        )
    finally:
        os.close(fd)
    return True


def ruleset(
    abi: int,
    *,
    read_exec: Iterable[str] = ("/",),
    writable: Iterable[str] = (),
    devices: Iterable[str] = (),
    deny_tcp: bool = False,
    scoped: bool = True,
) -> tuple[int, list[str]]:
    """A Landlock ruleset fd (close-on-exec) with these rules, and the writable paths not granted.

    `read_exec` get read+execute, `writable` get every right, `devices` get the file rights
    (read, write, truncate, device ioctls). `deny_tcp` handles TCP bind/connect with no port
    allowed (ABI >= 4); `scoped` isolates abstract UNIX sockets and signals (ABI >= 6). Rules hold
    the inodes the paths lead to now, as seen from this process's mount namespace. Writable paths
    are opened through no symbolic link; the ones missing or reached through a link are returned
    (not granted). `enforce` applies it; the bash zygote builds one per session and enforces it per call.

    Raises:
        LandlockError: Landlock is unavailable or a rule cannot be added.
    """
    handled = fs_rights(abi)
    if not handled:
        raise LandlockError(0, "Landlock is not available in this kernel")
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if deny_tcp:
        if abi < 4:
            raise LandlockError(0, f"Landlock ABI {abi} cannot restrict TCP (needs ABI 4)")
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if scoped and abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    ruleset_fd = _check(_syscall(_SYS_CREATE_RULESET, _ctypes.addressof(attr), size, 0), "landlock_create_ruleset")
    try:
        for path in read_exec:
            _add_path_rule(ruleset_fd, path, READ_EXEC, handled)
        skipped = [path for path in writable if not _add_path_rule(ruleset_fd, path, handled, handled, follow=False)]
        for path in devices:
            _add_path_rule(ruleset_fd, path, FILE_RIGHTS, handled)
    except BaseException:
        os.close(ruleset_fd)
        raise
    return ruleset_fd, skipped


def enforce(ruleset_fd: int) -> None:
    """Confine the calling thread (and what it execs) with the ruleset; irreversible. Sets
    no-new-privileges first, as the kernel requires for unprivileged callers.

    Raises:
        LandlockError: restriction failed.
    """
    set_no_new_privs()
    _check(_syscall(_SYS_RESTRICT_SELF, ruleset_fd, 0), "landlock_restrict_self")


def restrict_self(
    abi: int,
    *,
    read_exec: Iterable[str] = ("/",),
    writable: Iterable[str] = (),
    devices: Iterable[str] = (),
    deny_tcp: bool = False,
    scoped: bool = True,
) -> list[str]:
    """`ruleset` then `enforce`: confine the calling thread at once; returns the writable paths not granted.

    Raises:
        LandlockError: Landlock is unavailable, a rule cannot be added, or restriction failed.
    """
    ruleset_fd, skipped = ruleset(
        abi, read_exec=read_exec, writable=writable, devices=devices, deny_tcp=deny_tcp, scoped=scoped
    )
    try:
        enforce(ruleset_fd)
    finally:
        os.close(ruleset_fd)
    return skipped
