"""The harvested tool catalog and its queries (tests/fixtures/), as the hub would name and index them.

Shared by tests/search/ and bench/bench_search.py (which puts tests/ on its path).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mcp import types

from omega_mcp.builtin.schemas import BUILTIN_TOOLS
from omega_mcp.names import Namespace, Route
from omega_mcp.toolsearch import Entry

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CATALOG = FIXTURES / "tool_catalog.json"
QUERIES = FIXTURES / "tool_search_queries.json"


@dataclass(frozen=True)
class Query:
    query: str
    expected: tuple[str, ...]  # exported names
    kind: str
    split: str


@cache
def raw_catalog() -> dict[str, Any]:
    return json.loads(CATALOG.read_text(encoding="utf-8"))


def catalog_servers(copies: int = 1) -> list[tuple[str, list[types.Tool]]]:
    """(server key, tools) of the harvested catalog; `copies` > 1 repeats it under keys `name-2`, ...
    (the synthetic large catalogs of the budget tests and the benchmark)."""
    servers: list[tuple[str, list[types.Tool]]] = []
    for copy in range(1, copies + 1):
        for server in raw_catalog()["servers"]:
            key = server["key"] if copy == 1 else f"{server['key']}-{copy}"
            servers.append((key, [types.Tool.model_validate(t) for t in server["tools"]]))
    return servers


def catalog_entries(copies: int = 1, *, builtins: bool = True) -> list[Entry]:
    """The namespace entries the hub would index: built-ins, then `mcp__<server>__<tool>`."""
    servers = catalog_servers(copies)
    builtin_tools = [tool for tool, _ in BUILTIN_TOOLS] if builtins else []
    namespace = Namespace([t.name for t in builtin_tools], [(key, t.name) for key, tools in servers for t in tools])
    entries = [Entry(t.name, None, t) for t in builtin_tools]
    for key, tools in servers:
        for tool in tools:
            entries.append(Entry(namespace.name_of(Route(key, tool.name)), key, tool))
    return entries


def queries() -> list[Query]:
    """The benchmark queries, expected tools given by their exported names."""
    namespace_names = {(e.server_name, e.tool.name): e.name for e in catalog_entries(builtins=False)}
    out: list[Query] = []
    for item in json.loads(QUERIES.read_text(encoding="utf-8"))["queries"]:
        expected = tuple(namespace_names[tuple(e.split("/", 1))] for e in item["expected"])
        out.append(Query(item["query"], expected, item["kind"], item["split"]))
    return out


class CatalogHost:
    """An agent's tool host over the harvested catalog's tools (built-ins included) under their exported
    names, all servers or only `servers`; every call answers "NAME ran" and is recorded in `calls`."""

    def __init__(self, servers: tuple[str, ...] | None = None) -> None:
        entries = [e for e in catalog_entries() if e.server_name is None or servers is None or e.server_name in servers]
        self.tools = [e.tool.model_copy(update={"name": e.name}) for e in entries]
        self.servers = {e.name: e.server_name for e in entries}
        self.calls: list[str] = []

    async def list_tools(self) -> list[types.Tool]:
        return self.tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        self.calls.append(name)
        return types.CallToolResult(content=[types.TextContent(text=f"{name} ran")])
