"""Text for a person's terminal: control characters shown, never interpreted.

What omega prints comes from models, tools, files and downstream servers, any of which may hold
escape sequences: `\\x1b[2K` erases the line that named the tool, OSC 52 writes the clipboard, a
lone `\\r` overwrites what came before, a bidi override reorders what is read. `visible()` replaces
every such character by its escape (`\\x1b`, `\\r`, `\\u202e`), keeping newlines and tabs (and a
`\\r` that ends a line, dropped), and `VisibleStream` does it to everything written through it;
omega's own colours, if it ever prints any, go through `write_trusted`. `json_safe()` escapes what
`json.dumps` leaves raw (DEL, C1 controls, bidi controls) the JSON way, so JSON output stays JSON.
"""

from __future__ import annotations

import re
from typing import TextIO

__all__ = ["VisibleStream", "json_safe", "visible"]

_CONTROL = re.compile("\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r\n":
        return "\n"
    if char == "\r":
        return "\\r"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control character (but newline and tab) written as its escape."""
    return _CONTROL.sub(_escape, text)


def json_safe(text: str) -> str:
    """JSON text (from `json.dumps(..., ensure_ascii=False)`) with DEL, C1 and bidi controls as `\\uXXXX`."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class VisibleStream:
    """A text stream that writes `visible(text)` to the stream it wraps (a terminal, a pipe)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(visible(text))
        return len(text)

    def write_trusted(self, text: str) -> int:
        """omega's own text, written as it is (its colours, say)."""
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:
        return self.inner.encoding

    @property
    def errors(self) -> str | None:
        return self.inner.errors

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)
