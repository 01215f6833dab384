"""The `read`, `write` and `edit` built-in tools.

Blocking file I/O runs in a worker thread and is bounded: `read` streams the file in chunks
(memory stays small for any file size, at most 2000 characters kept per line; at most 1 GiB or
15 s of scanning per call) and refuses anything that is not a regular file before reading a byte.
`write` and `edit` never modify a file in place: they write a temp file next to the target
through the parent directory's fd (see `sandbox/paths.py`), fsync it, give it the old file's mode
(minus set-id bits) and owner, and rename it over the target, so a failure leaves the old content
intact. The target entry itself is never followed: writing to a symbolic link replaces the link
with a regular file (its target is untouched; a link to a directory is refused), a hard-linked
file is replaced as this directory entry only, and `edit` refuses symbolic links. Writes and
edits of one file are serialised within the process, and `edit` re-reads and re-applies when the
file changed on disk between its read and its rename, so concurrent changes are not lost.
With `on_denied = "ask"`, a write outside the roots is put to the user first (`sandbox/approvals.py`).
"""

from __future__ import annotations

import os
import secrets
import stat
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
from mcp import types

from omega_mcp.builtin.schemas import DEFAULT_READ_LIMIT, EditArgs, ReadArgs, WriteArgs
from omega_mcp.errors import InvalidArgumentsError, ToolError
from omega_mcp.sandbox.approvals import Approver, Grants, with_approval
from omega_mcp.sandbox.paths import (
    DEV_NULL,
    ParentDir,
    check_read_fd,
    describe_os_error,
    not_regular_message,
    open_readable,
    open_write_parent,
    resolve_path,
)
from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = ["edit_file", "read_file", "write_file"]

MAX_LINE_CHARS = 2000
MAX_OUTPUT_CHARS = 50_000
MAX_EDIT_BYTES = 64 * 1024 * 1024
_CHUNK_BYTES = 256 * 1024
_LINE_KEEP_BYTES = MAX_LINE_CHARS * 4 + 4  # UTF-8 is <= 4 bytes a character: more bytes means a longer line
_COUNT_SCAN_BYTES = 64 * 1024 * 1024  # how far past a truncation we keep counting characters
# One read scans at most this much, for at most this long: a line without end (/proc/self/pagemap,
# a huge binary) or a far offset must not keep a call busy for minutes.
_SCAN_BUDGET_BYTES = 1024 * 1024 * 1024
_READ_SECONDS = 15.0
_BOM = b"\xef\xbb\xbf"
_LOCK_SECONDS = 60.0  # a write or edit of the same file ahead of this one is bounded I/O
_EDIT_TRIES = 5


def _text(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)])


class _ScanBudgetExceeded(Exception):
    pass


class _Lines:
    """Splits an fd into lines at the byte level (a `\\n` byte never occurs inside a UTF-8 sequence).

    Keeps at most `_LINE_KEEP_BYTES` of a line, so memory is bounded whatever the line length, and
    reads at most `_SCAN_BUDGET_BYTES` within `_READ_SECONDS`: then `stopped` is set (`skip` raises).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = b""
        self._pos = 0
        self._partial = False  # bytes of an unterminated line were consumed
        self._deadline = time.monotonic() + _READ_SECONDS
        self.bytes_read = 0
        self.stopped = False
        """The scan budget ran out: the last line returned may be cut short, and more may follow."""

    def _fill(self) -> bool:
        if self.bytes_read and (self.bytes_read > _SCAN_BUDGET_BYTES or time.monotonic() >= self._deadline):
            self.stopped = True
            raise _ScanBudgetExceeded
        self._buf = os.read(self._fd, _CHUNK_BYTES)
        self._pos = 0
        self.bytes_read += len(self._buf)
        return bool(self._buf)

    def skip(self, count: int) -> int:
        """Skip up to `count` lines; returns how many there were."""
        done = 0
        while done < count:
            if self._pos >= len(self._buf) and not self._fill():
                if self._partial:
                    done += 1
                    self._partial = False
                return done
            newlines = self._buf.count(b"\n", self._pos)
            if newlines < count - done:
                done += newlines
                self._partial = self._buf[-1] != 0x0A
                self._pos = len(self._buf)
            else:
                for _ in range(count - done):
                    self._pos = self._buf.index(b"\n", self._pos) + 1
                done = count
                self._partial = False
        return done

    def at_eof(self) -> bool:
        """Whether nothing follows the lines consumed so far (reads at most one more chunk)."""
        try:
            return self._pos >= len(self._buf) and not self._fill()
        except _ScanBudgetExceeded:
            return False

    def next_line(self, stop_after_bytes: int | None = None) -> tuple[bytes, int] | None:
        """(kept prefix, total byte length) of the next line without its `\\n`, or None at EOF.

        When the scan budget runs out, returns what it has of the line (None if nothing) with `stopped` set.
        """
        kept = bytearray()
        total = 0
        while True:
            if self._pos >= len(self._buf):
                if stop_after_bytes is not None and self.bytes_read > stop_after_bytes:
                    raise _ScanBudgetExceeded
                try:
                    more = self._fill()
                except _ScanBudgetExceeded:
                    return (bytes(kept), total) if total else None
                if not more:
                    self._partial = False
                    return (bytes(kept), total) if total else None
            newline = self._buf.find(b"\n", self._pos)
            end = newline if newline >= 0 else len(self._buf)
            room = _LINE_KEEP_BYTES - len(kept)
            if room > 0:
                kept += self._buf[self._pos : min(end, self._pos + room)]
            total += end - self._pos
            if newline >= 0:
                self._pos = newline + 1
                self._partial = False
                return bytes(kept), total
            self._pos = end


def _render(number: int, kept: bytes, total: int, *, cut: bool = False) -> str:
    text = kept.decode("utf-8", "replace")
    if cut:
        return (
            f"{number:6d}\t{text[:MAX_LINE_CHARS]} [... line cut at {MAX_LINE_CHARS} characters; it is longer than "
            f"{total} bytes (reading stopped before its end)]"
        )
    if total <= len(kept):
        text = text.removesuffix("\r")
        if len(text) <= MAX_LINE_CHARS:
            return f"{number:6d}\t{text}"
        full = f"{len(text)} characters"
    else:
        full = f"{total} bytes"
    return (
        f"{number:6d}\t{text[:MAX_LINE_CHARS]} [... line cut at {MAX_LINE_CHARS} characters; the full line has {full}]"
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _read_lines(fd: int, path: Path, start: int, limit: int, *, say_more: bool = False) -> str:
    """Render lines `start`..`start+limit-1`; with `say_more`, note when the file goes on after them."""
    lines = _Lines(fd)
    if start > 1:
        try:
            skipped = lines.skip(start - 1)
        except _ScanBudgetExceeded:
            raise ToolError(
                f"cannot reach offset {start} of {path}: {_scan_spent(lines)} went by before it; for a position this "
                f"deep in a huge file use bash, e.g. `tail -n +{start} FILE | head -n {limit}` or `sed -n` with a range"
            ) from None
        if skipped < start - 1:
            return f"(offset {start} is past the end of the file: {path} has {_plural(skipped, 'line')})"
    last = start + limit - 1
    out: list[str] = []
    used = 0
    number = start
    while number <= last:
        item = lines.next_line()
        if item is None:
            if lines.stopped:
                return "\n".join(out) + _stopped_notice(lines, number)
            break
        rendered = _render(number, *item, cut=lines.stopped)
        if lines.stopped:
            return "\n".join([*out, rendered[: MAX_OUTPUT_CHARS - used]]) + _stopped_notice(lines, number + 1)
        cost = len(rendered) + (1 if out else 0)
        if used + cost > MAX_OUTPUT_CHARS:
            return "\n".join(out) + _truncation_notice(
                lines, start=start, first_cut=number, last=last, shown=used, total=used + cost
            )
        out.append(rendered)
        used += cost
        number += 1
    if out:
        if say_more and number > last and not lines.at_eof():
            return "\n".join(out) + f"\n\n[the file goes on after line {last}; use offset={last + 1} to read more]"
        return "\n".join(out)
    if start == 1:
        return f"(file is empty: {path} exists but has no content)"
    return f"(offset {start} is past the end of the file: {path} has {_plural(start - 1, 'line')})"


def _scan_spent(lines: _Lines) -> str:
    mib = 1024 * 1024
    return (
        f"reading stopped after {lines.bytes_read // mib} MiB (the limit is {_SCAN_BUDGET_BYTES // mib} MiB "
        f"or {_READ_SECONDS:g} s)"
    )


def _stopped_notice(lines: _Lines, next_number: int) -> str:
    return (
        f"\n\n[{_scan_spent(lines)}: lines from {next_number} on are not shown. For huge or binary files use bash "
        "(e.g. `head -c`, `tail -c`, `xxd`, `strings`, `grep -n`)]"
    )


def _truncation_notice(lines: _Lines, *, start: int, first_cut: int, last: int, shown: int, total: int) -> str:
    """Count the rest of the requested range (bounded scan) and describe the cut honestly."""
    counted_to = first_cut
    budget = lines.bytes_read + _COUNT_SCAN_BYTES
    exhausted = False
    try:
        for number in range(first_cut + 1, last + 1):
            item = lines.next_line(stop_after_bytes=budget)
            if lines.stopped:
                raise _ScanBudgetExceeded
            if item is None:
                break
            total += len(_render(number, *item)) + 1
            counted_to = number
    except _ScanBudgetExceeded:
        exhausted = True
    if exhausted:
        return (
            f"\n\n[output truncated: showing {shown} of at least {total} characters (counting stopped at line "
            f"{counted_to} after scanning {_COUNT_SCAN_BYTES // (1024 * 1024)} MiB more); lines {start}-"
            f"{first_cut - 1} are shown; use offset={first_cut} to continue]"
        )
    return (
        f"\n\n[output truncated: showing {shown} of {total} characters (lines {start}-{first_cut - 1} of lines "
        f"{start}-{counted_to} in the requested range); use offset={first_cut} to continue]"
    )


def _read_sync(policy: SandboxPolicy, args: ReadArgs) -> str:
    path = resolve_path(policy, args.file_path)
    fd = open_readable(policy, path)
    try:
        # Only a defaulted limit gets the note: a caller who chose a limit knows it asked for a part.
        limit = args.limit or DEFAULT_READ_LIMIT
        return _read_lines(fd, path, args.offset or 1, limit, say_more=args.limit is None)
    except OSError as exc:
        raise ToolError(describe_os_error(exc, path, "read")) from None
    finally:
        os.close(fd)


async def read_file(policy: SandboxPolicy, args: ReadArgs) -> types.CallToolResult:
    """The `read` tool: numbered lines (`cat -n` style) of a regular file, bounded in memory and output.

    Raises:
        PathDeniedError: an environ file or the token. ToolError: missing, not a regular file, I/O error.
    """
    return _text(await anyio.to_thread.run_sync(_read_sync, policy, args))


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
def _exclusive(parent: ParentDir) -> Generator[None]:
    """Hold this process's lock on the file `parent` points at (tool calls run in parallel worker threads).

    Without it, two edits read the same content and the second rename discards the first edit.
    """
    key = parent.real_path
    with _locks_guard:
        entry = _locks.setdefault(key, _FileLock())
        entry.users += 1
    try:
        if not entry.lock.acquire(timeout=_LOCK_SECONDS):
            raise ToolError(
                f"another write or edit of {parent.path} has been running for over {_LOCK_SECONDS:g} s; "
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
            return f"Wrote {_plural(len(data), 'byte')} to {path} (discarded)"
        with open_write_parent(policy, path, create=True, grants=grants) as parent, _exclusive(parent):
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
    return f"Wrote {_plural(len(data), 'byte')} to {path} ({note})"


async def write_file(
    policy: SandboxPolicy, args: WriteArgs, *, approve: Approver | None = None, grants: Grants | None = None
) -> types.CallToolResult:
    """The `write` tool: create or atomically replace a file (parents created, mode kept).

    With `on_denied = "ask"`, `approve` and `grants`, a path outside the roots is put to the user once.

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
    attempt = partial(_write_sync, policy, path, data)
    return _text(await with_approval(policy, path, attempt, approve=approve, grants=grants))


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
        message = f"Replaced all {_plural(count, 'occurrence')} in {path}"
    else:
        at = text.find(old)
        edited = text[:at] + new + text[at + len(old) :]
        message = f"Replaced 1 of {_plural(count, 'occurrence')} in {path}"
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
    finally:
        os.close(fd)


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
        with open_write_parent(policy, path, create=False, grants=grants) as parent, _exclusive(parent):
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
    policy: SandboxPolicy, args: EditArgs, *, approve: Approver | None = None, grants: Grants | None = None
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
    attempt = partial(_edit_sync, policy, path, args)
    return _text(await with_approval(policy, path, attempt, approve=approve, grants=grants))
