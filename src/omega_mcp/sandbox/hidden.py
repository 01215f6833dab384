"""Secrets hidden from bash and `read` in sandbox and rx modes: the defaults and `[sandbox] hide/unhide`.

`HideConfig` is the `[sandbox]` half that `config.SandboxConfig` inherits (`hide`, `unhide`);
`effective_hidden` turns it into the policy's list (`SandboxPolicy.hidden`), with `~` the home of
the user running omega and relative paths against the config file's directory. Pure data and path
arithmetic: `launch` covers these paths in bash's mount namespace, `paths` refuses reads of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationInfo, field_validator

__all__ = ["DEFAULT_HIDDEN", "HideConfig", "default_hidden", "effective_hidden", "unhide_hint"]

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

_EXAMPLE = {"hide": '["~/secret-dir"]', "unhide": '["~/.ssh"]'}


def _expand(path: str | Path, base: Path | None = None) -> Path:
    expanded = os.path.expanduser(str(path))
    return Path(os.path.normpath(os.path.join(base, expanded) if base is not None else expanded))


def default_hidden() -> tuple[Path, ...]:
    """`DEFAULT_HIDDEN` with `~` expanded to the home of the user running omega (`$HOME` now)."""
    return tuple(_expand(p) for p in DEFAULT_HIDDEN)


class HideConfig(BaseModel):
    """`[sandbox] hide = [...]` adds paths to hide; `unhide = [...]` removes entries of `DEFAULT_HIDDEN`."""

    hide: tuple[Path, ...] = ()
    unhide: tuple[Path, ...] = ()

    @field_validator("hide", "unhide", mode="before")
    @classmethod
    def _paths(cls, value: Any, info: ValidationInfo) -> Any:
        key = info.field_name or "hide"
        if not isinstance(value, list | tuple):
            example = json.dumps([value]) if isinstance(value, str) and value.strip() else _EXAMPLE[key]
            raise ValueError(f"expected a list of paths, e.g. {key} = {example}")
        items: list[str] = []
        for item in value:  # pyright: ignore[reportUnknownVariableType]
            if not isinstance(item, str) or not item.strip() or "\0" in item:
                raise ValueError(f"each entry must be a non-empty path without NUL, got {item!r}")
            items.append(item)
        if key == "unhide":
            defaults = default_hidden()
            for item in items:
                if _expand(item) not in defaults:
                    raise ValueError(
                        f"{item!r} is not hidden by default, so it cannot be unhidden; the defaults are "
                        f"{', '.join(DEFAULT_HIDDEN)} (remove a path you added from `hide` instead)"
                    )
        return tuple(items)


def effective_hidden(config: HideConfig, base: Path | None = None) -> tuple[Path, ...]:
    """The defaults minus `unhide`, plus `hide`; relative entries resolve against `base` (the config
    file's directory; the current directory without one)."""
    where = base if base is not None else Path.cwd()
    removed = {_expand(p) for p in config.unhide}
    kept = [p for p in default_hidden() if p not in removed]
    return tuple(dict.fromkeys((*kept, *(_expand(p, where) for p in config.hide))))


def unhide_hint(path: Path) -> str:
    """How to see `path` again: the `unhide` entry for a default, else removing it from `hide`."""
    if path in default_hidden():
        home = _expand("~")
        shown = f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)
        return f'remove it with [sandbox] unhide = ["{shown}"]'
    return f"remove {path} from it to read it"
