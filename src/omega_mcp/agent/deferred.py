"""Deferred tools for the agent loop (`[agent] tool_search`): the model starts small and searches.

While search is on ("on", or "auto" when the offered tools' definitions exceed
`toolsearch.AUTO_THRESHOLD_CHARS`), each request carries the always-visible tools and
`search_tools`, then:
- with a provider that loads deferred tools itself (`defers_tools`, Anthropic), every other tool,
  marked `deferred` (`defer_loading: true` on the wire); `search_tools` answers with
  `ToolReferencePart`s (`tool_reference` blocks) and the tool list never changes;
- with any other provider, the tools found so far (by a search or a call by name), appended in the
  order they were found, so every request starts with the previous one's tools, byte for byte.
A call by name of any offered tool works whether it was found or not (and then joins the list).
The ranking is `toolsearch.ToolFinder`'s, over the same namespace the hub searches.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp import types

from omega_mcp.agent.tools import ToolCatalog
from omega_mcp.errors import ToolError
from omega_mcp.messages import ResultPart, TextPart, ToolReferencePart, ToolResult, ToolSpec
from omega_mcp.toolsearch import (
    DEFAULT_ALWAYS_VISIBLE,
    SEARCH_TOOLS,
    ToolFinder,
    ToolSearchMode,
    definitions_chars,
    entries_of,
    found_result,
    search_arguments,
    search_is_on,
    search_tools_definition,
)

__all__ = ["AgentToolSearch", "DeferredTools"]


@dataclass(frozen=True, slots=True)
class AgentToolSearch:
    """How the agent searches: the mode, the always-visible globs (None: the built-ins), and the
    server key of an exported name (None: a built-in; used for ranking only, never for routing)."""

    mode: ToolSearchMode = "auto"
    always_visible: Sequence[str] | None = None
    server_of: Callable[[str], str | None] | None = None


class DeferredTools:
    """The tools of each request of one run, and `search_tools` for the model."""

    def __init__(
        self, tools: Sequence[types.Tool], catalog: ToolCatalog, settings: AgentToolSearch, *, native: bool
    ) -> None:
        self.catalog = catalog
        self.native = native
        self._by_wire: dict[str, types.Tool] = {}
        for tool in tools:
            wire = catalog.wire_name(tool.name)
            if wire is not None:
                self._by_wire.setdefault(wire, tool)
        server_of = settings.server_of or _no_server
        self.finder = ToolFinder()
        self.finder.update(entries_of(self._by_wire.values(), server_of))
        globs = DEFAULT_ALWAYS_VISIBLE if settings.always_visible is None else tuple(settings.always_visible)
        specs = {spec.name: spec for spec in catalog.specs}
        self._visible = [s for s in catalog.specs if _matches(self._by_wire[s.name].name, globs)]
        servers = [s for s in dict.fromkeys(server_of(t.name) for t in self._by_wire.values()) if s]
        definition = search_tools_definition(servers, call_tool=False)
        self.search_spec = ToolSpec(SEARCH_TOOLS, definition.description or "", definition.input_schema)
        visible = {s.name for s in self._visible}
        self._deferred = [
            ToolSpec(s.name, s.description, s.input_schema, deferred=True)
            for s in catalog.specs
            if s.name not in visible
        ]
        self._specs_by_name = specs
        self._found: list[str] = []
        self._specs: tuple[ToolSpec, ...] = ()
        self._rebuild()

    @staticmethod
    def active(tools: Sequence[types.Tool], catalog: ToolCatalog, settings: AgentToolSearch) -> bool:
        """Whether search is on for the tools this run offers."""
        offered = [t for t in tools if catalog.wire_name(t.name) is not None]
        return bool(offered) and search_is_on(
            settings.mode, lambda stop_above: definitions_chars(offered, stop_above=stop_above)
        )

    def _rebuild(self) -> None:
        visible = {s.name for s in self._visible}
        if self.native:
            self._specs = (*self._visible, self.search_spec, *self._deferred)
        else:
            found = [self._specs_by_name[name] for name in self._found if name not in visible]
            self._specs = (*self._visible, self.search_spec, *found)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools of the next request (the same object until a new tool joins)."""
        return self._specs

    @property
    def found(self) -> list[str]:
        """The wire names found or called so far, in that order."""
        return list(self._found)

    def loaded(self) -> int:
        """How many tools the model has seen in full so far (visible, found, and the search itself)."""
        visible = {s.name for s in self._visible}
        return len(self._visible) + 1 + len([n for n in self._found if n not in visible])

    def add(self, wire_names: Sequence[str]) -> None:
        """Tools the model found or called join the following requests (appended, each once)."""
        grew = False
        for name in wire_names:
            if name in self._specs_by_name and name not in self._found:
                self._found.append(name)
                grew = True
        if grew and not self.native:
            self._rebuild()

    def search(self, call_id: str | None, wire_name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        """Run `search_tools` for the model: text lines, plus `tool_reference`s where the provider loads them."""
        try:
            query, limit, server = search_arguments(arguments)
        except ToolError as exc:
            return ToolResult(call_id, wire_name, (TextPart(str(exc)),), is_error=True)

        def exported(name: str) -> str | None:
            wire = self.catalog.wire_name(name)
            if wire is None and name in self._by_wire:
                wire = name
            return self._by_wire[wire].name if wire is not None and wire in self._by_wire else None

        found = self.finder.run(query, limit, exported, server=server)
        result = found_result(found)
        wires = [self.catalog.wire_name(e.name) or e.name for e in found.entries]
        text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
        # The model calls tools by their wire names: say them in the text when they differ.
        for entry, wire in zip(found.entries, wires, strict=True):
            if wire != entry.name:
                text = text.replace(f"{entry.name}:", f"{wire}:", 1)
        parts: list[ResultPart] = [TextPart(text)]
        if self.native:
            deferred = {s.name for s in self._deferred}
            parts.extend(ToolReferencePart(wire) for wire in wires if wire in deferred)
        self.add(wires)
        return ToolResult(call_id, wire_name, tuple(parts))


def _no_server(_name: str) -> str | None:
    return None


def _matches(name: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)
