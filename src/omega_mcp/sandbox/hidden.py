"""Secrets hidden from bash and `read`, and names protected from every tool: the effective lists.

The defaults live in `omega_mcp.sensitive` (below `config/` and this package). `config.SandboxConfig`
reads `hide`/`unhide` and `protect`/`unprotect`; `effective_hidden` turns the first pair into the
policy's list (`SandboxPolicy.hidden`), with `~` the home of the user running omega and relative
paths against the config file's directory, and `effective_protected` the second into its names
(`SandboxPolicy.protected_names`). Pure data and path arithmetic: `launch` covers hidden paths in
bash's mount namespace, `paths` refuses reads of them; `protect.py` matches protected names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omega_mcp.sensitive import DEFAULT_HIDDEN, DEFAULT_PROTECTED, expand_user, is_default_hidden, normalize_protected

__all__ = [
    "DEFAULT_HIDDEN",
    "default_hidden",
    "effective_hidden",
    "effective_protected",
    "is_default_hidden",
    "tilde",
    "unhide_hint",
]


def default_hidden() -> tuple[Path, ...]:
    """`DEFAULT_HIDDEN` with `~` expanded to the home of the user running omega (`$HOME` now)."""
    return tuple(expand_user(p) for p in DEFAULT_HIDDEN)


def effective_hidden(hide: Sequence[Path], unhide: Sequence[Path], base: Path | None = None) -> tuple[Path, ...]:
    """The defaults minus `unhide`, plus `hide`; relative entries resolve against `base` (the config
    file's directory; the current directory without one)."""
    where = base if base is not None else Path.cwd()
    removed = {expand_user(p) for p in unhide}
    kept = [p for p in default_hidden() if p not in removed]
    return tuple(dict.fromkeys((*kept, *(expand_user(p, where) for p in hide))))


def effective_protected(protect: Sequence[str] = (), unprotect: Sequence[str] = ()) -> tuple[str, ...]:
    """`DEFAULT_PROTECTED` minus `unprotect`, plus `protect`, each normalised (`sensitive.normalize_protected`)."""
    removed = {normalize_protected(p) for p in unprotect}
    kept = [n for n in map(normalize_protected, DEFAULT_PROTECTED) if n not in removed]
    return tuple(dict.fromkeys((*kept, *map(normalize_protected, protect))))


def tilde(path: Path) -> str:
    """`path` as a user writes it in servers.toml: `~/.ssh` for a path below the home directory."""
    home = expand_user("~")
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) and path != home else str(path)


def unhide_hint(path: Path) -> str:
    """How to see `path` again: the `unhide` entry for a default, else removing it from `hide`."""
    if path in default_hidden():
        return f'remove it with [sandbox] unhide = ["{tilde(path)}"]'
    return f"remove {path} from it to read it"
