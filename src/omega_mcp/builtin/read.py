"""The `read` built-in tool: numbered lines (`cat -n` style) of a text file, an image as an image, bounded.

Blocking file I/O runs in a worker thread. The first 8 KiB decide what the file is (`filetype.py`):
a PNG, JPEG, GIF or WebP image (up to 3.75 MiB: 5 MiB in base64, what the model APIs take) comes
back as MCP image content; any other binary file is an error naming its size and type, never raw
bytes. Text is streamed in chunks and split at the byte level, keeping at most 2000 characters a
line, so memory stays small for any file size; one call scans at most 1 GiB or 15 s and says where
it stopped. Control characters other than tab and newline are shown as `\\xNN`. Anything that is
not a regular file is refused before a byte is read (`sandbox/paths.py` opens the path: inside the
session's sandbox world through its file worker where it has one, `sandbox/fileworker_client.py`,
so `read` finds what that session's bash would), and output over 50,000 characters is cut with an
honest notice.
"""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import anyio
import mcp_types as types

from omega_mcp.builtin.filetype import IMAGE_TYPES, SNIFF_BYTES, FileKind, sniff, visible_controls
from omega_mcp.builtin.schemas import DEFAULT_READ_LIMIT, ReadArgs
from omega_mcp.builtin.text import plural
from omega_mcp.errors import ToolError
from omega_mcp.results import text_result
from omega_mcp.sandbox import fileworker_client
from omega_mcp.sandbox.fileworker_client import FileWorker, WorkerGoneError
from omega_mcp.sandbox.paths import describe_os_error, open_readable, resolve_path
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.tracker import ProtectedTree

__all__ = ["read_file"]

MAX_LINE_CHARS = 2000
MAX_OUTPUT_CHARS = 50_000
_CHUNK_BYTES = 256 * 1024
_LINE_KEEP_BYTES = MAX_LINE_CHARS * 4 + 4  # UTF-8 is <= 4 bytes a character: more bytes means a longer line
_COUNT_SCAN_BYTES = 64 * 1024 * 1024  # how far past a truncation we keep counting characters
# One read scans at most this much, for at most this long: a line without end (/proc/self/pagemap,
# a huge binary) or a far offset must not keep a call busy for minutes.
_SCAN_BUDGET_BYTES = 1024 * 1024 * 1024
_READ_SECONDS = 15.0
MAX_IMAGE_BYTES = 3 * 1024 * 1024 + 768 * 1024
"""3.75 MiB: 5 MiB in base64, the most Anthropic's API takes in one image (OpenAI and Gemini take more)."""


class _ScanBudgetExceeded(Exception):
    pass


class _Lines:
    """Splits an fd into lines at the byte level (a `\\n` byte never occurs inside a UTF-8 sequence).

    Keeps at most `_LINE_KEEP_BYTES` of a line, so memory is bounded whatever the line length, and
    reads at most `_SCAN_BUDGET_BYTES` within `_READ_SECONDS`: then `stopped` is set (`skip` raises).
    """

    def __init__(self, fd: int, head: bytes = b"") -> None:
        """`head`: what was already read from the start of `fd` (to judge the file type)."""
        self._fd = fd
        self._buf = head
        self._pos = 0
        self._partial = False  # bytes of an unterminated line were consumed
        self._deadline = time.monotonic() + _READ_SECONDS
        self.bytes_read = len(head)
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
            f"{number:6d}\t{visible_controls(text)[:MAX_LINE_CHARS]} [... line cut at {MAX_LINE_CHARS} characters; "
            f"it is longer than {total} bytes (reading stopped before its end)]"
        )
    if total <= len(kept):
        text = visible_controls(text.removesuffix("\r"))
        if len(text) <= MAX_LINE_CHARS:
            return f"{number:6d}\t{text}"
        full = f"{len(text)} characters"
    else:
        text = visible_controls(text)
        full = f"{total} bytes"
    return (
        f"{number:6d}\t{text[:MAX_LINE_CHARS]} [... line cut at {MAX_LINE_CHARS} characters; the full line has {full}]"
    )


def _read_lines(fd: int, path: Path, start: int, limit: int, *, say_more: bool = False, head: bytes = b"") -> str:
    """Render lines `start`..`start+limit-1`; with `say_more`, note when the file goes on after them."""
    lines = _Lines(fd, head)
    if start > 1:
        try:
            skipped = lines.skip(start - 1)
        except _ScanBudgetExceeded:
            raise ToolError(
                f"cannot reach offset {start} of {path}: {_scan_spent(lines)} went by before it; for a position this "
                f"deep in a huge file use bash, e.g. `tail -n +{start} FILE | head -n {limit}` or `sed -n` with a range"
            ) from None
        if skipped < start - 1:
            return f"(offset {start} is past the end of the file: {path} has {plural(skipped, 'line')})"
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
    return f"(offset {start} is past the end of the file: {path} has {plural(start - 1, 'line')})"


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


def _size(fd: int, seen: int) -> str:
    size = os.fstat(fd).st_size
    return f"{size:,} bytes" if size >= seen else f"at least {seen:,} bytes"  # /proc files say 0


def _image(fd: int, path: Path, head: bytes, kind: FileKind) -> types.CallToolResult:
    """The whole image as MCP image content, with a line naming it; refused over MAX_IMAGE_BYTES."""
    assert kind.mime_type is not None
    name = IMAGE_TYPES[kind.mime_type]
    chunks, total = [head], len(head)
    too_big = os.fstat(fd).st_size > MAX_IMAGE_BYTES
    while not too_big and (chunk := os.read(fd, _CHUNK_BYTES)):  # a file that grows meanwhile is bounded too
        chunks.append(chunk)
        total += len(chunk)
        too_big = total > MAX_IMAGE_BYTES
    if too_big:
        raise ToolError(
            f"{path} is a {name} image of {_size(fd, total)}: read returns images of at most "
            f"{MAX_IMAGE_BYTES / 1024 / 1024:g} MiB (5 MiB in base64, what model APIs take); make a smaller copy "
            "first, e.g. with bash: `convert IN -resize 50% OUT` (ImageMagick)"
        )
    data = base64.b64encode(b"".join(chunks)).decode("ascii")
    return types.CallToolResult(
        content=[
            types.TextContent(text=f"{path}: {name} image, {total:,} bytes"),
            types.ImageContent(data=data, mime_type=kind.mime_type),
        ]
    )


def _read_sync(policy: SandboxPolicy, args: ReadArgs, worker: FileWorker | None) -> types.CallToolResult:
    path = resolve_path(policy, args.file_path)
    fd = open_readable(policy, path, worker)
    try:
        head = os.read(fd, SNIFF_BYTES)
        kind = sniff(head, path)
        if kind.mime_type is not None:
            return _image(fd, path, head, kind)
        if not kind.text:
            raise ToolError(
                f"{path} is a binary file ({kind.description}, {_size(fd, len(head))}): read shows text files and "
                f"images ({', '.join(IMAGE_TYPES.values())}); look into it with bash instead, e.g. `file`, "
                "`xxd FILE | head`, `strings`, `unzip -l`, `tar -tf`"
            )
        # Only a defaulted limit gets the note: a caller who chose a limit knows it asked for a part.
        limit = args.limit or DEFAULT_READ_LIMIT
        text = _read_lines(fd, path, args.offset or 1, limit, say_more=args.limit is None, head=head)
        return text_result(visible_controls(text))  # the lines are clean already; the path may not be
    except OSError as exc:
        raise ToolError(describe_os_error(exc, path, "read")) from None
    finally:
        os.close(fd)


async def read_file(
    policy: SandboxPolicy, args: ReadArgs, *, tree: ProtectedTree | None = None
) -> types.CallToolResult:
    """The `read` tool: numbered lines (`cat -n` style) of a text file, an image as image content.
    `tree`: the write roots' protected names, bound read-only in a file worker started for it.

    Raises:
        PathDeniedError: an environ file, the token, omega's state or a hidden secret (`[sandbox] hide`).
        ToolError: missing, not a regular file, another binary file, an image too large, I/O error.
    """
    try:
        return await _read_in_world(policy, args, tree)
    except ToolError as exc:
        message = str(exc)
        if visible_controls(message) != message:  # a file name with control characters in it
            raise ToolError(visible_controls(message)) from None
        raise


async def _read_in_world(policy: SandboxPolicy, args: ReadArgs, tree: ProtectedTree | None) -> types.CallToolResult:
    """Through the session's file worker where it has a sandbox world (a worker that died is replaced
    once), else with the path checks alone. A worker started here gets `tree`'s read-only binds, so a
    write after the read needs no other one."""
    why = ""
    for _ in range(2):
        worker = await fileworker_client.worker_for(policy, tree)
        try:
            return await anyio.to_thread.run_sync(_read_sync, policy, args, worker)
        except WorkerGoneError as exc:
            assert worker is not None
            fileworker_client.discard(worker)
            why = str(exc)
    raise ToolError(f"read failed: the sandbox's file worker for this session stopped twice ({why}); try again")
