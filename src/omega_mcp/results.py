"""The one place tool results are built: error and text results, and the hop between wire JSON and models.

A tool failure a model can act on is data, never an exception: every front-end hands on what is
built here. The MCP server's hot path works on wire JSON (a downstream's result is passed on
untouched), the agent loop and the CLI on `CallToolResult` models; `to_wire` / `from_wire` are the
only conversions between the two, and `from_wire` turns a result that is no MCP result into an
error result that says so instead of raising.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp_types import SERVER_INFO_META_KEY
from pydantic import ValidationError

from omega_mcp.narrow import object_or_none

__all__ = [
    "Wire",
    "checked_wire",
    "error_result",
    "error_wire",
    "from_wire",
    "invalid_result",
    "text_result",
    "to_wire",
]

Wire = dict[str, Any]
"""A `CallToolResult` as wire JSON (camelCase keys, no nulls)."""


def text_result(text: str, *, is_error: bool = False) -> types.CallToolResult:
    """A result with one text block."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def error_result(message: str) -> types.CallToolResult:
    """An isError result with one text block."""
    return text_result(message, is_error=True)


def error_wire(message: str) -> Wire:
    """`error_result(message)` as wire JSON, built without a model round trip."""
    return {"content": [{"type": "text", "text": message}], "isError": True}


def to_wire(result: types.CallToolResult) -> Wire:
    """A result model as wire JSON."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def invalid_result(server_name: str, tool_name: str) -> str:
    """The start of the error text for a result that is no MCP result (the field and problem follow)."""
    return f"server {server_name} returned an invalid result for {tool_name}"


def _invalid(invalid: str, exc: ValidationError) -> str:
    problem = exc.errors()[0]
    where = ".".join(str(p) for p in problem["loc"]) or "the result"
    return f"{invalid}: `{where}`: {problem['msg']}"


def from_wire(raw: Wire, *, invalid: str) -> types.CallToolResult:
    """A wire result as a model; one that is no valid result becomes an error result starting with `invalid`."""
    try:
        return types.CallToolResult.model_validate(raw, by_name=False)
    except ValidationError as exc:
        return error_result(_invalid(invalid, exc))


def checked_wire(raw: Wire, *, invalid: str) -> Wire:
    """A wire result normalised through the model (defaults filled in), or an error result starting with `invalid`."""
    try:
        return to_wire(types.CallToolResult.model_validate(raw, by_name=False))
    except ValidationError as exc:
        return error_wire(_invalid(invalid, exc))


def modern_complete(result: Wire, server_info: dict[str, Any]) -> Wire:
    """What the SDK's runner adds to a 2026-era result: `resultType` ("complete" unless it has one, as a
    2026 server's own input-required round has), then the `serverInfo` stamp in `_meta` (a copy)."""
    result = {**result, "resultType": result.get("resultType") or "complete"}
    meta = object_or_none(result.get("_meta"))
    if meta is None or meta.get(SERVER_INFO_META_KEY) is None:
        result["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: server_info}
    return result
