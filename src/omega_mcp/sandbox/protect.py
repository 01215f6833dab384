"""Protected names: matching a path against them, and what of a new one may stay (git's own files).

A protected name (`SandboxPolicy.protected_names`, defaults in `omega_mcp.sensitive`) is one or more
path components, each an `fnmatch` glob; it matches a path whose components end with it, or that
lies below such a path, at any depth of a write root (`.git/config` matches `ws/lib/.git/config`,
`.claude` matches `ws/.claude/settings.json`). The file tools refuse them outright (`paths.py`); bash
gets the existing ones read-only and has new ones undone (`tracker.py`), except what git itself
writes when it makes a repository: a `.git/config` holding only keys `git init` and `git clone`
write (read with git's own parser, so no parser difference can smuggle a key past the check) and a
`.git/hooks/` holding only `*.sample` files, which git never runs. Nothing here knows MCP.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from omega_mcp.sandbox.gitdirs import git_reason

if TYPE_CHECKING:
    from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = ["GIT_KEYS", "Matcher", "git_config_problem", "hooks_problem", "matcher", "protected_reason"]

GIT_KEYS = (
    r"core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks)",
    r"core\.(sparsecheckout|sparsecheckoutcone)",
    r"extensions\.(objectformat|refstorage|partialclone)",
    r"remote\..+\.(url|fetch|mirror|promisor|partialclonefilter)",
    r"branch\..+\.(remote|merge)",
    r"submodule\..+\.(url|active)",
    r"user\.(name|email)",
)
"""The keys a new `.git/config` may hold and stay: what git writes on init, clone and submodule init, and
the committer's name and email (a model sets them before its first commit).
Nothing that runs a program (core.fsmonitor, core.hooksPath, core.sshCommand, *.textconv, filter.*,
alias.*, include*, submodule.*.update, remote.*.uploadpack, ...) is among them."""
_GIT_KEYS = re.compile("|".join(f"(?:{k})" for k in GIT_KEYS))
_GIT_SECONDS = 10.0


class Matcher:
    """Protected names, compiled once: `match(parts)` says which one a relative path falls under."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        self._patterns = tuple(tuple(name.split("/")) for name in self.names)
        components = {c for p in self._patterns for c in p}
        self._globs = tuple(c for c in components if any(ch in c for ch in "*?["))
        self._literals = frozenset(components.difference(self._globs))
        self._glob = re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in self._globs)) if self._globs else None

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def match(self, parts: Sequence[str]) -> tuple[int, str] | None:
        """`(n, name)`: the first `n` components of `parts` are a protected path (`name` matched it), or None."""
        for end in range(1, len(parts) + 1):
            for pattern, name in zip(self._patterns, self.names, strict=True):
                size = len(pattern)
                if size <= end and all(fnmatch.fnmatchcase(parts[end - size + i], pattern[i]) for i in range(size)):
                    return end, name
        return None

    def entry(self, parents: Sequence[str], name: str) -> tuple[str, bool] | None:
        """For a directory entry `name` below `parents` (components from the root): `(pattern, True)`
        when the entry itself is protected, `(pattern, False)` when it starts a longer protected name
        (`.git` of `.git/config`: a symbolic link there would lead the name elsewhere), else None."""
        parts = (*parents, name)
        for pattern, text in zip(self._patterns, self.names, strict=True):
            size = len(pattern)
            if size <= len(parts) and all(
                fnmatch.fnmatchcase(parts[len(parts) - size + i], pattern[i]) for i in range(size)
            ):
                return text, True
        for pattern, text in zip(self._patterns, self.names, strict=True):
            for k in range(1, len(pattern)):
                if k <= len(parts) and all(
                    fnmatch.fnmatchcase(parts[len(parts) - k + i], pattern[i]) for i in range(k)
                ):
                    return text, False
        return None

    def relevant(self, name: str) -> bool:
        """Whether an entry called `name` could be (part of) a protected name: a cheap pre-test for `entry`."""
        return name in self._literals or (self._glob is not None and self._glob.match(name) is not None)


@functools.lru_cache(maxsize=64)
def matcher(names: tuple[str, ...]) -> Matcher:
    """The compiled `Matcher` of a policy's `protected_names` (one per distinct list)."""
    return Matcher(names)


def protected_reason(policy: SandboxPolicy, target: Path) -> str | None:
    """Why the file tools must not write `target` (a protected name inside its write root), or None."""
    names = matcher(policy.protected_names)
    if not names:
        return None
    base = Path("/")
    for root in policy.file_write_roots:
        for alias in (Path(os.path.normpath(root)), policy.pinned_roots.get(root, root)):
            if target.is_relative_to(alias) and len(alias.parts) > len(base.parts):
                base = alias
    parts = target.relative_to(base).parts
    found = names.match(parts)
    if found is not None:
        where, name = base.joinpath(*parts[: found[0]]), found[1]
    else:
        # A git directory by what it is, whatever its name (a renamed .git, a submodule's, a bare one),
        # and the directory its core.hooksPath names.
        by_content = git_reason(target, base, names.names)
        if by_content is None:
            return None
        where, name = by_content
    return (
        f"{where} is protected ({name}): what a model writes there runs later outside "
        "the sandbox (an MCP client's servers, an editor's tasks, git's config and hooks), so no tool may "
        "change it, in any mode; edit it yourself, or list it in [sandbox] unprotect"
    )


def _git() -> str | None:
    return shutil.which("git", path=os.environ.get("PATH") or os.defpath)


def git_config_problem(path: Path) -> str | None:
    """Why a `.git/config` that appeared must go (a key that is not git's own, or it cannot be read), or
    None when it holds only `GIT_KEYS`. git reads it (`--no-includes`: nothing else is opened)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    git = _git()
    if git is None:
        return "cannot be checked: git is not installed"
    env = {"PATH": os.defpath, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": os.devnull}
    try:
        done = subprocess.run(
            [git, "config", "--file", str(path), "--no-includes", "--list", "--null"],
            capture_output=True,
            env=env,
            timeout=_GIT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot be checked ({exc})"
    if done.returncode != 0:
        return "is not a valid git config"
    for item in done.stdout.split(b"\0"):
        key = item.split(b"\n", 1)[0].decode(errors="replace")
        if key and not _GIT_KEYS.fullmatch(key.lower()):
            return f"sets {key}, which git itself never writes there"
    return None


def hooks_problem(path: Path) -> list[str]:
    """The entries of a `.git/hooks/` that appeared that must go: all but regular `*.sample` files
    (git never runs those; `git init` copies them). A hooks path that is not a directory goes whole."""
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            return [path.name]
        entries = list(os.scandir(path))
    except OSError:
        return [path.name]
    bad: list[str] = []
    for entry in entries:
        if not (entry.name.endswith(".sample") and entry.is_file(follow_symlinks=False)):
            bad.append(entry.name)
    return sorted(bad)
