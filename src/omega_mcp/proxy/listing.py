"""Listing what a downstream exports: every page of its tools, prompts, resources and templates.

Lists are read as raw JSON through whichever era the session speaks (`Request` is its raw request
function) and walked to the end, however many pages: a cursor that comes back (a server that would
never end) stops the walk with a warning, and the caller's timeout bounds it in any case. Tools are
read one at a time (`spec.usable_tools`): one broken definition must not cost the others. A broken
optional listing (prompts, resources) leaves that list empty with a warning, never the tools.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol, TypeVar, cast

from mcp import types
from pydantic import BaseModel

from omega_mcp.proxy.apps import resources_for_client, templates_for_client, tool_for_client
from omega_mcp.proxy.spec import Catalog, DownstreamSpec, usable_tools

__all__ = ["Request", "list_catalog", "list_prompts", "list_resources", "list_tools", "relist"]

logger = logging.getLogger(__name__)

Request = Callable[[str, Mapping[str, Any] | None], Awaitable[dict[str, Any]]]
"""`request(method, params)`: one raw request to the downstream (bounded by its timeout)."""
_M = TypeVar("_M", bound=BaseModel)


async def _pages(request: Request, method: str, key: str, server_name: str) -> list[object]:
    """Every item of a paginated list, raw."""
    items: list[object] = []
    cursors: set[str] = set()
    cursor: object = None
    while True:  # every page: one that never ends is bounded by the listing's timeout
        page = await request(method, {"cursor": cursor} if isinstance(cursor, str) and cursor else None)
        raw = page.get(key)
        if not isinstance(raw, list):
            raise ValueError(f"its {method} answer has no `{key}` list")
        items += cast(list[object], raw)
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            return items
        if cursor in cursors:
            logger.warning("[%s] its %s list repeats the cursor %r; listing stops there", server_name, key, cursor)
            return items
        cursors.add(cursor)


async def list_tools(request: Request, spec: DownstreamSpec, warned: set[str]) -> tuple[types.Tool, ...]:
    """Every usable tool the spec's globs let through, in the server's order.

    Raises:
        MCPError: the server refused the listing, or did not answer within its `timeout`.
        ValueError: the answer carries no `tools` list.
    """
    raw = await _pages(request, "tools/list", "tools", spec.server_name)
    tools = usable_tools(spec.server_name, raw, set(), warned)
    for glob in spec.unmatched_globs([t.name for t in tools]):
        if f"filter {glob}" not in warned:  # once per server and glob, across re-lists
            warned.add(f"filter {glob}")
            logger.warning("server %s: the filter %r matches none of its %d tools", spec.server_name, glob, len(tools))
    return tuple(tool_for_client(spec.server_name, t) for t in tools if spec.exports(t.name))


async def _optional(request: Request, method: str, key: str, model: type[_M], server_name: str) -> tuple[_M, ...]:
    try:
        raw = await _pages(request, method, key, server_name)
        return tuple(model.model_validate(item, by_name=False) for item in raw)
    except Exception as exc:  # a broken optional listing must not take the server's tools down
        logger.warning("[%s] listing %s failed: %s", server_name, key, exc)
        return ()


async def list_prompts(
    request: Request, capabilities: types.ServerCapabilities, server_name: str
) -> tuple[types.Prompt, ...]:
    """The server's prompts (empty when it has none or listing them fails)."""
    if capabilities.prompts is None:
        return ()
    return await _optional(request, "prompts/list", "prompts", types.Prompt, server_name)


async def list_resources(
    request: Request, capabilities: types.ServerCapabilities, server_name: str
) -> tuple[tuple[types.Resource, ...], tuple[types.ResourceTemplate, ...]]:
    """The server's resources and resource templates (empty when it has none), `ui://` URIs per server (apps.py)."""
    if capabilities.resources is None:
        return (), ()
    resources = await _optional(request, "resources/list", "resources", types.Resource, server_name)
    templates = await _optional(
        request, "resources/templates/list", "resourceTemplates", types.ResourceTemplate, server_name
    )
    return resources_for_client(server_name, resources), templates_for_client(server_name, templates)


async def list_catalog(
    request: Request, spec: DownstreamSpec, capabilities: types.ServerCapabilities, warned: set[str]
) -> Catalog:
    """Everything the server exports, listed afresh."""
    tools = await list_tools(request, spec, warned)
    prompts = await list_prompts(request, capabilities, spec.server_name)
    resources, templates = await list_resources(request, capabilities, spec.server_name)
    return Catalog(tools, prompts, resources, templates)


class _Lists(Protocol):
    """What a connected session lists (`session.DownstreamSession`)."""

    async def list_tools(self) -> tuple[types.Tool, ...]: ...

    async def list_prompts(self) -> tuple[types.Prompt, ...]: ...

    async def list_resources(self) -> tuple[tuple[types.Resource, ...], tuple[types.ResourceTemplate, ...]]: ...


async def relist(session: _Lists, catalog: Catalog, kinds: set[str]) -> Catalog:
    """`catalog` with the lists of `kinds` ("tools", "prompts", "resources") listed afresh (after list_changed).

    Raises:
        MCPError: the server refused a listing, or did not answer in time.
        ValidationError: an answer is no list of that kind.
    """
    if "tools" in kinds:
        catalog = replace(catalog, tools=await session.list_tools())
    if "prompts" in kinds:
        catalog = replace(catalog, prompts=await session.list_prompts())
    if "resources" in kinds:
        resources, templates = await session.list_resources()
        catalog = replace(catalog, resources=resources, resource_templates=templates)
    return catalog
