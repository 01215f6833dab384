"""`${VAR}` and `${VAR:-default}` in servers.toml: expanded from the environment, unset ones reported.

Only `[servers.NAME]` entries are expanded (`expand_entry`, by `config.load_config`), each string
on its own; an unset variable without a default is left as written and reported with its key,
so the one server using it is marked failed and the others still start. `${OMEGA_PYTHON}` is the
Python running omega unless the environment sets it, so an entry can run a server installed next
to omega. `${OMEGA_SESSION_DIR}` is kept as written: a `share = "session"` server's process gets its
session's own directory there. `import` uses `unset_variables` to warn before the server ever starts.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import cast

from omega_mcp.errors import ConfigError
from omega_mcp.narrow import object_or_none

__all__ = ["SESSION_DIR_VARIABLE", "expand_entry", "expand_vars", "has_reference", "unset_variables"]

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_OMEGA_PYTHON = "OMEGA_PYTHON"
SESSION_DIR_VARIABLE = "OMEGA_SESSION_DIR"
"""Left as written at load time: a `share = "session"` process gets its own directory there (proxy/pool.py)."""


def has_reference(text: str) -> bool:
    """Whether `text` still holds a `${...}` reference (left as written because its variable is unset)."""
    return _REFERENCE.search(text) is not None


def _substitute(value: str, environ: Mapping[str, str], unset: Callable[[str], None]) -> str:
    """`value` with every reference expanded; an unset one without default is left as written and passed to `unset`."""

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name == SESSION_DIR_VARIABLE:
            return match.group(0)  # each session's own directory, expanded when its process starts
        found = environ.get(name)
        if name == _OMEGA_PYTHON and not found:
            found = sys.executable or found
        if found is not None and (found != "" or default is None):
            return found
        if default is not None:
            return default
        unset(name)
        return match.group(0)

    return _REFERENCE.sub(sub, value)


def expand_vars(value: str, environ: Mapping[str, str], *, where: str) -> str:
    """Expand `${VAR}` and `${VAR:-default}` (`${OMEGA_PYTHON}` is omega's interpreter unless set).

    Raises:
        ConfigError: a `${VAR}` without default names an unset variable.
    """
    missing: list[str] = []
    expanded = _substitute(value, environ, missing.append)
    if missing:
        name = missing[0]
        raise ConfigError(f"environment variable {name} is not set (use ${{{name}:-default}} for a default)", key=where)
    return expanded


def expand_entry(raw: object, environ: Mapping[str, str], where: str, missing: list[tuple[str, str]]) -> object:
    """`raw` with every string expanded; each unset variable is appended to `missing` as (key, name)."""
    if isinstance(raw, str):
        return _substitute(raw, environ, lambda name: missing.append((where, name)))
    if isinstance(raw, list):
        items = cast(list[object], raw)
        return [expand_entry(item, environ, f"{where}[{i}]", missing) for i, item in enumerate(items)]
    if (table := object_or_none(raw)) is not None:
        return {k: expand_entry(v, environ, f"{where}.{k}" if where else k, missing) for k, v in table.items()}
    return raw


def unset_variables(entry: object, environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The `${VAR}` references without default in a `[servers.NAME]` entry whose variable is unset, as
    (key inside the entry, variable name) pairs in file order, e.g. `("env.BRAVE_API_KEY", "BRAVE_API_KEY")`."""
    missing: list[tuple[str, str]] = []
    expand_entry(entry, os.environ if environ is None else environ, "", missing)
    return missing
