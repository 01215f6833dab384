"""Pinned tool definitions: a downstream tool that changes after omega first saw it is held.

The first time omega sees a tool of a server it records a hash of its definition (name, title,
description, `inputSchema`, `outputSchema`, annotations) in `$OMEGA_HOME/state/pins/<server>.json`.
When the server later offers a changed definition (after a restart, or with `list_changed`) the
tool is held: it stays listed with its description prefixed by `[changed since first seen: run
omega-mcp tools --accept SERVER.TOOL]`, a call to it is an isError result with the same words, and
`omega-mcp tools` shows it as `changed`. New tools of a known server are pinned when first seen.
`omega-mcp tools --accept SERVER[.TOOL]` records the offered definitions (`accept`); a running omega
notices the file changed on its next list or call (`refresh`: one `stat` of the directory) and serves
the tool again. Pins outlive the server's entry in servers.toml: a server removed and re-added is
judged against what was first seen, until the user accepts it (`tools --accept SERVER`).
A server with `pin = false` is not pinned. Files are written atomically (rename), 0600 in 0700.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from mcp import types

__all__ = ["HELD_PREFIX", "Pins", "definition_hash", "held_message"]

logger = logging.getLogger(__name__)

HELD_PREFIX = "[changed since first seen: run omega-mcp tools --accept {server}.{tool}]"
_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def definition_hash(tool: types.Tool) -> str:
    """sha256 of the tool's definition as the client sees it (the fields above, canonical JSON)."""
    wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    picked = {key: wire.get(key) for key in _FIELDS}
    return hashlib.sha256(json.dumps(picked, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def held_message(server_name: str, tool_name: str) -> str:
    """What a held tool's description starts with, and what a call to it answers."""
    return HELD_PREFIX.format(server=server_name, tool=tool_name)


class Pins:
    """The pins of every pinned server of one omega (`directory`: `$OMEGA_HOME/state/pins`)."""

    def __init__(self, directory: Path, unpinned: Iterable[str] = ()) -> None:
        self.directory = directory
        self.unpinned = set(unpinned)
        self._pinned: dict[str, dict[str, str]] = {}
        self._offered: dict[str, dict[str, str]] = {}
        self._stamp: tuple[int, int] | None = None

    # -- files -----------------------------------------------------------------------------

    def _file(self, server_name: str) -> Path:
        return self.directory / f"{server_name}.json"

    def _dir_stamp(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self.directory)
        except OSError:
            return None
        return (found.st_mtime_ns, found.st_ino)

    def _load(self, server_name: str) -> dict[str, str]:
        try:
            data = json.loads(self._file(server_name).read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning(
                "pins of server %s unreadable (%s): every tool of it is held until accepted", server_name, exc
            )
            return {"": ""}  # matches no tool: all held, none re-pinned silently
        tools = cast(dict[str, Any], data).get("tools") if isinstance(data, dict) else None
        if not isinstance(tools, dict):
            return {}
        return {str(k): str(v) for k, v in cast(dict[str, Any], tools).items()}

    def _save(self, server_name: str, pinned: dict[str, str]) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=f".{server_name}-", dir=self.directory)
            with os.fdopen(fd, "w") as out:
                json.dump({"server": server_name, "tools": dict(sorted(pinned.items()))}, out, indent=1)
            os.replace(temp, self._file(server_name))
        except OSError as exc:
            logger.warning("cannot record the pins of server %s in %s: %s", server_name, self.directory, exc)
        self._stamp = self._dir_stamp()

    def _pins_of(self, server_name: str) -> dict[str, str]:
        pinned = self._pinned.get(server_name)
        if pinned is None:
            pinned = self._pinned[server_name] = self._load(server_name)
        return pinned

    # -- what omega serves -----------------------------------------------------------------

    def refresh(self) -> bool:
        """Re-read the pins when their directory changed (`tools --accept` ran); whether it did."""
        stamp = self._dir_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        self._pinned.clear()
        return True

    def apply(self, server_name: str, tools: Sequence[types.Tool]) -> tuple[types.Tool, ...]:
        """The tools to export for what the server offers now: a changed one held (its description
        prefixed), a new one pinned (recorded at once)."""
        if server_name in self.unpinned:
            return tuple(tools)
        if self._stamp is None:
            self._stamp = self._dir_stamp()
        pinned = self._pins_of(server_name)
        offered = {t.name: definition_hash(t) for t in tools}
        self._offered[server_name] = offered
        new = {name: digest for name, digest in offered.items() if name not in pinned}
        if new and "" not in pinned:
            pinned.update(new)
            self._save(server_name, pinned)
        out: list[types.Tool] = []
        for tool in tools:
            if pinned.get(tool.name) == offered[tool.name]:
                out.append(tool)
                continue
            prefix = held_message(server_name, tool.name)
            logger.warning("server %s: tool %s changed since first seen: held until accepted", server_name, tool.name)
            out.append(tool.model_copy(update={"description": f"{prefix} {tool.description or ''}".rstrip()}))
        return tuple(out)

    def held(self, server_name: str, tool_name: str) -> bool:
        """Whether the tool, as last offered, differs from its pin."""
        if server_name in self.unpinned:
            return False
        offered = self._offered.get(server_name, {}).get(tool_name)
        return offered is not None and self._pins_of(server_name).get(tool_name) != offered

    def changed(self, server_name: str) -> list[str]:
        """The held tools of a server, in the order offered."""
        return [name for name in self._offered.get(server_name, {}) if self.held(server_name, name)]

    def accept(self, server_name: str, tool_name: str | None = None) -> list[str]:
        """Record the offered definitions of `server_name` (all its tools, or only `tool_name`) as its
        pins; the tools whose pin changed. Accepting a whole server forgets pins of tools it no longer
        offers (a fresh start)."""
        offered = self._offered.get(server_name, {})
        pinned = dict(self._pins_of(server_name))
        pinned.pop("", None)
        if tool_name is None:
            accepted = [n for n, d in offered.items() if pinned.get(n) != d]
            pinned = dict(offered)
        else:
            accepted = [tool_name] if tool_name in offered and pinned.get(tool_name) != offered[tool_name] else []
            if tool_name in offered:
                pinned[tool_name] = offered[tool_name]
        self._pinned[server_name] = pinned
        self._save(server_name, pinned)
        return accepted
