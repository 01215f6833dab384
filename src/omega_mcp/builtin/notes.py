"""How a bash result says that omega undid changes at protected names (`sandbox/tracker.py`).

Shared by the `bash` tool and the background shells: the note lists each undone path, what happened
there and where its content is kept, and the result becomes an error, so the model knows its command
did not have all of its effect.
"""

from __future__ import annotations

import mcp_types as types

from omega_mcp.results import text_result
from omega_mcp.sandbox.tracker import Undone

__all__ = ["undone_note", "with_note"]


def undone_note(undone: list[Undone]) -> str:
    """The lines that tell the model which changes to protected names omega undid (empty: none)."""
    if not undone:
        return ""
    lines = "\n".join(f"- {item}" for item in undone)
    return (
        "[omega undid changes at protected names, which are read-only for bash because what is written there "
        f"runs later outside the sandbox (MCP client settings, editor tasks, git config and hooks):\n{lines}]"
    )


def with_note(result: types.CallToolResult, undone: list[Undone]) -> types.CallToolResult:
    """`result` with `undone_note` appended to its text (and made an error) when anything was undone."""
    if not undone:
        return result
    block = result.content[0] if result.content else None
    text = block.text if isinstance(block, types.TextContent) else ""
    if text and not text.endswith("\n"):
        text += "\n"
    return text_result(text + undone_note(undone), is_error=True)
