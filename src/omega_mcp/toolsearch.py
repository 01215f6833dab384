"""Tool search over the namespace, shared by the hub, the agent and `omega-mcp search`.

The `ToolFinder` keeps a `search.SearchIndex` in step with a list of namespace entries (exported
name, server key, tool): a server whose tools changed is re-indexed alone, the others are kept.
`search_tools` takes keywords or `select:NAME[,NAME...]` (any name a call accepts), optionally
narrowed to one `server`, and answers with a text line per tool (name, its one-line description,
its server) plus `structuredContent` `{"tools": [{name, server, description, inputSchema}]}` (a
built-in's server is `omega`); a built-in is never ranked below a downstream tool that matches the
query no better (a copy of its description cannot hijack its task); `call_tool` calls a tool by name. Both definitions
are built here, small and fixed whatever the catalog's size. Whether search is on follows
`[hub]`/`[agent] tool_search`: "on", "off", or "auto" (on when the JSON of the exported tools'
definitions exceeds `AUTO_THRESHOLD_CHARS`). The Toolbox stays the one routing table: this module
only ranks and describes what the namespace already holds.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mcp import types

from omega_mcp.errors import InvalidArgumentsError
from omega_mcp.narrow import as_object
from omega_mcp.search import Hit, SearchIndex, ToolDocument, Weights
from omega_mcp.search.text import terms

__all__ = [
    "AUTO_THRESHOLD_CHARS",
    "BUILTIN_SERVER",
    "CALL_TOOL",
    "DEFAULT_ALWAYS_VISIBLE",
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "MIN_CONFIDENCE",
    "SEARCH_TOOLS",
    "WEAK_CONFIDENCE",
    "Entry",
    "Found",
    "ToolFinder",
    "ToolSearchMode",
    "call_tool_definition",
    "call_tool_target",
    "definitions_chars",
    "document_of",
    "entries_of",
    "found_result",
    "search_arguments",
    "search_is_on",
    "search_tools_definition",
    "visible_names",
]

ToolSearchMode = Literal["off", "on", "auto"]
SEARCH_TOOLS = "search_tools"
CALL_TOOL = "call_tool"
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
_KEEP_CANDIDATES = 500
"""How many ranked tools a search for a client with a profile looks through for the ones it may use."""
AUTO_THRESHOLD_CHARS = 40_000
"""`auto` turns search on above this many characters of tool definitions (about 10,000 tokens)."""
MIN_CONFIDENCE = 0.05
"""Hits matching less than this idf-weighted share of the query's words are left out (bench/bench_search.py)."""
WEAK_CONFIDENCE = 0.35
"""Below this, the best hit is announced as a weak guess: likely no tool fits."""
SHORT_QUERY_WORDS = 4
"""Up to this many words a query is keywords, held to the full cut; a longer one to a proportional part."""
DEFAULT_ALWAYS_VISIBLE = ("bash", "read", "write", "edit", "bash_output", "kill_shell")
BUILTIN_SERVER = "omega"
"""The server a built-in tool's search result names: omega itself (no servers.toml key)."""
_SELECT = "select:"
_SUMMARY_CHARS = 200
_SERVER_LIST_CHARS = 600

_HINT_WORDS = {
    "read_only_hint": "read only",
    "destructive_hint": "destructive delete remove overwrite",
    "idempotent_hint": "idempotent",
    "open_world_hint": "external web internet",
}


_OWN_TASKS = {
    "bash": "shell command terminal execute script",
    "read": "file contents",
    "write": "save file contents",
    "edit": "replace text in a file",
    "bash_output": "background shell output",
    "kill_shell": "kill background shell",
}
"""The built-ins' own tasks in the words a query may use: part of their titles in the index (only there),
so a downstream tool copying a built-in's description does not cover its task better than it does."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One tool of the namespace: its exported name, its server key (None: a built-in), the tool."""

    name: str
    server_name: str | None
    tool: types.Tool


@dataclass(frozen=True, slots=True)
class Found:
    """What a search found, best first (a `select:` in the order named), and the names it did not know."""

    query: str
    entries: tuple[Entry, ...]
    unknown: tuple[str, ...] = ()
    selected: bool = False
    weak: bool = False
    """Even the best hit matches little of the query: likely no tool fits."""
    server: str | None = None
    """The `server` the search was narrowed to (BUILTIN_SERVER: the built-ins)."""
    unknown_server: bool = False
    """No connected server has that key."""


def entries_of(tools: Iterable[types.Tool], server_of: Callable[[str], str | None]) -> list[Entry]:
    """Namespace entries of exported tools; `server_of` gives an exported name's server key (None: built-in)."""
    return [Entry(tool.name, server_of(tool.name), tool) for tool in tools]


def document_of(entry: Entry) -> ToolDocument:
    """The search document of a namespace entry: every field a tool offers."""
    tool = entry.tool
    parameters: list[tuple[str, str]] = []
    for name, schema in as_object(tool.input_schema.get("properties")).items():
        description = as_object(schema).get("description")
        parameters.append((name, description if isinstance(description, str) else ""))
    hints: list[str] = []
    title = tool.title or ""
    annotations = tool.annotations
    if annotations is not None:
        title = title or annotations.title or ""
        for key, words in _HINT_WORDS.items():
            if getattr(annotations, key, None) is True:
                hints.append(words)
    if entry.server_name is None and tool.name in _OWN_TASKS:
        title = f"{title} {_OWN_TASKS[tool.name]}"
    return ToolDocument(
        name=entry.name,
        server=entry.server_name,
        tool_name=tool.name if entry.server_name is None else _own_name(entry),
        title=title,
        description=tool.description or "",
        parameters=tuple(parameters),
        hints=tuple(hints),
    )


def _own_name(entry: Entry) -> str:
    # The exported name carries the server prefix (a field of its own) and maybe a hash suffix:
    # the tool's words are what is left after the prefix.
    name = entry.name
    marker = f"{entry.server_name}__"
    at = name.find(marker)
    return name[at + len(marker) :] if at >= 0 else name


def _builtins_first(hits: Sequence[Hit]) -> list[Hit]:
    """Search cannot be hijacked: a built-in ranks above every downstream tool that matches the query
    no better than it does (confidence), so a third-party tool copying `bash`'s description never
    comes before `bash` for running a shell command; one that matches more of the query (it names its
    service, say) keeps its place."""
    out: list[Hit] = []
    for hit in hits:
        at = len(out)
        if hit.document.server is None:
            while at and out[at - 1].document.server is not None and out[at - 1].confidence <= hit.confidence:
                at -= 1
        out.insert(at, hit)
    return out


def _length_scale(query: str) -> float:
    """How much of a query one tool can be expected to match: all of a few keywords, a part of a long
    task (its steps are other tools' business). The confidence cut and the weak mark scale with it."""
    words = len(set(terms(query)))
    return min(1.0, SHORT_QUERY_WORDS / words) if words else 1.0


def _fingerprint(entries: Sequence[Entry]) -> tuple[tuple[str, str | None, int], ...]:
    # Identity of the schema object: a server that re-lists its tools gets new objects (re-indexed),
    # a server left alone keeps them (kept). Cheap for thousands of tools.
    return tuple((e.name, e.tool.description, id(e.tool.input_schema)) for e in entries)


class ToolFinder:
    """A search index kept in step with the namespace: `update(entries)` then `search` or `select`."""

    def __init__(self, weights: Weights | None = None) -> None:
        self.index = SearchIndex(weights)
        self._entries: dict[str, Entry] = {}
        self._folded: dict[str, str] = {}
        self._aliases: dict[str, str] | None = None
        self._prints: dict[str | None, tuple[tuple[str, str | None, int], ...]] = {}

    def update(self, entries: Iterable[Entry]) -> bool:
        """Follow the namespace: re-index the servers whose tools changed. True if anything changed."""
        groups: dict[str | None, list[Entry]] = {}
        for entry in entries:
            groups.setdefault(entry.server_name, []).append(entry)
        removed = [server for server in self._prints if server not in groups]
        changed: dict[str | None, list[ToolDocument]] = {}
        for server, members in groups.items():
            fingerprint = _fingerprint(members)
            if self._prints.get(server) != fingerprint:
                self._prints[server] = fingerprint
                changed[server] = [document_of(e) for e in members]
        for server in removed:
            del self._prints[server]
        if not changed and not removed:
            return False
        self.index.update(changed, removed)
        self._entries = {e.name: e for members in groups.values() for e in members}
        self._folded = {}  # built when a `select:` needs it
        self._aliases = None  # built when a `select:` needs one
        return True

    def _alias_map(self) -> dict[str, str]:
        """`server.tool` and `server__tool`, for callers without the namespace's own resolver (the agent)."""
        if self._aliases is None:
            self._aliases = {
                f"{e.server_name}{sep}{_own_name(e)}": e.name
                for e in self._entries.values()
                if e.server_name is not None
                for sep in (".", "__")
            }
        return self._aliases

    @property
    def entries(self) -> Mapping[str, Entry]:
        """Every indexed tool by exported name."""
        return self._entries

    def search(
        self,
        query: str,
        limit: int = DEFAULT_LIMIT,
        *,
        min_confidence: float = MIN_CONFIDENCE,
        keep: Callable[[Entry], bool] | None = None,
        server: str | None = None,
    ) -> Found:
        """The best tools for keywords, at most `limit` (capped at MAX_LIMIT); noise left out (the cut
        scales with the query's length), built-ins above the downstream tools that fit no better, and
        with `keep` (a hub client's profile) the tools it refuses left out; `server` (a servers.toml
        key, or BUILTIN_SERVER) keeps only that server's tools."""
        limit = max(1, min(limit, MAX_LIMIT))
        if server is not None:
            wanted = None if server == BUILTIN_SERVER else server
            if wanted not in self.index.servers and server not in self.index.servers:
                return Found(query, (), server=server, unknown_server=True)
            profile = keep

            def narrowed(entry: Entry) -> bool:
                return entry.server_name in (wanted, server) and (profile is None or profile(entry))

            keep = narrowed
        candidates = _KEEP_CANDIDATES if keep is not None else limit
        ranked = _builtins_first(self.index.search(query, candidates, builtins=True))
        scale = _length_scale(query)
        hits = [h for h in ranked if h.confidence >= min_confidence * scale]
        if keep is not None:
            hits = [h for h in hits if keep(self._entries[h.document.name])]
        hits = hits[:limit]
        chosen = tuple(self._entries[h.document.name] for h in hits)
        weak = bool(hits) and max(h.confidence for h in hits) < WEAK_CONFIDENCE * scale
        return Found(query, chosen, weak=weak, server=server)

    def servers(self, query: str, limit: int = DEFAULT_LIMIT) -> list[str | None]:
        """The servers best fitting `query`, best first (None: omega's built-ins)."""
        return [server for server, _ in self.index.rank_servers(query, limit)]

    def select(
        self,
        names: Iterable[str],
        resolve: Callable[[str], str | None] | None = None,
        keep: Callable[[Entry], bool] | None = None,
    ) -> Found:
        """The tools named, in that order (duplicates once); `resolve` maps an alias to an exported name;
        a tool `keep` refuses is as unknown."""
        chosen: list[Entry] = []
        unknown: list[str] = []
        for raw in names:
            name = raw.strip()
            if not name:
                continue
            exported = name if name in self._entries else (resolve(name) if resolve is not None else None)
            if exported is None or exported not in self._entries:
                if not self._folded:
                    self._folded = {key.casefold(): key for key in self._entries}
                exported = self._alias_map().get(name) or self._folded.get(name.casefold())
            if (
                exported is None
                or exported not in self._entries
                or (keep is not None and not keep(self._entries[exported]))
            ):
                unknown.append(name)
            elif self._entries[exported] not in chosen:
                chosen.append(self._entries[exported])
        return Found(_SELECT + ",".join(names), tuple(chosen), tuple(unknown), selected=True)

    def run(
        self,
        query: str,
        limit: int = DEFAULT_LIMIT,
        resolve: Callable[[str], str | None] | None = None,
        keep: Callable[[Entry], bool] | None = None,
        server: str | None = None,
    ) -> Found:
        """`search_tools`' query: `select:A,B` picks by name (whatever `server`), anything else is
        keywords (`keep`, `server`: see `search`)."""
        stripped = query.strip()
        if stripped.lower().startswith(_SELECT):
            return self.select(stripped[len(_SELECT) :].split(","), resolve, keep)
        return self.search(stripped, limit, keep=keep, server=server)


# -- the tools' definitions and results -------------------------------------------------------


def _server_list(servers: Sequence[str]) -> str:
    if not servers:
        return ""
    shown: list[str] = []
    used = 0
    for server in servers:
        if used + len(server) + 2 > _SERVER_LIST_CHARS:
            break
        shown.append(server)
        used += len(server) + 2
    more = len(servers) - len(shown)
    return f" Servers: {', '.join(shown)}{f' and {more} more' if more else ''}."


def search_tools_definition(servers: Sequence[str] = (), *, call_tool: bool = True) -> types.Tool:
    """`search_tools`: the only way to discover the tools not listed. `servers` are named in its
    description (cut at a fixed length), so the model knows what there is to find."""
    then = (
        "They become callable at once (by name, or through call_tool) and join your tool list."
        if call_tool
        else "They become callable from your next step on."
    )
    description = (
        "Search the tools of the connected MCP servers, which are not all listed up front. Give keywords or a "
        "short description of the step you need (e.g. 'create github issue', 'take a screenshot of the page'), "
        "or 'select:NAME,NAME' for tools whose names you know. Returns the best matches, best first, each with "
        f"its name, description and input schema. {then}" + _server_list(servers)
    )
    return types.Tool(
        name=SEARCH_TOOLS,
        description=description,
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Keywords or a step description, or select:NAME[,NAME...] for exact names.",
                },
                "limit": {
                    "type": "integer",
                    "description": f"How many tools to return (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}).",
                    "default": DEFAULT_LIMIT,
                },
                "server": {
                    "type": "string",
                    "description": f"Only this server's tools ({BUILTIN_SERVER}: the built-ins).",
                },
            },
            "required": ["query"],
        },
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


def call_tool_definition() -> types.Tool:
    """`call_tool`: run any tool of the namespace by name, exactly as a direct call would."""
    return types.Tool(
        name=CALL_TOOL,
        description=(
            "Call a tool found with search_tools (or any tool whose name you know) by its name, with its "
            "arguments. Works exactly like calling the tool directly."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name, as search_tools returned it."},
                "arguments": {"type": "object", "description": "The tool's arguments, matching its input schema."},
            },
            "required": ["name"],
        },
    )


def search_arguments(arguments: Mapping[str, Any] | None) -> tuple[str, int, str | None]:
    """`search_tools`' (query, limit, server): limit defaults to DEFAULT_LIMIT and is capped at MAX_LIMIT;
    server (optional) is a servers.toml key or BUILTIN_SERVER.

    Raises:
        InvalidArgumentsError: a missing or empty query, a limit that is no positive integer, a server
            that is no non-empty string.
    """
    args = dict(arguments or {})
    query, limit, server = args.get("query"), args.get("limit", DEFAULT_LIMIT), args.get("server")
    unknown = sorted(set(args) - {"query", "limit", "server"})
    if unknown:
        raise InvalidArgumentsError(f"Invalid arguments for {SEARCH_TOOLS}: `{unknown[0]}`: unknown field")
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentsError(
            f"Invalid arguments for {SEARCH_TOOLS}: `query`: give keywords, or select:NAME for exact names"
        )
    if limit is None:
        limit = DEFAULT_LIMIT
    if isinstance(limit, float) and limit.is_integer():
        limit = int(limit)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidArgumentsError(f"Invalid arguments for {SEARCH_TOOLS}: `limit`: must be a positive integer")
    if server is not None and (not isinstance(server, str) or not server.strip()):
        raise InvalidArgumentsError(
            f"Invalid arguments for {SEARCH_TOOLS}: `server`: a server's name (its servers.toml key), or leave it out"
        )
    return query, min(limit, MAX_LIMIT), server.strip() if isinstance(server, str) else None


def call_tool_target(arguments: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """`call_tool`'s (name, arguments).

    Raises:
        InvalidArgumentsError: no name, or arguments that are no object.
    """
    args = dict(arguments or {})
    name, inner = args.get("name"), args.get("arguments")
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentsError(f"Invalid arguments for {CALL_TOOL}: `name`: the tool's name is required")
    if inner is None:
        inner = {}
    if not isinstance(inner, dict):
        raise InvalidArgumentsError(f"Invalid arguments for {CALL_TOOL}: `arguments`: must be an object")
    if name in (CALL_TOOL,):
        raise InvalidArgumentsError(f"Invalid arguments for {CALL_TOOL}: `name`: call the tool itself, not call_tool")
    return name.strip(), dict(inner)  # pyright: ignore[reportUnknownArgumentType]


def _summary(description: str | None) -> str:
    text = " ".join((description or "").split())
    for index, ch in enumerate(text):
        if ch in ".!?" and index >= 20 and (index + 1 == len(text) or text[index + 1] == " "):
            text = text[: index + 1]
            break
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def _origin(entry: Entry) -> str:
    """Which server a result comes from, as its line says it: omega's own tools are marked so."""
    return f"[{BUILTIN_SERVER} built-in]" if entry.server_name is None else f"[server {entry.server_name}]"


def found_result(found: Found) -> types.CallToolResult:
    """`search_tools`' answer: one line per tool (name, description, its server), and `structuredContent`
    `{"tools": [...]}` (each with its `server`: the servers.toml key, BUILTIN_SERVER for a built-in)."""
    lines = [
        f"{e.name}: {_summary(e.tool.description)} {_origin(e)}" if e.tool.description else f"{e.name} {_origin(e)}"
        for e in found.entries
    ]
    if found.weak:
        lines.insert(0, f"Weak matches only: probably no tool fits {found.query!r}; check before using these.")
    if found.unknown:
        lines.append(f"Unknown tool name{'s' if len(found.unknown) > 1 else ''}: {', '.join(found.unknown)}")
    if not found.entries:
        if found.selected:
            lines.append("No tool has these names; search with keywords to find the right name.")
        elif found.unknown_server:
            lines.append(
                f"No connected server is named {found.server!r}: give a server's servers.toml key "
                f"({BUILTIN_SERVER} for the built-ins), or search without `server`."
            )
        else:
            narrowed = f" on server {found.server!r}" if found.server is not None else ""
            lines.append(
                f"No tool matches {found.query!r}{narrowed}. Try other or fewer words (what the tool does, or the "
                "service it works with), or select:NAME for a name you know."
            )
    structured = {
        "tools": [
            {
                "name": e.name,
                "server": e.server_name or BUILTIN_SERVER,
                "description": e.tool.description or "",
                "inputSchema": e.tool.input_schema,
            }
            for e in found.entries
        ]
    }
    return types.CallToolResult(content=[types.TextContent(text="\n".join(lines))], structured_content=structured)


# -- when search is on, and what stays visible ------------------------------------------------


def definitions_chars(tools: Iterable[types.Tool], *, stop_above: int | None = None) -> int:
    """Characters of the JSON of the tools' definitions, as a client receives them; with `stop_above`,
    counting stops once the total exceeds it (auto only needs to know that, and a catalog of
    thousands of tools would take a second to serialize whole)."""
    total = 0
    for tool in tools:
        total += len(json.dumps(tool.model_dump(mode="json", by_alias=True, exclude_none=True), ensure_ascii=False))
        if stop_above is not None and total > stop_above:
            break
    return total


def search_is_on(mode: ToolSearchMode, chars: Callable[[int], int]) -> bool:
    """Whether `mode` means search for a catalog; `chars(stop_above)` counts its definitions' characters."""
    if mode == "off":
        return False
    return mode == "on" or chars(AUTO_THRESHOLD_CHARS) > AUTO_THRESHOLD_CHARS


def visible_names(names: Iterable[str], always_visible: Sequence[str] | None) -> list[str]:
    """The names matched by the `always_visible` globs (None: the built-ins), in catalog order."""
    globs = DEFAULT_ALWAYS_VISIBLE if always_visible is None else tuple(always_visible)
    if not globs:
        return []
    match = re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs)).match
    return [name for name in names if match(name)]
