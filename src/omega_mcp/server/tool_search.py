"""The hub in search mode: each session's tools/list, and the `search_tools` / `call_tool` tools.

A view over the one Toolbox, never a second routing table. While search is on (`[hub] tool_search`
"on", or "auto" over a large catalog) a session's tools/list is the `always_visible` tools, then
`search_tools` and `call_tool`, then the tools this session found or called, appended in the order
it met them (earlier entries never move, so a client's cached prefix stays valid). The catalog, its
size and the search index are refreshed only when the downstream tool set changes. A session is
its connection (handshake era); a 2026-era stdio stream has one client, so it is the process
(`None`); a 2026-era HTTP request has no session (`NO_SESSION`): it finds and calls, but nothing
is remembered for it.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from mcp import types
from mcp.server.session import ServerSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp._sdk import connection_of
from omega_mcp.builtin.schemas import BUILTIN_TOOLS
from omega_mcp.builtin.shells import NO_SESSION
from omega_mcp.errors import ToolError
from omega_mcp.names import Route
from omega_mcp.proxy.apps import app_only, app_only_refusal
from omega_mcp.results import error_result
from omega_mcp.toolbox import Profile, Toolbox
from omega_mcp.toolsearch import (
    CALL_TOOL,
    SEARCH_TOOLS,
    Entry,
    ToolFinder,
    ToolSearchMode,
    call_tool_definition,
    call_tool_target,
    definitions_chars,
    found_result,
    search_arguments,
    search_is_on,
    search_tools_definition,
    visible_names,
)

__all__ = ["Notify", "SessionTools"]

_UNSET = object()
Notify = Callable[[object], Awaitable[None]]
"""Tells one session (its owner) that its tool list changed."""


class SessionTools:
    """Search mode over `toolbox` for every session of one server."""

    def __init__(
        self, toolbox: Toolbox, *, mode: ToolSearchMode = "auto", always_visible: Sequence[str] | None = None
    ) -> None:
        self.toolbox = toolbox
        self.mode: ToolSearchMode = mode
        self.always_visible = always_visible
        self.finder = ToolFinder()
        self._version: object = _UNSET
        self._entries: list[Entry] = []
        self._copies: dict[str, types.Tool] = {}
        self._visible: list[str] | None = None
        self._chars: int | None = None
        self._active = False
        self._meta: tuple[types.Tool, types.Tool] | None = None
        self._by_owner: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()
        self._process: list[str] = []
        self._ever: set[str] = set()

    # -- the catalog -------------------------------------------------------------------------

    async def _catalog(self) -> None:
        """Follow the namespace. The index is fed the servers' own tool objects under their exported
        names (no copy of a 10,000-tool catalog per change); only what a session lists is copied."""
        downstreams = self.toolbox.downstreams
        if downstreams is not None and not downstreams.ready:
            await self.toolbox.list_tools()  # the Toolbox's own bounded wait for servers still starting
        version = downstreams.version if downstreams is not None else 0
        if version == self._version:
            return
        namespace = self.toolbox.namespace()
        entries = [Entry(tool.name, None, tool) for tool, _ in BUILTIN_TOOLS]
        seen: set[str] = set()
        for server_name, tool in downstreams.tools() if downstreams is not None else ():
            name = namespace.name_of(Route(server_name, tool.name))
            if name not in seen:  # a server listing one tool twice: the first, as the Toolbox does
                seen.add(name)
                entries.append(Entry(name, server_name, tool))
        self.finder.update([e for e in entries if not app_only(e.tool)])  # never the model's to find
        self._entries, self._version, self._chars, self._meta, self._copies = entries, version, None, None, {}
        self._visible = None
        self._active = search_is_on(self.mode, self._size)

    def _size(self, stop_above: int) -> int:
        if self._chars is None:
            self._chars = definitions_chars((self._listed(e) for e in self._entries), stop_above=stop_above)
        return self._chars

    def _listed(self, entry: Entry) -> types.Tool:
        """The tool as tools/list shows it: under its exported name (copied once per catalog version)."""
        if entry.tool.name == entry.name:
            return entry.tool
        copy = self._copies.get(entry.name)
        if copy is None:
            copy = self._copies[entry.name] = entry.tool.model_copy(update={"name": entry.name})
        return copy

    async def active(self) -> bool:
        """Whether search is on for the current catalog (`auto` follows its size)."""
        await self._catalog()
        return self._active

    def _meta_tools(self) -> tuple[types.Tool, types.Tool]:
        if self._meta is None:
            servers = [s for s in dict.fromkeys(e.server_name for e in self.finder.entries.values()) if s]
            self._meta = (search_tools_definition(servers), call_tool_definition())
        return self._meta

    # -- one session's list ------------------------------------------------------------------

    @staticmethod
    def owner(session: ServerSession, http_request: object = None) -> object | None:
        """Whose found tools a request sees and adds to, as for background shells: the connection;
        the process (None) for a 2026-era stdio stream; NO_SESSION for a 2026-era HTTP request."""
        connection = connection_of(session)
        if connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return NO_SESSION if http_request is not None else None
        return connection

    def found(self, owner: object) -> list[str]:
        """The names `owner` found or called, in the order it met them."""
        if owner is None:
            return self._process
        if owner is NO_SESSION:
            return []
        try:
            return self._by_owner.get(owner, [])
        except TypeError:  # not weakly referable: nothing is remembered for it
            return []

    def remember(self, owner: object, names: Iterable[str]) -> bool:
        """Add `names` to `owner`'s list (in order, once each); True when it grew while search is on."""
        if owner is NO_SESSION or not self._active:
            return False
        if owner is None:
            found = self._process
        else:
            try:
                found = self._by_owner.setdefault(owner, [])
            except TypeError:
                return False
        visible = set(visible_names(names, self.always_visible))
        grew = False
        for name in names:
            if name not in found and name not in visible:
                found.append(name)
                self._ever.add(name)
                grew = True
        return grew

    async def list_tools(self, owner: object) -> list[types.Tool]:
        """`owner`'s tools/list: everything while search is off, else the visible, the two, the found."""
        await self._catalog()
        if not self._active:
            return await self.toolbox.list_tools()
        entries = self.finder.entries
        if self._visible is None:
            self._visible = visible_names([e.name for e in self._entries], self.always_visible)
        visible = self._visible
        listed = [self._listed(entries[name]) for name in visible]
        listed.extend(self._meta_tools())
        shown = set(visible)
        listed.extend(
            self._listed(entries[name]) for name in self.found(owner) if name in entries and name not in shown
        )
        return listed

    def relay_accepts(self, name: str) -> bool:
        """Whether the stdio relay may take a call of `name` (else it goes the server's way, which
        adds the tool to its session's list): always while search is off or once the name was met."""
        return not self._active or name in self._ever

    # -- the two tools -----------------------------------------------------------------------

    async def intercept(
        self,
        owner: object,
        name: str,
        arguments: Mapping[str, Any] | None,
        notify: Notify,
        profile: Profile | None = None,
    ) -> tuple[types.CallToolResult | None, str, Mapping[str, Any] | None]:
        """A call while search may be on: `search_tools` is answered here (a result, its tools joining
        `owner`'s list, `notify(owner)` when it grew; only tools `profile` permits); `call_tool` becomes
        the call it asks for (name, arguments); anything else passes unchanged (None, name, arguments)."""
        if not await self.active():
            return None, name, arguments
        if name == CALL_TOOL:
            try:
                name, arguments = call_tool_target(arguments)
            except ToolError as exc:
                return error_result(str(exc)), name, arguments
            if (refused := app_only_refusal(self.toolbox, name, profile)) is not None:
                return error_result(refused), name, arguments
        if name == SEARCH_TOOLS:
            try:
                result, names = await self.search(arguments, profile)
            except ToolError as exc:
                return error_result(str(exc)), name, arguments
            if self.remember(owner, names):
                await notify(owner)
            return result, name, arguments
        return None, name, arguments

    async def called(self, owner: object, name: str, notify: Notify) -> None:
        """A tool was called by `name` (any name a call accepts): it joins `owner`'s list."""
        exported = self.exported_name(name)
        if exported is not None and self.remember(owner, [exported]):
            await notify(owner)

    async def search(
        self, arguments: Mapping[str, Any] | None, profile: Profile | None = None
    ) -> tuple[types.CallToolResult, list[str]]:
        """Run `search_tools` (for a client with a `profile`: over the tools it may use); the result and
        the names it returned.

        Raises:
            InvalidArgumentsError: the arguments are wrong (the message names the field).
        """
        query, limit, server = search_arguments(arguments)
        downstreams = self.toolbox.downstreams
        if downstreams is not None and (starting := downstreams.unsettled()):
            # A search answers for every server, as a call waits for its tool's server: an answer
            # without a server still starting would tell the model no tool fits (bounded: their connect
            # timeouts; `list_changed` covers the list, but a search result is read once).
            await downstreams.wait_settled(starting)
        await self._catalog()
        namespace = self.toolbox.namespace()

        def permitted(entry: Entry) -> bool:
            route = namespace.resolve(entry.name)
            return profile is None or (route is not None and profile.permits(route))

        found = self.finder.run(query, limit, self.exported_name, permitted if profile is not None else None, server)
        return found_result(found), [e.name for e in found.entries]

    def exported_name(self, name: str) -> str | None:
        """The exported name of any name a call accepts, or None."""
        try:
            route = self.toolbox.resolve(name)
            return self.toolbox.namespace().name_of(route)
        except (ToolError, KeyError):
            return None
