"""Wording shared by the built-in tools: counted nouns (`1 line`, `2 lines`).

Results themselves are built in `omega_mcp.results`; pure functions, no I/O.
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, word: str) -> str:
    """`1 line`, `2 lines`: `count` and `word`, with an `s` unless the count is one."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
