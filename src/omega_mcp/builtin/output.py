"""Bounded, model-ready capture of process output: decode, clean, count, keep head and tail.

Bytes are decoded incrementally (UTF-8, invalid bytes replaced, sequences split across reads kept
whole), ANSI escapes and C0 controls other than tab/newline are dropped, `\\r\\n` becomes `\\n` and
carriage-return progress lines keep only their last segment. Only the first `max_chars` and the last
`tail_chars` characters are retained, so memory stays bounded whatever the process writes, while the
character count stays exact; the final cut is on code points because it slices decoded text.
"""

from __future__ import annotations

import codecs
import re

__all__ = ["MAX_OUTPUT_CHARS", "OutputBuffer"]

MAX_OUTPUT_CHARS = 30_000
"""Output longer than this is cut in the middle (SPEC: bash output over 30,000 characters)."""

_HEAD_FRACTION = 0.4
"""Share of the budget shown from the start; the rest comes from the end, where errors usually are."""

_LINE_LIMIT = 16_384
"""A line without a newline is held back (for `\\r` rewrites) only up to this many characters."""

_ESCAPE_WINDOW = 512
"""An unfinished escape sequence this close to the end of a read is held back for the next read."""

# CSI (colours, cursor moves), OSC (titles, hyperlinks; BEL or ST terminated), charset
# designations (`tput sgr0` emits `ESC ( B`) and other two-byte escapes, but not a bare `ESC [`
# or `ESC ]`: those are unfinished CSI/OSC and must not be half-stripped.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()*+][ -~]|[@-Z\\^_])")
_ESCAPE_PREFIX = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[()*+])?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Anything that needs more than the fast path: every control except tab and newline.
_NEEDS_CLEANING = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _last_segment(line: str) -> str:
    """What a terminal would finally show of a `\\r`-rewritten line (approximately): its last non-empty part."""
    if "\r" not in line:
        return line
    segments = [segment for segment in line.split("\r") if segment]
    return segments[-1] if segments else ""


class OutputBuffer:
    """Accumulates a process's output within bounded memory and renders it for a model.

    `feed()` raw bytes as they arrive; `take()` returns the cleaned text received since the previous
    `take()` (cut in the middle with an `output truncated` notice when longer than `max_chars`) and
    starts over; `close()` at end of stream flushes the decoder and any held-back partial sequence.
    """

    def __init__(self, max_chars: int = MAX_OUTPUT_CHARS) -> None:
        self.max_chars = max_chars
        self.head_chars = int(max_chars * _HEAD_FRACTION)
        self.tail_chars = max_chars - self.head_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # an unfinished escape sequence at the end of the last read
        self._line = ""  # the current line, not yet committed, as `\r` may still rewrite it
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self._chars = 0
        self.total_bytes = 0
        """Bytes fed since creation (never reset; diagnostics)."""

    @property
    def pending_chars(self) -> int:
        """Characters committed since the last `take()` (the partial current line excluded)."""
        return self._chars

    def feed(self, data: bytes) -> None:
        """Add raw output bytes (any encoding; invalid UTF-8 becomes U+FFFD)."""
        if not data:
            return
        self.total_bytes += len(data)
        self._feed_text(self._decoder.decode(data), final=False)

    def close(self) -> None:
        """End of stream: flush the decoder, an unfinished escape and the partial last line."""
        self._feed_text(self._decoder.decode(b"", final=True), final=True)
        self._flush_line()

    def take(self) -> str:
        """The output since the previous `take()` (partial last line included), truncated to the budget."""
        self._flush_line()
        text = self._render()
        self._head, self._head_len, self._tail, self._tail_len, self._chars = [], 0, [], 0, 0
        return text

    def _feed_text(self, text: str, *, final: bool) -> None:
        text = self._held + text
        self._held = ""
        if not text:
            return
        if _NEEDS_CLEANING.search(text) is None:
            self._add_lines(text)
            return
        if not final:
            start = text.rfind("\x1b", max(0, len(text) - _ESCAPE_WINDOW))
            if start >= 0 and _ESCAPE.match(text, start) is None and _ESCAPE_PREFIX.fullmatch(text, start):
                text, self._held = text[:start], text[start:]
        self._add_lines(_CONTROLS.sub("", _ESCAPE.sub("", text)))

    def _add_lines(self, text: str) -> None:
        """Commit complete lines (after `\\r` rewriting); keep the unfinished last line pending."""
        if self._line:
            text = self._line + text
            self._line = ""
        if "\r" not in text:
            newline = text.rfind("\n")
            self._commit(text[: newline + 1])
            rest = text[newline + 1 :]
        else:
            lines = text.split("\n")
            rest = lines.pop()
            if lines:
                self._commit("\n".join(_last_segment(line) for line in lines) + "\n")
            if "\r" in rest:
                # Keep only what can still matter: the last visible segment, and whether a `\r`
                # follows it (then the next text replaces it).
                rest = _last_segment(rest) + ("\r" if rest.endswith("\r") else "")
        if len(rest) > _LINE_LIMIT:
            # A huge line without a newline: stop waiting for a `\r` rewrite, keep memory bounded.
            self._commit(rest.rstrip("\r"))
            rest = ""
        self._line = rest

    def _flush_line(self) -> None:
        if self._line:
            self._commit(_last_segment(self._line))
            self._line = ""

    def _commit(self, text: str) -> None:
        if not text:
            return
        self._chars += len(text)
        if self._head_len < self.max_chars:
            part = text[: self.max_chars - self._head_len]
            self._head.append(part)
            self._head_len += len(part)
        part = text[-self.tail_chars :] if self.tail_chars else ""
        if part:
            self._tail.append(part)
            self._tail_len += len(part)
            if self._tail_len > 2 * self.tail_chars:
                # Amortised trim: join only when the tail holds twice what is kept.
                joined = "".join(self._tail)[-self.tail_chars :]
                self._tail, self._tail_len = [joined], len(joined)

    def _render(self) -> str:
        head = "".join(self._head)
        if self._chars <= self.max_chars:
            return head
        tail = "".join(self._tail)[-self.tail_chars :] if self.tail_chars else ""
        notice = (
            f"\n... [output truncated: {self._chars} characters total, "
            f"showing the first {self.head_chars} and the last {len(tail)}] ...\n"
        )
        return head[: self.head_chars] + notice + tail
