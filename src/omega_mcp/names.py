"""The flat tool namespace: `mcp__<server>__<tool>` names, their reverse map and aliases.

Each part is normalized as Claude Code does (every character outside `[A-Za-z0-9_-]` becomes
`_`); a name over the 64-character budget keeps a readable prefix plus a stable hash of the
full name, and a collision after normalization is broken the same way, so names are unique
and deterministic across restarts. Every name a tool was ever given is accepted in calls: the
exported one, the full `mcp__<server>__<tool>` of any length (normalized or not), and the
aliases. Routes are only ever recovered through the reverse map: never by splitting on `__`
(server and tool names may contain it after normalization).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MAX_NAME_LENGTH",
    "Namespace",
    "Naming",
    "Route",
    "exported_name",
    "fit_name",
    "normalize",
    "prompt_name",
    "server_of_prompt",
    "server_prefixes",
    "tool_prefix",
]

MAX_NAME_LENGTH = 64
_HASH_LENGTH = 8
_INVALID = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class Naming:
    """How downstream tools are named for one client.

    `client_prefix` is what the client puts before every name it shows the model (Claude Code:
    `mcp__omega__`): names are shortened so that prefix + name fits `MAX_NAME_LENGTH`. `style`
    `"short"` exports `<server>__<tool>` (so Claude Code shows `mcp__omega__time__get_current_time`,
    as for a server registered directly); the full `mcp__<server>__<tool>` is always accepted too.
    """

    client_prefix: str = ""
    style: Literal["full", "short"] = "full"

    @property
    def budget(self) -> int:
        return MAX_NAME_LENGTH - len(self.client_prefix)

    def prefix(self, server_name: str) -> str:
        return tool_prefix(server_name) if self.style == "full" else f"{normalize(server_name)}__"


FULL = Naming()


@dataclass(frozen=True, slots=True)
class Route:
    """Where a name leads: a built-in (`server_name is None`) or a downstream server's tool."""

    server_name: str | None
    tool_name: str


def normalize(part: str) -> str:
    """Claude Code's normalization of one name part: every char outside `[A-Za-z0-9_-]` → `_`."""
    return _INVALID.sub("_", part)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LENGTH]


def fit_name(name: str, max_length: int = MAX_NAME_LENGTH, *, key: str | None = None) -> str:
    """`name` if it fits `max_length`, else a prefix plus `_` and a hash of `key` (default: `name`).

    Passing a distinct `key` forces the hashed form, which is how collisions are broken.
    """
    if key is None and len(name) <= max_length:
        return name
    suffix = "_" + _digest(name if key is None else key)
    return name[: max_length - len(suffix)] + suffix


def tool_prefix(server_name: str) -> str:
    """`mcp__<server>__`: what every exported tool name of a server starts with (before any hashing)."""
    return f"mcp__{normalize(server_name)}__"


def exported_name(server_name: str, tool_name: str, naming: Naming = FULL) -> str:
    """The exported name of a downstream tool before collision handling."""
    return fit_name(naming.prefix(server_name) + normalize(tool_name), naming.budget)


def _alias_prefixes(server_name: str) -> tuple[str, str]:
    return f"{server_name}.", f"{server_name}__"


def server_prefixes(server_name: str) -> tuple[str, ...]:
    """Every prefix a name of this server's tools may start with: the exported one and the aliases'."""
    return (tool_prefix(server_name), *_alias_prefixes(server_name))


def prompt_name(server_name: str, prompt: str) -> str:
    """A downstream prompt's exported name, `<server>__<prompt>` (server keys never contain `__`)."""
    return f"{server_name}__{prompt}"


def server_of_prompt(server_name: str, exported: str) -> str | None:
    """The server's own prompt name behind an exported prompt name, if it is one of this server's."""
    prefix = prompt_name(server_name, "")
    return exported[len(prefix) :] if exported.startswith(prefix) and len(exported) > len(prefix) else None


class Namespace:
    """An immutable, ordered name ↔ route table with alias and fuzzy lookup.

    Built-ins come first (matched case-insensitively), then downstream tools in the order given.
    """

    def __init__(self, builtins: Iterable[str], downstream: Iterable[tuple[str, str]], naming: Naming = FULL) -> None:
        self._by_name: dict[str, Route] = {}
        self._by_route: dict[Route, str] = {}
        self._aliases: dict[str, Route] = {}
        self._builtin_folded: dict[str, str] = {}
        for name in builtins:
            self._add(name, Route(None, name))
            self._builtin_folded[name.casefold()] = name
        for server_name, tool_name in downstream:
            route = Route(server_name, tool_name)
            if route in self._by_route:
                continue  # a server listing one tool twice: first wins
            name = exported_name(server_name, tool_name, naming)
            if name in self._by_name:
                # Two raw names normalized alike (`a.b` and `a_b`): hash the raw identity, deterministic.
                name = fit_name(name, naming.budget, key=f"{server_name}\0{tool_name}")
            self._add(name, route)
            aliases = [prefix + tool_name for prefix in _alias_prefixes(server_name)]
            # The full name is always accepted, whatever this client is shown and however long it is:
            # normalized or as the server spells the tool, shortened to 64 characters or not.
            aliases += [tool_prefix(server_name) + normalize(tool_name), tool_prefix(server_name) + tool_name]
            aliases += [exported_name(server_name, tool_name), _alias_prefixes(server_name)[1] + normalize(tool_name)]
            for alias in aliases:
                self._aliases.setdefault(alias, route)

    def _add(self, name: str, route: Route) -> None:
        self._by_name[name] = route
        self._by_route[route] = name

    @property
    def names(self) -> list[str]:
        """Every exported name, in order."""
        return list(self._by_name)

    def name_of(self, route: Route) -> str:
        """The exported name of a route.

        Raises:
            KeyError: the route is not in this namespace.
        """
        return self._by_route[route]

    def resolve(self, name: str) -> Route | None:
        """The route for an exported name, an alias (`server.tool`, `server__tool`) or a built-in in any case."""
        route = self._by_name.get(name) or self._aliases.get(name)
        if route is not None:
            return route
        builtin = self._builtin_folded.get(name.casefold())
        return Route(None, builtin) if builtin is not None else None

    def suggest(self, name: str, limit: int = 3) -> list[str]:
        """The exported names closest to an unknown `name`, best first."""
        names = self.names
        folded = {n.casefold(): n for n in names}
        close = difflib.get_close_matches(name.casefold(), list(folded), n=limit, cutoff=0.5)
        found = [folded[c] for c in close]
        needle = name.casefold().rsplit("__", 1)[-1].rsplit(".", 1)[-1]
        if needle:
            for candidate in names:
                if len(found) >= limit:
                    break
                if needle in candidate.casefold() and candidate not in found:
                    found.append(candidate)
        return found[:limit]
