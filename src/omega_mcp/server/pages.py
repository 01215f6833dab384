"""omega's own lists, served in pages: tools, prompts, resources and resource templates.

A hub can export thousands of tools; one answer holding all of them is what a paginating client
never expects and a slow one chokes on. So each list is cut into pages of `PAGE_SIZE` with an
opaque `nextCursor` (the list's kind and the next offset, base64), as the MCP spec describes. A
cursor that is not one of omega's, or belongs to another list, is an INVALID_PARAMS error. Each
page is cut from the list as it is now: a list that changed between pages is served on from the
same offset (its `list_changed` notification tells the client to list again).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TypeVar

from mcp import types
from mcp.shared.exceptions import MCPError

__all__ = ["PAGE_SIZE", "page"]

PAGE_SIZE = 500
_T = TypeVar("_T")


def _cursor(kind: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{offset}".encode()).decode()


def _offset(kind: str, cursor: str) -> int:
    try:
        found_kind, _, offset = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        if found_kind == kind and offset.isdigit():
            return int(offset)
    except (binascii.Error, UnicodeError, ValueError):
        pass
    raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid cursor for {kind}/list: {cursor!r}")


def page(items: Sequence[_T], params: types.PaginatedRequestParams | None, kind: str) -> tuple[list[_T], str | None]:
    """The page of `items` that `params.cursor` asks for, and the cursor of the next page (None at the end).

    Raises:
        MCPError: INVALID_PARAMS for a cursor omega did not hand out for this list.
    """
    cursor = params.cursor if params is not None else None
    start = _offset(kind, cursor) if cursor else 0
    end = start + PAGE_SIZE
    return list(items[start:end]), _cursor(kind, end) if end < len(items) else None
