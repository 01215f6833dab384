"""Checks shared by the tables of servers.toml (`tables.py`): list keys, paths, NUL characters.

Each is a pydantic "before" (or plain) validator body: it raises `ValueError` with the message the
user reads (`load.py` adds the file and the key), and never coerces a value of the wrong type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationInfo

__all__ = ["LISTS", "check_path", "need_list", "no_nul"]

LISTS = {
    "args": ("arguments", ["-m", "mcp_server_time"]),
    "tools": ("globs", ["get_*"]),
    "exclude_tools": ("globs", ["delete_*"]),
    "write_roots": ("directories", ["/tmp/scratch"]),
    "env_passthrough": ("variable names", ["GITHUB_TOKEN"]),
    "hide": ("paths", ["~/secret-dir"]),
    "unhide": ("paths", ["~/.ssh"]),
    "protect": ("names or globs", ["Makefile"]),
    "unprotect": ("names", [".idea/"]),
    "scopes": ("scopes", ["read", "write"]),
    "allow": ("server names", ["server-a"]),
    "allowed_hosts": ("host names", ["omega.internal:8765"]),
    "always_visible": ("globs", ["bash", "read", "mcp__github__*"]),
    "prompts": ("globs over exported prompt names", ["github__*"]),
    "resources": ("globs over resource URIs", ["file:///docs/*"]),
}
"""What each list key holds, and an example of one, for `need_list`'s message."""


def need_list(value: Any, info: ValidationInfo) -> Any:
    """A list key given anything else is refused with the list form, from the user's own string when
    there is one: `tools = "get_*"` gets `e.g. tools = ["get_*"]`."""
    if isinstance(value, list | tuple):
        return tuple(value)  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
    key = info.field_name or ""
    what, example = LISTS[key]
    if isinstance(value, str) and value.strip():
        example = value.split() if key == "args" else [value]
    raise ValueError(f"expected a list of {what}, e.g. {key} = [{', '.join(json.dumps(e) for e in example)}]")


def check_path(value: Any, info: ValidationInfo) -> Any:
    """A configured path must be a non-empty string without NUL (an empty one would silently mean the
    config file's own directory; a NUL cannot reach the OS). In the form the strict mode takes: a
    string from the file (JSON mode), a `Path` from code."""
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a path (a string), got {value!r}")
    if not value.strip():
        raise ValueError('must not be empty (write "." for the directory of the config file)')
    if "\0" in value:
        raise ValueError(f"contains a NUL character: {value!r}")
    return Path(value) if info.mode == "python" else value


def no_nul(value: str | None, what: str) -> str | None:
    if value is not None and "\0" in value:
        raise ValueError(f"{what} contains a NUL character: {value!r}")
    return value
