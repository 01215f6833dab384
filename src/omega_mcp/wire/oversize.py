"""A message longer than `[hub] max_message_mb`: what it was, and the error that stands in for it.

A reader never holds such a message: it keeps the first `HEAD` bytes and the last `TAIL` bytes of
the line and drops the rest as it reads. That is enough to find whose it was: the JSON-RPC `id` at
the top level of the object (scanned in the head, where most writers put it, else matched at the
very end of the tail, where the others do) and whether it carries a `method`. An answer we can
attribute becomes an error for that request only (`too_large_error`, recognised by
`is_too_large`); the connection carries on. Pure stdlib: pipes.py and the proxy use it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HEAD", "TAIL", "Oversize", "is_too_large", "limit_text", "too_large_error"]

HEAD = 64 * 1024
TAIL = 4 * 1024
_MARK = "omegaMessageTooLarge"
_TAIL_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')
_VALUE = re.compile(r'\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def limit_text(limit: int) -> str:
    """`max_message_mb (64 MiB)`: how errors name the bound."""
    return f"max_message_mb ({limit / (1 << 20):g} MiB)"


def too_large_error(limit: int, size: int | None = None) -> dict[str, Any]:
    """The JSON-RPC error that answers a request whose answer was longer than `limit` bytes (`size` when known)."""
    known = f": {size} bytes" if size is not None else ""
    return {
        "code": -32603,
        "message": f"the answer is longer than {limit_text(limit)}{known}",
        "data": {_MARK: {"limitBytes": limit, "sizeBytes": size}},
    }


def is_too_large(data: object) -> bool:
    """Whether a JSON-RPC error's `data` is `too_large_error`'s."""
    return isinstance(data, Mapping) and _MARK in data


def _top_level_keys(head: str) -> dict[str, str]:
    """The top-level keys of the JSON object `head` begins (cut anywhere), with the raw start of each value."""
    found: dict[str, str] = {}
    depth = 0
    in_string = escaped = expect_key = False
    start = 0
    key: str | None = None
    for index, char in enumerate(head):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                if depth == 1 and expect_key:
                    key, expect_key = head[start : index + 1], False
            continue
        if char == '"':
            in_string, start = True, index
        elif char in "{[":
            depth += 1
            expect_key = depth == 1
        elif char in "}]":
            depth -= 1
        elif char == ":" and depth == 1 and key is not None:
            try:
                found[json.loads(key)] = head[index + 1 : index + 200]
            except ValueError:
                pass
            key = None
        elif char == "," and depth == 1:
            expect_key = True
    return found


@dataclass(slots=True)
class Oversize:
    """A line longer than the bound: its head, its tail and how long it was."""

    head: bytes
    tail: bytes
    size: int

    def _keys(self) -> dict[str, str]:
        return _top_level_keys(self.head.decode("utf-8", "replace"))

    @property
    def request_id(self) -> int | str | None:
        """The message's top-level `id`, when the head or the tail shows it."""
        raw = self._keys().get("id")
        match = _VALUE.match(raw) if raw is not None else None
        text = match.group(1) if match else None
        if text is None and (tail := _TAIL_ID.search(self.tail)) is not None:
            text = tail.group(1).decode("utf-8", "replace")
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, int | str) and not isinstance(value, bool) else None

    @property
    def has_method(self) -> bool:
        """Whether it is a request or notification (a top-level `method` in its head)."""
        return "method" in self._keys()
