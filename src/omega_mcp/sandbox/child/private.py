"""The process-level steps of the private world, for the trampoline (`exec.py`): ids, dumpability, keys.

Stdlib only and no package import, like `landlock.py` and `mounts.py` (imported the same way, in a
`python -I -S` process on every bash call). `map_ids` writes the user namespace's id maps: the
caller's own uid and gid, except for root, which becomes `UNPRIVILEGED_ID` inside (still root, the
invoking user, outside: what it creates is root's), so a command run by root holds no capability
in its namespace and cannot ptrace the namespace's init. `undumpable` makes the calling process
non-dumpable (its memory and /proc files closed to same-uid processes: for PID 1 and the supervisor).
`join_session_keyring` gives the process a fresh, empty session keyring, so the keys of the user's
login session (kernel keyring) are not possessed by anything started below it. `set_rlimits` only
ever lowers a limit.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from omega_mcp.sandbox.child import landlock
elif __package__:
    from omega_mcp.sandbox.child import landlock
else:
    import landlock  # exec.py put this directory on sys.path

__all__ = [
    "RLIMITS",
    "UNPRIVILEGED_ID",
    "inside_ids",
    "join_session_keyring",
    "map_ids",
    "processes_of",
    "set_rlimits",
    "undumpable",
]

RLIMITS = ("core", "fsize", "nofile", "nproc", "data", "as")
"""The resource limits the trampoline accepts (`--rlimit NAME=VALUE`)."""

UNPRIVILEGED_ID = 1000
"""The uid and gid a command started by root has inside its user namespace (root outside)."""

_PR_SET_DUMPABLE = 4
_KEYCTL_JOIN_SESSION_KEYRING = 1
_SYS_KEYCTL = {
    "x86_64": 250,
    "aarch64": 219,
    "riscv64": 219,
    "loongarch64": 219,
    "i386": 288,
    "i686": 288,
    "armv7l": 311,
    "armv6l": 311,
    "ppc64le": 271,
    "ppc64": 271,
    "s390x": 280,
}


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def inside_ids(uid: int, gid: int) -> tuple[int, int]:
    """The uid and gid that `uid`/`gid` (outside) become inside a command's user namespace."""
    return (UNPRIVILEGED_ID, UNPRIVILEGED_ID) if uid == 0 else (uid, gid)


def map_ids(uid: int, gid: int) -> None:
    """Write this (new) user namespace's maps: one id each, `inside_ids` inside, `uid`/`gid` outside.

    Raises:
        OSError: a map cannot be written.
    """
    inside_uid, inside_gid = inside_ids(uid, gid)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside_uid} {uid} 1")
    _write("/proc/self/gid_map", f"{inside_gid} {gid} 1")


def undumpable() -> bool:
    """`prctl(PR_SET_DUMPABLE, 0)`; False when it failed."""
    c_ulong = landlock.c_ulong
    prctl = landlock.libc_function("prctl")
    return prctl(_PR_SET_DUMPABLE, c_ulong(0), c_ulong(0), c_ulong(0), c_ulong(0)) == 0


def join_session_keyring() -> bool:
    """`keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: a new anonymous session keyring; False when this
    kernel or architecture has none (then there is no keyring to inherit either)."""
    number = _SYS_KEYCTL.get(os.uname().machine)
    if number is None:
        return False
    syscall = landlock.libc_function("syscall")
    c_long = landlock.c_long
    return syscall(c_long(number), c_long(_KEYCTL_JOIN_SESSION_KEYRING), c_long(0)) >= 0


def processes_of(uid: int) -> int | None:
    """How many processes /proc lists for `uid`; None without a procfs (macOS)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    mine = 0
    for entry in entries:
        if entry.isdigit():
            try:
                mine += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return mine


def set_rlimits(rlimits: list[tuple[str, int]], nproc_headroom: int) -> None:
    """Lower each limit to its value; with `nproc_headroom` (not root: root is exempt), RLIMIT_NPROC to
    the uid's current process count plus the headroom (the limit counts every process of the uid).

    Raises:
        OSError: a limit cannot be set (the message names it).
    """
    import resource

    limits = dict(rlimits)
    if nproc_headroom and os.getuid() != 0:
        mine = processes_of(os.getuid())
        if mine is not None:  # without a procfs, RLIMIT_NPROC is left alone
            limits["nproc"] = mine + nproc_headroom
    for name, value in limits.items():
        which = getattr(resource, f"RLIMIT_{name.upper()}", None)
        if which is None:
            continue  # e.g. RLIMIT_NPROC is missing on some platforms
        soft, hard = resource.getrlimit(which)
        new_hard = value if hard == resource.RLIM_INFINITY else min(value, hard)
        # Only ever lower: a smaller existing soft limit stays as it is.
        new_soft = new_hard if soft == resource.RLIM_INFINITY else min(soft, new_hard)
        try:
            resource.setrlimit(which, (new_soft, new_hard))
        except (OSError, ValueError, OverflowError) as exc:
            raise OSError(f"setrlimit {name}={value}: {exc}") from None
