"""Sane write roots, and config files a model could have planted: checked once, before anything starts.

A workspace or write root that is `/`, a system directory, the user's home itself, or that
contains omega's home, config or interpreter would let a sandboxed command rewrite what omega
loads or runs next, so in `sandbox` and `rx` mode it is a config error (in `rwx`, where nothing
is confined anyway, a warning). And a `servers.toml` found only by the implicit lookup in the
current directory is not loaded when it lies where omega's tools may write: whoever wrote it
there may have been a model; `--config` (the user's own word) loads it. Pure path arithmetic.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from omega_mcp.sandbox.policy import SYSTEM_DIRS, SandboxPolicy, interpreter_dirs

__all__ = ["RootProblem", "interpreter_dirs", "planted_config_root", "root_problems"]


@dataclass(frozen=True, slots=True)
class RootProblem:
    """One unsafe root: which setting made it, the root, and why it is unsafe."""

    key: str
    root: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.key}: {self.root} {self.reason}"


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _reason(root: Path, policy: SandboxPolicy, user_home: Path, interpreter: Iterable[Path]) -> str | None:
    if root == Path("/"):
        return "is the root directory"
    for system in SYSTEM_DIRS:
        if _within(root, system):
            return f"is a system directory ({system})"
    if root == user_home:
        return "is your home directory itself (pick a project directory inside it)"
    if _within(user_home, root):
        return f"contains your home directory {user_home}"
    owned = [("omega's home", policy.home), ("omega's config", policy.config_path)]
    owned += [("omega's interpreter", path) for path in interpreter]
    for what, path in owned:
        if path is not None and _within(_real(path), root):
            return f"contains {what} {path}, which a sandboxed command must never change"
    return None


def root_problems(
    policy: SandboxPolicy,
    *,
    workspace_key: str = "sandbox.workspace",
    user_home: Path | None = None,
    interpreter: Iterable[Path] | None = None,
    roots: Iterable[tuple[str, Path]] | None = None,
) -> list[RootProblem]:
    """Every configured root (the workspace, `write_roots`) that is unsafe, with the reason.

    `roots` (setting, root) replaces the policy's own: a confined server's declared roots are judged
    the same way (`servers.NAME.sandbox.write_roots`, `servers.NAME.cwd`).
    """
    home = _real(user_home if user_home is not None else Path.home())
    dirs = tuple(interpreter) if interpreter is not None else interpreter_dirs()
    if roots is None:
        roots = [(workspace_key, policy.workspace), *(("sandbox.write_roots", root) for root in policy.write_roots)]
    problems: list[RootProblem] = []
    for key, root in roots:
        reason = _reason(_real(root), policy, home, dirs)
        if reason is not None:
            problems.append(RootProblem(key, root, reason))
    return problems


def planted_config_root(config_path: Path, policies: Iterable[SandboxPolicy]) -> Path | None:
    """The writable root (of any of `policies`, file tools or bash) that holds `config_path`, or None."""
    real = _real(config_path)
    for policy in policies:
        for root in (*policy.bash_write_roots, *policy.file_write_roots):
            if policy.mode != "rwx" or root != Path("/"):  # rwx writes anywhere: its `/` says nothing
                if _within(real, _real(root)):
                    return root
    return None
