"""Symlink-safe path containment for the file tools (read, write, edit): the policy-facing half.

A path check is never a string test and never "realpath, then open by name": writes open the
parent directory relative to an fd of the allowed root with `openat2(RESOLVE_BENEATH |
RESOLVE_NO_MAGICLINKS)` (fallback without openat2: a component walk that refuses symlinks; both in
`sandbox/beneath.py`), and every later operation (create, temp file, rename) goes through that
directory fd, so a symlink swapped in mid-call cannot redirect it. The roots themselves are opened
where they were when omega started (`SandboxPolicy.pinned_roots`), through no symbolic link, so a
root that bash could rename (one inside `/tmp`) cannot be turned into a link to elsewhere between
calls. The blocklist (system dirs, omega's config and state) is checked on the lexical path *and* on
the real location of the opened fd. A write the user approved outside the roots
(`sandbox/approvals.py`) is resolved from `/` refusing every symbolic link, so it lands exactly at
the path the user saw. Reads are unrestricted except `/proc/*/environ` and the token file, checked
the same two ways, and in sandbox and rx modes the secrets of `SandboxPolicy.hidden` (`~/.ssh`, ...).
Where the calling session has a sandbox world, `open_readable` has its file worker open the path there
(`fileworker_client.py`: the kernel resolves it as for that session's bash, so `/proc/<pid>/root` or a
planted link leads nowhere bash could not go) and only checks the fd here, for the messages.
Writes there are checked by `check_world_write` (the same refusals and messages as `open_write_parent`,
plus the hidden secrets, which bash's world covers) and made by the worker in the directory found here.
All functions here block: call them from a worker thread.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import stat
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omega_mcp.errors import InvalidArgumentsError, PathDeniedError, ToolError
from omega_mcp.sandbox.beneath import make_exact, open_beneath, open_exact, real_fd_path, walk
from omega_mcp.sandbox.hidden import unhide_hint
from omega_mcp.sandbox.policy import SYSTEM_DIRS, SandboxPolicy
from omega_mcp.sandbox.protect import protected_reason
from omega_mcp.sandbox.world import ensure_private_tmp, host_path

if TYPE_CHECKING:
    from omega_mcp.sandbox.approvals import Grants
    from omega_mcp.sandbox.fileworker_client import FileWorker

__all__ = [
    "DEV_NULL",
    "MAX_PATH_BYTES",
    "ParentDir",
    "WorldTarget",
    "check_read_fd",
    "check_world_write",
    "describe_os_error",
    "not_regular_message",
    "open_readable",
    "open_write_parent",
    "precheck_write",
    "remember_hidden",
    "resolve_path",
]

MAX_PATH_BYTES = 4096
DEV_NULL = Path("/dev/null")


def resolve_path(policy: SandboxPolicy, file_path: str) -> Path:
    """The lexical absolute form of a tool `file_path`: `~` expanded, relative to the workspace, normalised.

    Raises:
        InvalidArgumentsError: NUL byte, unencodable text, or longer than 4096 bytes.
    """
    if "\0" in file_path:
        raise InvalidArgumentsError(f"file_path contains a NUL byte: {file_path!r}")
    try:
        size = len(os.fsencode(file_path))
    except UnicodeEncodeError:
        raise InvalidArgumentsError(f"file_path is not valid Unicode: {file_path!r}") from None
    if size > MAX_PATH_BYTES:
        raise InvalidArgumentsError(f"file_path is too long ({size} bytes; the limit is {MAX_PATH_BYTES})")
    if file_path == "~" or file_path.startswith("~/"):
        file_path = os.path.expanduser("~") + file_path[1:]
    joined = os.path.join(os.path.abspath(policy.workspace), file_path)
    normal = os.path.normpath(joined)
    if normal.startswith("//"):  # POSIX keeps a leading `//`; on Linux it is just `/`
        normal = "/" + normal.lstrip("/")
    if len(os.fsencode(normal)) > MAX_PATH_BYTES:
        raise InvalidArgumentsError(f"path is too long once resolved against the workspace: {normal[:200]}...")
    return Path(normal)


@functools.lru_cache(maxsize=4096)
def _aliases(path: Path) -> tuple[Path, ...]:
    """The lexical and the real spelling of a trusted path (config file, root), for component comparison.

    Computed once per path for the process, like the pinned roots: these are omega's own files and the
    user's secrets, not places a tool may move, and every read or write compares against them.
    """
    return tuple(dict.fromkeys((Path(os.path.normpath(path)), Path(os.path.realpath(path)))))


@dataclass(frozen=True, slots=True)
class _Guard:
    """Every spelling (`_aliases`) of every place a check refuses below, by check, made once per policy
    object (a session keeps its policy): comparing the target with each through pathlib cost more than
    the rest of a small read or write. A target below none of them passes that check."""

    read: frozenset[str]
    """`_read_block_reason`'s places."""
    hidden: frozenset[Path]
    """`policy.hidden`, as a set."""
    write: frozenset[str]
    """`_write_block_reason`'s places, but the protected names (`protect.protected_reason`)."""
    hidden_write: frozenset[str]
    """`_hidden_write_reason`'s places."""


_GUARDS: dict[int, tuple[SandboxPolicy, _Guard]] = {}
_GUARDS_KEPT = 256
_guards_lock = threading.Lock()


def _spellings(places: list[Path]) -> frozenset[str]:
    return frozenset(str(alias) for place in places for alias in _aliases(place))


def _guard(policy: SandboxPolicy) -> _Guard:
    known = _GUARDS.get(id(policy))
    if known is not None and known[0] is policy:
        return known[1]
    reading = [policy.token_file, policy.state_dir]
    if policy.mode != "rwx":
        reading += [*policy.foreign, policy.clients_dir, *policy.hidden, *policy.own_hidden]
    writing = [*policy.foreign, policy.clients_dir, *policy.protected_paths, policy.private_tmp_root]
    guard = _Guard(
        read=_spellings(reading),
        hidden=frozenset(policy.hidden),
        write=_spellings(writing) | {str(system) for system in SYSTEM_DIRS},
        hidden_write=_spellings(list(policy.hidden)),
    )
    with _guards_lock:
        while len(_GUARDS) >= _GUARDS_KEPT:
            del _GUARDS[next(iter(_GUARDS))]  # the oldest
        _GUARDS[id(policy)] = (policy, guard)
    return guard


def _write_block_reason(policy: SandboxPolicy, target: Path) -> str | None:
    """Why `target` may never be written (any mode), or None. `target` is lexical or real."""
    if target == DEV_NULL:
        return None
    if _below_any(target, _guard(policy).write):
        listed = _listed_write_reason(policy, target)
        if listed is not None:
            return listed
    return protected_reason(policy, target)


def _listed_write_reason(policy: SandboxPolicy, target: Path) -> str | None:
    other = _other_client_reason(policy, target)
    if other is not None:
        return other
    for protected in policy.protected_paths:
        for alias in _aliases(protected):
            if target.is_relative_to(alias):
                return (
                    f"{protected} is omega's own configuration, state or code (protected), never writable by the "
                    "tools (every mode)"
                )
    if _other_session_tmp(policy, target):
        return "it is another session's private /tmp; this session's is at /tmp"
    for system in SYSTEM_DIRS:
        if target.is_relative_to(system):
            return f"{system} is a system directory, never writable by the file tools (every mode)"
    return None


def _other_client_reason(policy: SandboxPolicy, target: Path) -> str | None:
    """Why `target` belongs to another hub client (its workspace, its tree), or None."""
    for foreign in policy.foreign:
        if any(target.is_relative_to(alias) for alias in _aliases(foreign)):
            return f"{foreign} is another client's workspace; this client works in {policy.workspace}"
    for alias in _aliases(policy.clients_dir):
        if target.is_relative_to(alias) and not any(target.is_relative_to(a) for a in _aliases(policy.client_dir)):
            return f"{target} is in another client's tree; this client's own is {policy.client_dir}"
    return None


def _other_session_tmp(policy: SandboxPolicy, target: Path) -> bool:
    own = policy.private_tmp
    for alias in _aliases(policy.private_tmp_root):
        if target.is_relative_to(alias):
            return own is None or not any(target.is_relative_to(a) for a in _aliases(own))
    return False


def _check_write_allowed(policy: SandboxPolicy, target: Path, shown: Path) -> None:
    reason = _write_block_reason(policy, target)
    if reason is not None:
        raise PathDeniedError(str(shown), f"{reason}; writable ({policy.mode} mode): {_roots_text(policy)}")


def _roots_text(policy: SandboxPolicy) -> str:
    if policy.mode == "rwx":
        return "anywhere except system directories and omega's own configuration, state and code"
    return ", ".join(str(r) for r in policy.file_write_roots) + " (except omega's configuration, state and code)"


@dataclass(frozen=True, slots=True)
class ParentDir:
    """An open directory fd (O_PATH) for the parent of a write target, and the target's entry name in it."""

    dir_fd: int
    name: str
    path: Path
    """The lexical absolute target path (what messages show)."""
    real_path: Path
    """Where the entry really is: the real path of `dir_fd` joined with `name`."""


def _parent_error(policy: SandboxPolicy, path: Path, root: Path, exc: OSError, *, exact: bool = False) -> ToolError:
    """The error for an OSError met opening the directory a write goes to (`exact`: an approved
    path, which must be reached without any link)."""
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"file does not exist: {path} (its directory {path.parent} is missing)")
    if isinstance(exc, NotADirectoryError):
        return ToolError(f"cannot use {path}: a component of {path.parent} is not a directory")
    if exc.errno in (errno.EXDEV, errno.ELOOP):
        if exact:
            return PathDeniedError(str(path), f"{_NOT_EXACT}; nothing was written")
        return _deny_escape(policy, path, root, exc)
    return ToolError(describe_os_error(exc, path.parent, "open the directory"))


def _deny_escape(policy: SandboxPolicy, path: Path, root: Path, exc: OSError) -> PathDeniedError:
    what = "a symbolic link" if exc.errno == errno.ELOOP else "a symbolic link or `..`"
    return PathDeniedError(
        str(path),
        f"the path leaves the writable root {root} through {what}; writable ({policy.mode} mode): "
        f"{_roots_text(policy)}",
    )


def _pinned(policy: SandboxPolicy, root: Path) -> Path:
    """Where a write root really was when the policy was made (see `SandboxPolicy.pinned_roots`)."""
    return policy.pinned_roots.get(root) or Path(os.path.realpath(root))


def _pick_root(policy: SandboxPolicy, path: Path) -> tuple[Path, Path]:
    """(configured root, matching spelling) of the most specific write root containing `path` by components."""
    matches = [
        (len(alias.parts), root, alias)
        for root in policy.file_write_roots
        for alias in dict.fromkeys((Path(os.path.normpath(root)), _pinned(policy, root)))
        if path.is_relative_to(alias)
    ]
    if not matches:
        reason = (
            f"outside the writable roots; writable ({policy.mode} mode): {_roots_text(policy)}; write inside one of "
            f"them (relative paths resolve against the workspace {policy.workspace})"
        )
        askable = policy.on_denied == "ask"
        # A symlink on the way: the user would approve one path and the write would land at another.
        if askable and (real := Path(os.path.realpath(path.parent)) / path.name) != path:
            askable = False
            reason += f"; it goes through a symbolic link (really {real}), so it cannot be approved: use the real path"
        raise PathDeniedError(str(path), reason, askable=askable)
    _, root, alias = max(matches, key=lambda m: m[0])
    return root, alias


def _open_root(policy: SandboxPolicy, root: Path, path: Path, *, create: bool) -> int:
    """Open a write root where it was when omega started; a symbolic link swapped in since is refused."""
    real = _pinned(policy, root)
    try:
        try:
            return open_exact(real)
        except FileNotFoundError:
            if not create:
                raise
        if root == policy.tmp_dir and policy.private_tmp is not None:
            ensure_private_tmp(policy)  # the session's /tmp, on its first write
        else:
            make_exact(real)  # a configured root that does not exist yet
        return open_exact(real)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ELOOP):
            raise
        raise PathDeniedError(
            str(path),
            f"the writable root {root} is no longer where it was when omega started ({real}): a symbolic link "
            "now stands in its way, so nothing was written (restart omega if the change was intended)",
        ) from None


def _open_parent_fd(
    policy: SandboxPolicy, path: Path, root: Path, rel: tuple[str, ...], create: bool, *, exact: bool
) -> int:
    contained = policy.mode != "rwx"
    root_fd = _open_root(policy, root, path, create=create)
    try:
        try:
            return open_beneath(root_fd, rel, contained=contained, exact=exact)
        except FileNotFoundError:
            if not create:
                raise
        # Find the deepest existing ancestor (still resolved beneath the root), then create the rest
        # with mkdirat through directory fds, never by name from the root again.
        depth = len(rel) - 1
        while True:
            try:
                fd = open_beneath(root_fd, rel[:depth], contained=contained, exact=exact)
                break
            except FileNotFoundError:
                depth -= 1
        try:
            real = real_fd_path(fd, root.joinpath(*rel[:depth]))
            _check_write_allowed(policy, real.joinpath(*rel[depth:], path.name), path)
            for part in rel[depth:]:
                with suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                nxt = walk(fd, (part,), follow=False)  # just created by us: a symlink here is an attack
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(root_fd)


_NOT_EXACT = "an approved write never follows a symbolic link, and the way to it now goes through one"


@contextmanager
def open_write_parent(
    policy: SandboxPolicy, path: Path, *, create: bool, grants: Grants | None = None
) -> Generator[ParentDir]:
    """Open the parent directory of a write target beneath its allowed root; the fd closes on exit.

    `path` comes from `resolve_path`. With `create`, missing parent directories are made (and a missing
    configured root). The leaf itself is not resolved: callers act on `ParentDir.name` relative to
    `ParentDir.dir_fd` without following it. A path outside every root is opened if `grants` holds an
    unexpired approval for it (consumed here): from `/`, through no symbolic link, blocklist still checked.

    Raises:
        PathDeniedError: outside every write root, escaping its root, or on the blocklist (lexically or really).
        ToolError: the parent cannot be opened (missing without `create`, not a directory, OS error).
    """
    _check_write_allowed(policy, path, path)
    if path == Path("/"):
        raise ToolError("cannot write to `/`: it is a directory")
    exact = False
    try:
        root, alias = _pick_root(policy, path)
    except PathDeniedError as exc:
        if not exc.askable or grants is None or not grants.consume(path):
            raise
        root = alias = Path("/")
        exact = True
    rel = path.relative_to(alias).parts[:-1]
    if path == alias:  # writing the root itself: its parent is outside the root
        raise ToolError(f"cannot write to {path}: it is a directory (a writable root)")
    try:
        fd = _open_parent_fd(policy, path, root, rel, create, exact=exact)
    except OSError as exc:
        raise _parent_error(policy, path, root, exc, exact=exact) from None
    try:
        real = real_fd_path(fd, path.parent) / path.name
        _check_write_allowed(policy, real, path)
        if exact and real != path:  # cannot happen without a symlink on the way; checked all the same
            raise PathDeniedError(str(path), f"{_NOT_EXACT} (really {real}); nothing was written")
        yield ParentDir(dir_fd=fd, name=path.name, path=path, real_path=real)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class WorldTarget:
    """A write target checked for the session's world: where its directory really is, in the world's
    terms (what the file worker must find), and where the file is in omega's (the lock's key)."""

    path: Path
    world_parent: Path
    real_path: Path


def _hidden_write_reason(policy: SandboxPolicy, target: Path) -> str | None:
    if policy.mode == "rwx" or not _below_any(target, _guard(policy).hidden_write):
        return None
    for hidden in policy.hidden:
        if any(target.is_relative_to(alias) for alias in _aliases(hidden)):
            return f"hidden from the tools by [sandbox] hide ({unhide_hint(hidden)}); bash cannot write it either"
    return None


def _in_world(policy: SandboxPolicy, real: Path) -> Path:
    """`real` (omega's view) as the session's world names it: its private /tmp is `tmp_dir` there."""
    private = policy.pinned_roots.get(policy.tmp_dir) if policy.private_tmp is not None else None
    if private is not None and real.is_relative_to(private):
        return Path(os.path.normpath(policy.tmp_dir)) / real.relative_to(private)
    return real


def precheck_write(policy: SandboxPolicy, path: Path) -> None:
    """The refusals of a write that need no file system: the blocklist, hidden secrets, outside every root.

    Raises:
        PathDeniedError: refused (askable when only outside the roots).
    """
    _check_write_allowed(policy, path, path)
    if (reason := _hidden_write_reason(policy, path)) is not None:
        raise PathDeniedError(str(path), reason)
    if path != Path("/"):
        _pick_root(policy, path)


def check_world_write(policy: SandboxPolicy, path: Path, *, create: bool) -> WorldTarget:
    """Check a write that the session's file worker will make in its world: the same refusals, with
    the same messages, as `open_write_parent`, without writing anything here (missing directories are
    made by the worker). The worker then acts only if the directory still is `world_parent`.

    Raises:
        PathDeniedError: outside every write root (askable), escaping its root, on the blocklist, or hidden.
        ToolError: the directory is missing without `create`, or not a directory.
    """
    _check_write_allowed(policy, path, path)
    if (reason := _hidden_write_reason(policy, path)) is not None:
        raise PathDeniedError(str(path), reason)
    if path == Path("/"):
        raise ToolError("cannot write to `/`: it is a directory")
    root, alias = _pick_root(policy, path)
    if path == alias:
        raise ToolError(f"cannot write to {path}: it is a directory (a writable root)")
    rel = path.relative_to(alias).parts[:-1]
    depth = len(rel)
    try:
        root_fd = _open_root(policy, root, path, create=create)
        try:
            while True:
                try:
                    fd = open_beneath(root_fd, rel[:depth], contained=True, exact=False)
                    break
                except FileNotFoundError:
                    if not create or depth == 0:
                        raise
                    depth -= 1
        finally:
            os.close(root_fd)
    except OSError as exc:
        raise _parent_error(policy, path, root, exc) from None
    try:
        parent = real_fd_path(fd, root.joinpath(*rel[:depth])).joinpath(*rel[depth:])
    finally:
        os.close(fd)
    real = parent / path.name
    _check_write_allowed(policy, real, path)
    if (reason := _hidden_write_reason(policy, real)) is not None:
        raise PathDeniedError(str(path), reason)
    return WorldTarget(path=path, world_parent=_in_world(policy, parent), real_path=real)


def _below_any(target: Path, prefixes: frozenset[str]) -> bool:
    """Whether `target` (absolute, normalised) is one of `prefixes` or lies below one: what
    `is_relative_to` says for each, by its components, with one set lookup a component."""
    text = str(target)
    while True:
        if text in prefixes:
            return True
        cut = text.rfind("/")
        if cut <= 0:
            return "/" in prefixes
        text = text[:cut]


def _read_block_reason(policy: SandboxPolicy, target: Path) -> str | None:
    if target.is_relative_to("/proc") and target.name == "environ":
        return "/proc/*/environ holds process secrets (API keys, tokens); reading it is denied"
    if not _below_any(target, _guard(policy).read):
        return None  # below none of the places refused here: the checks below would all pass
    for alias in _aliases(policy.token_file):
        if target == alias:
            return "omega's token file is never readable by the tools"
    for alias in _aliases(policy.state_dir):
        if target.is_relative_to(alias):
            return "omega's state files are never readable by the tools"
    if policy.mode != "rwx":
        other = _other_client_reason(policy, target)
        if other is not None:
            return f"hidden from this client: {other}"
        for hidden in policy.hidden:
            if any(target.is_relative_to(alias) for alias in _aliases(hidden)):
                return f"hidden from the tools by [sandbox] hide ({unhide_hint(hidden)})"
        for own in policy.own_hidden:
            if any(target.is_relative_to(alias) for alias in _aliases(own)):
                if own == policy.private_tmp_root and not _other_session_tmp(policy, target):
                    continue  # the caller's own /tmp, reached through the tmp_dir mapping
                return "omega's own configuration, saved sessions and other sessions' files are hidden from the tools"
    return None


_HIDDEN_IDS: dict[Path, tuple[int, int]] = {}
"""(st_dev, st_ino) of every hidden path seen in this process: still hidden after a rename."""
_HIDDEN_MISSED: dict[Path, float] = {}  # when each hidden path was last found missing (most defaults never exist)


def remember_hidden(policy: SandboxPolicy) -> None:
    """Note the identity of every hidden path that exists (at start and before each `read`), so `read`
    refuses it after a rename of a directory above it too; one that appears later, within a second."""
    if policy.mode == "rwx":
        return
    now = time.monotonic()
    for hidden in policy.hidden:
        if hidden in _HIDDEN_IDS or now - _HIDDEN_MISSED.get(hidden, -math.inf) < 1.0:
            continue  # a path found missing is looked for again at most once a second, not on every read
        try:
            st = os.stat(hidden)
        except OSError:
            _HIDDEN_MISSED[hidden] = now
            continue
        _HIDDEN_IDS[hidden] = (st.st_dev, st.st_ino)


def _hidden_identity(policy: SandboxPolicy, real: Path) -> Path | None:
    """The hidden path `real` lies in by identity (a directory above it was renamed), or None."""
    if policy.mode == "rwx":
        return None
    remember_hidden(policy)
    hidden = _guard(policy).hidden
    wanted = {ident: path for path, ident in _HIDDEN_IDS.items() if path in hidden}
    if not wanted:
        return None
    for place in (real, *real.parents):
        with suppress(OSError):
            st = os.stat(place)
            found = wanted.get((st.st_dev, st.st_ino))
            if found is not None:
                return found
    return None


def check_read_fd(policy: SandboxPolicy, fd: int, path: Path) -> None:
    """Refuse an opened file that is really an environ file, the token, a state file or a hidden secret
    (by real path; the token also by inode).

    Raises:
        PathDeniedError: the fd is a denied file, whatever name or link led to it.
    """
    real = real_fd_path(fd, path)
    reason = _read_block_reason(policy, real)
    if reason is None and (moved := _hidden_identity(policy, real)) is not None:
        reason = (
            f"it lies in {moved}, hidden from the tools by [sandbox] hide, under another name ({unhide_hint(moved)})"
        )
    if reason is None:
        with suppress(OSError):
            token = os.stat(policy.token_file)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (token.st_dev, token.st_ino):  # a hard link to the token
                reason = "it is a link to omega's token file, which is never readable by the tools"
    if reason is not None:
        raise PathDeniedError(str(path), reason)


_KIND = {
    stat.S_IFDIR: "a directory; use bash `ls` to list it",
    stat.S_IFIFO: "a FIFO (named pipe); reading it could block forever",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def not_regular_message(path: Path, mode: int) -> str:
    kind = _KIND.get(stat.S_IFMT(mode), "not a regular file")
    return f"not a regular file: {path} is {kind}"


def _missing(policy: SandboxPolicy, path: Path) -> ToolError:
    return ToolError(f"file does not exist: {path} (relative paths resolve against the workspace {policy.workspace})")


def open_readable(policy: SandboxPolicy, path: Path, worker: FileWorker | None = None) -> int:
    """Open a regular file for reading (symlinks followed; never blocks); returns an O_RDONLY fd.

    With the session's `worker` the file is opened inside the session's sandbox world, where bash
    would open it (the kernel resolves the path there: `fileworker_client.py`), and only checked
    here; without one it is first opened O_PATH here (no side effects even on devices), checked,
    then reopened through /proc/self/fd so the checked inode is the one read.

    Raises:
        PathDeniedError: environ, token or state file, or a hidden secret (sandbox, rx).
        ToolError: missing, not a regular file, OS error.
        WorkerGoneError: the worker died or stopped answering (start another and try again).
    """
    reason = _read_block_reason(policy, path)
    if reason is not None:
        raise PathDeniedError(str(path), reason)
    if worker is not None:
        return _open_in_world(policy, path, worker)
    try:
        pfd = os.open(host_path(policy, path), os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _missing(policy, path) from None
    except OSError as exc:
        raise ToolError(describe_os_error(exc, path, "open")) from None
    try:
        check_read_fd(policy, pfd, path)
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode) and real_fd_path(pfd, path) != DEV_NULL:
            raise ToolError(not_regular_message(path, st.st_mode))
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            return os.open(f"/proc/self/fd/{pfd}", flags)
        except FileNotFoundError:  # no /proc: reopen by name and make sure it is the same inode
            fd = os.open(host_path(policy, path), flags)
            again = os.fstat(fd)
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                os.close(fd)
                raise ToolError(f"{path} changed while it was being opened; try again") from None
            return fd
        except OSError as exc:
            raise ToolError(describe_os_error(exc, path, "open")) from None
    finally:
        os.close(pfd)


def _open_in_world(policy: SandboxPolicy, path: Path, worker: FileWorker) -> int:
    try:
        fd, readable = worker.open(path)
    except FileNotFoundError:
        raise _missing(policy, path) from None
    except OSError as exc:
        raise ToolError(describe_os_error(exc, path, "open")) from None
    try:
        check_read_fd(policy, fd, path)
        if not readable:
            raise ToolError(not_regular_message(path, os.fstat(fd).st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def describe_os_error(exc: OSError, path: Path, action: str) -> str:
    """A one-line, actionable description of an OS error on `path`."""
    hints = {
        errno.EACCES: "the operating system refused access (file permissions)",
        errno.EPERM: "the operating system refused the operation",
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is exceeded",
        errno.EROFS: "the file system is read-only",
        errno.ENAMETOOLONG: "a path component is longer than 255 bytes",
        errno.ELOOP: "too many levels of symbolic links",
        errno.EISDIR: "it is a directory",
        errno.ENOTDIR: "a path component is not a directory",
    }
    why = hints.get(exc.errno or 0, exc.strerror or str(exc))
    return f"cannot {action} {path}: {why}"
