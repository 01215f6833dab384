"""Secrets hidden from bash and `read` in sandbox and rx modes: the defaults and `[sandbox] hide/unhide`.

`config.SandboxConfig` reads `hide` and `unhide` like its other path lists; `effective_hidden`
turns them into the policy's list (`SandboxPolicy.hidden`), with `~` the home of
the user running omega and relative paths against the config file's directory. Pure data and path
arithmetic: `launch` covers these paths in bash's mount namespace, `paths` refuses reads of them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DEFAULT_HIDDEN", "default_hidden", "effective_hidden", "is_default_hidden", "tilde", "unhide_hint"]

DEFAULT_HIDDEN: tuple[str, ...] = (
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
)
"""Hidden unless `[sandbox] unhide` names them; omega's token and state are hidden on top, always."""


def _expand(path: str | Path, base: Path | None = None) -> Path:
    expanded = os.path.expanduser(str(path))
    return Path(os.path.normpath(os.path.join(base, expanded) if base is not None else expanded))


def default_hidden() -> tuple[Path, ...]:
    """`DEFAULT_HIDDEN` with `~` expanded to the home of the user running omega (`$HOME` now)."""
    return tuple(_expand(p) for p in DEFAULT_HIDDEN)


def is_default_hidden(path: str | Path) -> bool:
    """Whether `path` (as written in `[sandbox] unhide`) is one of `DEFAULT_HIDDEN`."""
    return _expand(path) in default_hidden()


def effective_hidden(hide: Sequence[Path], unhide: Sequence[Path], base: Path | None = None) -> tuple[Path, ...]:
    """The defaults minus `unhide`, plus `hide`; relative entries resolve against `base` (the config
    file's directory; the current directory without one)."""
    where = base if base is not None else Path.cwd()
    removed = {_expand(p) for p in unhide}
    kept = [p for p in default_hidden() if p not in removed]
    return tuple(dict.fromkeys((*kept, *(_expand(p, where) for p in hide))))


def tilde(path: Path) -> str:
    """`path` as a user writes it in servers.toml: `~/.ssh` for a path below the home directory."""
    home = _expand("~")
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) and path != home else str(path)


def unhide_hint(path: Path) -> str:
    """How to see `path` again: the `unhide` entry for a default, else removing it from `hide`."""
    if path in default_hidden():
        return f'remove it with [sandbox] unhide = ["{tilde(path)}"]'
    return f"remove {path} from it to read it"
