"""The `write` and `edit` built-in tools: atomic replacement of a file, never a modification in place.

Both write a temp file next to the target through the parent directory's fd (`sandbox/paths.py`),
fsync it, give it the old file's mode (minus set-id bits) and owner, and rename it over the target,
so a failure leaves the old content intact; blocking I/O runs in a worker thread. The target entry
is never followed: a symbolic link is replaced by a regular file (a link to a directory is refused;
`edit` refuses links), a hard link is replaced as this entry only. Writes and edits of one file are
serialised within the process, and `edit` re-applies itself when the file changed on disk between its
read and its rename; with `on_denied = "ask"` a path outside the roots is put to the user first.

Where the calling session has a sandbox world, the file-system work happens there, in its file worker
(`sandbox/fileworker_client.py`), as for its bash: omega checks the path (`paths.check_world_write`,
for the messages), keeps the semantics (content, encoding, edit matching) and has the worker read the
file (edit) and replace it, so Landlock, read-only binds and covers refuse what bash could not write
even where omega's checks would allow it. The one write made from omega's own process there is the
one the user approved (outside every root); without a world, everything happens here.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
import mcp_types as types

from omega_mcp.builtin.schemas import EditArgs, WriteArgs
from omega_mcp.builtin.text import plural
from omega_mcp.errors import InvalidArgumentsError, PathDeniedError, ToolError
from omega_mcp.results import text_result
from omega_mcp.sandbox import fileworker_client
from omega_mcp.sandbox.approvals import Approver, Grants, with_approval
from omega_mcp.sandbox.fileworker_client import FileWorker, StaleWorkerError, WorkerGoneError
from omega_mcp.sandbox.paths import (
    DEV_NULL,
    ParentDir,
    check_read_fd,
    check_world_write,
    describe_os_error,
    not_regular_message,
    open_write_parent,
    precheck_write,
    resolve_path,
)
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.tracker import ProtectedTree

__all__ = ["edit_file", "write_file"]

MAX_EDIT_BYTES = 64 * 1024 * 1024
_CHUNK_BYTES = 256 * 1024  # edit reads the file in chunks of this size
_BOM = b"\xef\xbb\xbf"
_LOCK_SECONDS = 60.0  # a write or edit of the same file ahead of this one is bounded I/O
_EDIT_TRIES = 5
_STALE_TRIES = 3  # workers started for one write when protected names keep changing meanwhile


def _lstat(parent: ParentDir) -> os.stat_result | None:
    try:
        return os.stat(parent.name, dir_fd=parent.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _fsync_dir(dir_fd: int) -> None:
    """Best effort: make the rename durable (an O_PATH fd cannot be fsynced, so open the directory)."""
    with suppress(OSError):
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _create_temp(dir_fd: int, mode: int) -> tuple[str, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(16):
        name = f".omega-{secrets.token_hex(8)}.tmp"  # fixed length: a long target name cannot push it over 255
        try:
            return name, os.open(name, flags, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise ToolError("cannot create a temporary file next to the target (name collisions); try again")


def _replace(parent: ParentDir, data: bytes, old: os.stat_result | None) -> None:
    """Atomically make `parent.name` a regular file holding `data`; `old` gives mode and owner to keep."""
    # A new file is created 0o666 so the kernel applies umask (and default ACLs) as for any new file.
    name, fd = _create_temp(parent.dir_fd, 0o600 if old is not None else 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if old is not None:
                if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    with suppress(OSError):  # only root may give a file away; keeping ours is the fallback
                        os.fchown(fd, old.st_uid, old.st_gid)
                # Rewriting drops set-id bits, as the kernel does on any write: new content must not inherit them.
                os.fchmod(fd, stat.S_IMODE(old.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(name, parent.name, src_dir_fd=parent.dir_fd, dst_dir_fd=parent.dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(name, dir_fd=parent.dir_fd)
        raise
    _fsync_dir(parent.dir_fd)


@dataclass(slots=True)
class _FileLock:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


_locks_guard = threading.Lock()
_locks: dict[Path, _FileLock] = {}


@contextmanager
def _exclusive(key: Path, shown: Path) -> Generator[None]:
    """Hold this process's lock on the file really at `key` (tool calls run in parallel worker threads).

    Without it, two edits read the same content and the second rename discards the first edit.
    """
    with _locks_guard:
        entry = _locks.setdefault(key, _FileLock())
        entry.users += 1
    try:
        if not entry.lock.acquire(timeout=_LOCK_SECONDS):
            raise ToolError(
                f"another write or edit of {shown} has been running for over {_LOCK_SECONDS:g} s; "
                "the file was not changed, try again later"
            )
        try:
            yield
        finally:
            entry.lock.release()
    finally:
        with _locks_guard:
            entry.users -= 1
            if not entry.users:
                del _locks[key]


def _write_sync(policy: SandboxPolicy, path: Path, data: bytes, grants: Grants | None) -> str:
    try:
        if path == DEV_NULL:
            fd = os.open(DEV_NULL, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            return f"Wrote {plural(len(data), 'byte')} to {path} (discarded)"
        with (
            open_write_parent(policy, path, create=True, grants=grants) as parent,
            _exclusive(parent.real_path, path),
        ):
            old = _lstat(parent)
            note = "updated"
            if old is None:
                note = "created"
            elif stat.S_ISLNK(old.st_mode):
                with suppress(OSError):  # dangling or unreadable: the link is simply replaced
                    if stat.S_ISDIR(os.stat(parent.name, dir_fd=parent.dir_fd).st_mode):
                        target = os.readlink(parent.name, dir_fd=parent.dir_fd)
                        raise ToolError(
                            f"cannot write {path}: it is a symbolic link to the directory {target}; "
                            "give a file name inside it"
                        )
                note, old = "replaced a symbolic link with a regular file; the link target is unchanged", None
            elif not stat.S_ISREG(old.st_mode):
                raise ToolError(f"cannot write {path}: " + not_regular_message(path, old.st_mode))
            _replace(parent, data, old)
    except OSError as exc:
        raise ToolError(describe_os_error(exc, path, "write") + "; the file was not changed") from None
    return f"Wrote {plural(len(data), 'byte')} to {path} ({note})"


_REPLACED_LINK = "replaced a symbolic link with a regular file; the link target is unchanged"


def _world_error(exc: OSError, path: Path, action: str) -> ToolError:
    """What the kernel's refusal inside the session's world means, in today's words."""
    if exc.errno in (errno.EXDEV, errno.ELOOP):
        return PathDeniedError(
            str(path),
            "the way to it changed after it was checked (a symbolic link or a rename now leads elsewhere); "
            "nothing was written, try again",
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PathDeniedError(
            str(path), f"this session's sandbox refuses to {action} it (its bash could not either); nothing was written"
        )
    if exc.errno == errno.ENOENT:
        return ToolError(f"file does not exist: {path} (its directory {path.parent} is missing in this session's view)")
    return ToolError(describe_os_error(exc, path, action) + "; the file was not changed")


def _write_world(policy: SandboxPolicy, path: Path, data: bytes, worker: FileWorker) -> str:
    target = check_world_write(policy, path, create=True)
    with _exclusive(target.real_path, path):
        try:
            done = worker.replace(path, target.world_parent, data, create=True, expect=None)
        except OSError as exc:
            raise _world_error(exc, path, "write") from None
    if done.outcome == "link-to-directory":
        raise ToolError(
            f"cannot write {path}: it is a symbolic link to the directory {done.target}; give a file name inside it"
        )
    if done.outcome == "not-regular":
        raise ToolError(f"cannot write {path}: " + not_regular_message(path, done.mode))
    note = _REPLACED_LINK if done.outcome == "link" else done.outcome
    return f"Wrote {plural(len(data), 'byte')} to {path} ({note})"


def _edit_world(policy: SandboxPolicy, path: Path, args: EditArgs, worker: FileWorker) -> str:
    target = check_world_write(policy, path, create=False)
    with _exclusive(target.real_path, path):
        for _ in range(_EDIT_TRIES):
            try:
                opened = worker.open_leaf(path, target.world_parent)
            except FileNotFoundError:
                raise ToolError(f"file does not exist: {path}; use write to create it") from None
            except OSError as exc:
                raise _world_error(exc, path, "edit") from None
            if isinstance(opened, str):
                raise ToolError(
                    f"cannot edit {path}: it is a symbolic link to {opened}; edit does not follow links, "
                    "edit the target path instead"
                )
            try:
                raw, st = _read_fd(policy, opened, path)
            except OSError as exc:
                raise ToolError(describe_os_error(exc, path, "edit") + "; the file was not changed") from None
            finally:
                os.close(opened)
            data, message = apply_edit(raw, args, path)
            try:
                done = worker.replace(path, target.world_parent, data, create=False, expect=st)
            except OSError as exc:
                raise _world_error(exc, path, "edit") from None
            if done.outcome != "changed":  # changed: bash or an editor wrote it since: apply the edit again
                return message
        raise ToolError(
            f"{path} kept changing on disk while it was being edited ({_EDIT_TRIES} tries); this edit was not "
            "applied. Try again when whatever is writing the file has finished."
        )


def _in_world(
    policy: SandboxPolicy, worker: FileWorker | None, grants: Grants | None, *, tree: ProtectedTree | None,
    world: Callable[[FileWorker], str], here: Callable[[Grants | None], str],
) -> str:  # fmt: skip
    """`world(worker)` where the session has a world, else `here(grants)` (omega's process). A path outside
    every root goes `here` when it may be approved: the one write made outside the world.

    Raises:
        StaleWorkerError: a protected name appeared (or changed) since the worker started: it lacks
            that read-only bind; nothing was done.
    """
    if worker is None:
        return here(grants)
    if tree is not None and worker.stale(tree):
        raise StaleWorkerError
    try:
        return world(worker)
    except PathDeniedError as exc:
        if exc.askable and grants is not None:
            return here(grants)  # refused again unless the user approved this path
        raise


async def _run(
    policy: SandboxPolicy,
    path: Path,
    world: Callable[[FileWorker], str],
    here: Callable[[Grants | None], str],
    *,
    approve: Approver | None,
    grants: Grants | None,
    tree: ProtectedTree | None,
) -> types.CallToolResult:
    for _ in range(_STALE_TRIES):
        worker = await _worker(policy, path, tree)
        try:
            attempt = partial(_in_world, policy, worker, tree=tree, world=world, here=here)
            return text_result(await with_approval(policy, path, attempt, approve=approve, grants=grants))
        except StaleWorkerError:
            if worker is not None:
                fileworker_client.discard(worker)  # the next one gets the protected names as they are now
        except WorkerGoneError as exc:
            if worker is not None:
                fileworker_client.discard(worker)
            raise ToolError(
                f"the sandbox's file worker for this session stopped ({exc}); {path} may or may not have been "
                "changed: read it, then try again"
            ) from None
    raise ToolError(
        f"the protected names in this session's write roots kept changing while {path} was to be written "
        f"({_STALE_TRIES} tries); nothing was written, try again"
    )


async def _worker(policy: SandboxPolicy, path: Path, tree: ProtectedTree | None) -> FileWorker | None:
    """The session's worker for a write of `path`, or None (no world, /dev/null, or outside every root)."""
    if path == DEV_NULL:
        return None
    if (worker := fileworker_client.started(policy)) is not None:
        # Running: the world's attempt makes the refusals below (`check_world_write`) in its thread:
        # no extra hop to a thread and back for each write and edit.
        return worker
    try:  # no worker yet: refuse what needs no file system first, so a denied path starts none
        await anyio.to_thread.run_sync(precheck_write, policy, path)
    except PathDeniedError as exc:
        if not exc.askable:
            raise
        # Outside every root: denied, or written from omega's process once the user approves (the
        # one write made outside the world): no worker is started for it.
        return None
    return await fileworker_client.worker_for(policy, tree)


async def write_file(
    policy: SandboxPolicy,
    args: WriteArgs,
    *,
    approve: Approver | None = None,
    grants: Grants | None = None,
    tree: ProtectedTree | None = None,
) -> types.CallToolResult:
    """The `write` tool: create or atomically replace a file (parents created, mode kept).

    With `on_denied = "ask"`, `approve` and `grants`, a path outside the roots is put to the user once.
    With `tree` (the protected names of the write roots), the session's worker has those that exist
    bound read-only, as bash has.

    Raises:
        PathDeniedError: outside the write roots or on the blocklist. ToolError: not a regular file, I/O error.
    """
    if args.file_path.endswith("/"):
        raise InvalidArgumentsError(
            f"file_path {args.file_path!r} ends with '/', so it names a directory; give the file name to write"
        )
    path = resolve_path(policy, args.file_path)
    try:
        data = args.content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentsError(
            f"content is not valid Unicode (a lone surrogate at index {exc.start}); nothing was written"
        ) from None
    world = partial(_write_world, policy, path, data)
    here = partial(_write_sync, policy, path, data)
    return await _run(policy, path, world, here, approve=approve, grants=grants, tree=tree)


def _uses_crlf(text: str) -> bool:
    crlf = text.count("\r\n")
    return crlf > 0 and crlf * 2 >= text.count("\n")


def _squash(text: str) -> str:
    return " ".join(text.split())


def _not_found(text: str, old: str, path: Path) -> ToolError:
    message = f"old_string was not found in {path}; the file is unchanged."
    if old.replace("\r\n", "\n") in text.replace("\r\n", "\n"):
        message += " It matches if line endings are ignored (CRLF vs LF): copy the text exactly as read."
    elif _squash(old) and _squash(old) in _squash(text):
        message += (
            " It matches if whitespace is ignored: check indentation, tabs vs spaces and line breaks, and copy the"
            " exact text from a fresh read (without the line-number prefix)."
        )
    else:
        message += " Read the file again and copy the exact text to replace (without the line-number prefix)."
    return ToolError(message)


def apply_edit(raw: bytes, args: EditArgs, path: Path) -> tuple[bytes, str]:
    """The edited bytes and the result message: literal replacement, CRLF, BOM and invalid bytes kept.

    Raises:
        ToolError: old_string not found (with a hint when a near match exists), or unencodable new_string.
    """
    bom = raw.startswith(_BOM)
    text = raw[len(_BOM) :].decode("utf-8", "surrogateescape") if bom else raw.decode("utf-8", "surrogateescape")
    old, new = args.old_string, args.new_string
    if _uses_crlf(text) and "\r\n" not in old:  # the model writes `\n`; the file uses CRLF
        crlf_old = old.replace("\n", "\r\n")
        if crlf_old in text:
            old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
    count = text.count(old)
    if count == 0:
        raise _not_found(text, args.old_string, path)
    if args.replace_all:
        edited = text.replace(old, new)
        message = f"Replaced all {plural(count, 'occurrence')} in {path}"
    else:
        at = text.find(old)
        edited = text[:at] + new + text[at + len(old) :]
        message = f"Replaced 1 of {plural(count, 'occurrence')} in {path}"
        if count > 1:
            message += " (the first; pass replace_all=true to replace all of them)"
    try:
        body = edited.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"new_string is not valid Unicode (a lone surrogate near index {exc.start}); the file is unchanged"
        ) from None
    return (_BOM + body if bom else body), message


def _read_for_edit(policy: SandboxPolicy, parent: ParentDir) -> tuple[bytes, os.stat_result]:
    path = parent.path
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(parent.name, flags, dir_fd=parent.dir_fd)
    except FileNotFoundError:
        raise ToolError(f"file does not exist: {path}; use write to create it") from None
    try:
        return _read_fd(policy, fd, path)
    finally:
        os.close(fd)


def _read_fd(policy: SandboxPolicy, fd: int, path: Path) -> tuple[bytes, os.stat_result]:
    """The content and status of the file open at `fd`, for edit (checked, regular, within the limit)."""
    check_read_fd(policy, fd, path)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"cannot edit {path}: " + not_regular_message(path, st.st_mode))
    if st.st_size > MAX_EDIT_BYTES:
        raise ToolError(
            f"cannot edit {path}: it is {st.st_size} bytes, over the {MAX_EDIT_BYTES // (1024 * 1024)} MiB edit "
            "limit; use bash (e.g. sed) for very large files"
        )
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, _CHUNK_BYTES):
        size += len(chunk)
        if size > MAX_EDIT_BYTES:  # it grew after fstat
            raise ToolError(f"cannot edit {path}: it is growing past the edit limit; try again later")
        chunks.append(chunk)
    return b"".join(chunks), st


def _unchanged(now: os.stat_result | None, read: os.stat_result) -> bool:
    """Whether the directory entry still is the file, with the content, that was read."""
    return now is not None and (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns) == (
        read.st_dev,
        read.st_ino,
        read.st_size,
        read.st_mtime_ns,
        read.st_ctime_ns,
    )


def _edit_sync(policy: SandboxPolicy, path: Path, args: EditArgs, grants: Grants | None) -> str:
    try:
        with (
            open_write_parent(policy, path, create=False, grants=grants) as parent,
            _exclusive(parent.real_path, path),
        ):
            for _ in range(_EDIT_TRIES):
                st = _lstat(parent)
                if st is None:
                    raise ToolError(f"file does not exist: {path}; use write to create it")
                if stat.S_ISLNK(st.st_mode):
                    target = os.readlink(parent.name, dir_fd=parent.dir_fd)
                    raise ToolError(
                        f"cannot edit {path}: it is a symbolic link to {target}; edit does not follow links, "
                        "edit the target path instead"
                    )
                raw, st = _read_for_edit(policy, parent)
                data, message = apply_edit(raw, args, path)
                # Another process (bash, an editor) may have changed the file since it was read: renaming
                # now would discard that change. Apply the edit again to the new content instead.
                if _unchanged(_lstat(parent), st):
                    _replace(parent, data, st)
                    return message
            raise ToolError(
                f"{path} kept changing on disk while it was being edited ({_EDIT_TRIES} tries); this edit was not "
                "applied. Try again when whatever is writing the file has finished."
            )
    except OSError as exc:
        raise ToolError(describe_os_error(exc, path, "edit") + "; the file was not changed") from None


async def edit_file(
    policy: SandboxPolicy,
    args: EditArgs,
    *,
    approve: Approver | None = None,
    grants: Grants | None = None,
    tree: ProtectedTree | None = None,
) -> types.CallToolResult:
    """The `edit` tool: replace the first (or every) literal occurrence of old_string, atomically.

    Asks the user as `write_file` does.

    Raises:
        PathDeniedError: outside the write roots or on the blocklist. ToolError: bad strings, missing file,
        not found (file unchanged), I/O error.
    """
    if not args.old_string:
        raise InvalidArgumentsError("old_string must not be empty; to create or overwrite a file use write")
    if args.old_string == args.new_string:
        raise InvalidArgumentsError("old_string and new_string are identical; nothing to change")
    path = resolve_path(policy, args.file_path)
    world = partial(_edit_world, policy, path, args)
    here = partial(_edit_sync, policy, path, args)
    return await _run(policy, path, world, here, approve=approve, grants=grants, tree=tree)
