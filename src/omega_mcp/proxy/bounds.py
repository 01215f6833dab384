"""`[hub] max_message_mb` for remote servers: an answer longer than the bound fails that request only.

Over streamable HTTP an answer arrives either as a JSON body or as a server-sent event. The SDK
transport bounds an event (`max_sse_event_size`) but reads a JSON body whole; `bound_json` makes
the body stream stop at the bound instead. Either way the SDK then fails that one request
(`Failed to parse JSON response` / `SSE stream failed`), and `too_large` turns that into the same
error a stdio server's long answer gets (`oversize.too_large_error`): the connection is fine, only
that answer was too long, so nothing is reconnected.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
from mcp import types
from mcp.shared.exceptions import MCPError

from omega_mcp.wire.oversize import limit_text, too_large_error

__all__ = ["bound_json", "too_large"]

_BODY_TOO_LONG = "the JSON body is longer than"
_EVENT_TOO_LONG = "Server-sent event exceeded"


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise httpx2.StreamError(f"{_BODY_TOO_LONG} {limit_text(self._limit)}")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def bound_json(response: httpx2.Response, limit: int) -> None:
    """Make a JSON response's body stop at `limit` bytes (a response event hook, before it is read)."""
    stream = response.stream
    if response.headers.get("content-type", "").startswith("application/json") and isinstance(
        stream, httpx2.AsyncByteStream
    ):
        response.stream = _Bounded(stream, limit)


def too_large(exc: MCPError, limit: int) -> MCPError | None:
    """The too-large error for a request the SDK failed because its answer passed the bound, else None."""
    message = exc.error.message
    if (exc.code == types.PARSE_ERROR and _BODY_TOO_LONG in message) or (
        exc.code == types.CONNECTION_CLOSED and _EVENT_TOO_LONG in message
    ):
        return MCPError.from_error_data(types.ErrorData.model_validate(too_large_error(limit)))
    return None
