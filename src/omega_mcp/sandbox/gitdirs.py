"""Git directories found by what they are, not by their name: what of each is protected.

git takes a directory for a repository when it holds `HEAD` and either `objects/` and `refs/` or a
`commondir` file (a worktree's); whatever the directory is called (`.git`, a renamed `.gitreal` a
`gitdir:` file points to, `.git/modules/sub`, a bare `repo.git`, `.git/worktrees/NAME`). Each such
directory keeps its `config`, `config.worktree` and `hooks/` protected (the names of
`GIT_DIR_PROTECTED`), and so does the directory its `core.hooksPath` names (`.husky`), relative to
the work tree (the directory holding `.git`, or the `gitdir:` file) or, for a bare repository, to the
git directory itself. The files its config includes (`include.path`, `includeIf.*.path`, relative
to the including file, and what they include in turn) count as its config: git reads them as if
they were in it, so `../cfg` in the workspace could set `core.fsmonitor`. What `tracker.py` finds
a repository naming anywhere in the roots it tells `learn`, for the file tools. The file tools also never
write a file called `HEAD`, so they cannot complete a repository around a `config` they wrote
first. `tracker.py` uses `is_git_dir` on each directory listing it makes; the file tools ask
`git_reason` for one path. `core.hooksPath` and the includes are read with git's own parser
(`--no-includes`: one file at a time), once per version of each file. Nothing here knows MCP.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
from collections.abc import Collection
from pathlib import Path

__all__ = [
    "GIT_DIR_PROTECTED",
    "HOOKS_PATH",
    "INCLUDED",
    "REPOSITORY_MARKER",
    "config_includes",
    "git_reason",
    "gitdir_target",
    "hooks_dir",
    "is_git_dir",
    "is_git_path",
    "learn",
    "work_tree_hooks",
]

GIT_DIR_PROTECTED = {"config": ".git/config", "config.worktree": ".git/config", "hooks": ".git/hooks"}
"""Entries of any git directory that stay protected -> the protected name they count as."""
HOOKS_PATH = "core.hooksPath"
"""The protected name of the directory a repository's `core.hooksPath` names."""
INCLUDED = ".git/config"
"""The protected name a file a repository's config includes counts as (it is part of the config)."""
REPOSITORY_MARKER = "HEAD, which makes a directory a git repository"
"""Why the file tools may not write a file called `HEAD` (see `git_reason`)."""
_GIT_SECONDS = 10.0
_GITDIR_MAX = 4096
_INCLUDE_DEPTH = 10  # git's own limit on nested includes
_KEYS = r"^(core\.hookspath|include\.path|includeif\..*\.path)$"
"""The keys read from a config file: the hooks directory and the files it includes."""


_learnt: dict[str, str] = {}
"""Paths the trackers found a repository's config naming (`learn`) -> the protected name they count as."""


def learn(path: str, name: str) -> None:
    """Note that a repository in a write root names `path` (a real path) as an included config file
    (`INCLUDED`) or its hooks directory (`HOOKS_PATH`): `git_reason` refuses it from then on, even
    where no repository lies above it (`include.path = ../../shared/cfg`). Kept until omega exits."""
    _learnt[path] = name


def is_git_dir(names: Collection[str]) -> bool:
    """Whether a directory with these entries is one git would use as a repository."""
    return "HEAD" in names and ("commondir" in names or ("objects" in names and "refs" in names))


def is_git_path(path: str | Path) -> bool:
    """`is_git_dir` for a directory on disk (a few `lexists`)."""
    p = str(path)

    def has(name: str) -> bool:
        return os.path.lexists(os.path.join(p, name))

    return has("HEAD") and (has("commondir") or (has("objects") and has("refs")))


def _head(path: str) -> str:
    """The first bytes of a regular file (never blocks: a FIFO planted there reads as empty), or ""."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, _GITDIR_MAX).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def gitdir_target(dot_git: str) -> str | None:
    """The directory a `gitdir: X` file names (relative to the file's directory), or None."""
    text = _head(dot_git)
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    named = first.removeprefix("gitdir:").strip()
    return os.path.normpath(os.path.join(os.path.dirname(dot_git), os.path.expanduser(named))) if named else None


def hooks_dir(git_dir: str, work_tree: str) -> str | None:
    """The directory `core.hooksPath` of the repository at `git_dir` names, absolute, or None (a
    linked worktree's git directory reads the config of the common one its `commondir` names)."""
    named = _facts(os.path.join(_common_dir(git_dir), "config"))[0]
    if named is None:
        return None
    return os.path.normpath(os.path.join(work_tree, os.path.expanduser(named)))


def config_includes(git_dir: str) -> list[str]:
    """The files the config of the repository at `git_dir` includes (its `config`, the common one's
    for a linked worktree, and `config.worktree`), absolute, and what those include in turn, to
    git's depth: whether a condition of `includeIf` holds does not matter, it may hold later."""
    found: list[str] = []
    seen: set[str] = set()
    level = [os.path.join(_common_dir(git_dir), "config"), os.path.join(git_dir, "config.worktree")]
    for _ in range(_INCLUDE_DEPTH):
        following: list[str] = []
        for config in level:
            for named in _facts(config)[1]:
                path = os.path.normpath(os.path.join(os.path.dirname(config), os.path.expanduser(named)))
                if path not in seen:
                    seen.add(path)
                    found.append(path)
                    following.append(path)
        if not following:
            break
        level = following
    return found


def _common_dir(git_dir: str) -> str:
    named = _head(os.path.join(git_dir, "commondir")).strip()
    return os.path.normpath(os.path.join(git_dir, named)) if named else git_dir


def _facts(config: str) -> tuple[str | None, tuple[str, ...]]:
    """`(core.hooksPath, include paths)` of one config file as written (no includes followed)."""
    try:
        st = os.stat(config)
    except OSError:
        return None, ()
    if not stat.S_ISREG(st.st_mode):
        return None, ()  # git would block on a FIFO, or fail
    return _read_facts(config, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _read_facts(config: str, dev: int, ino: int, mtime_ns: int, size: int) -> tuple[str | None, tuple[str, ...]]:
    del dev, ino, mtime_ns, size  # the cache key: this version of the file
    git = shutil.which("git", path=os.environ.get("PATH") or os.defpath)
    if git is None:
        return None, ()
    env = {"PATH": os.defpath, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": os.devnull}
    try:
        done = subprocess.run(
            [git, "config", "--file", config, "--no-includes", "--null", "--get-regexp", _KEYS],
            capture_output=True,
            env=env,
            timeout=_GIT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, ()
    hooks: str | None = None
    includes: list[str] = []
    for item in done.stdout.split(b"\0"):
        key, _, value = item.decode(errors="replace").partition("\n")
        if not value:
            continue
        if key == "core.hookspath":
            hooks = value  # the last one wins, as in git
        else:
            includes.append(value)
    return hooks, tuple(includes)


def _git_dir_of(directory: str, names: Collection[str]) -> str | None:
    """The git directory of the repository `directory` (with these entries) is the work tree of, or
    `directory` itself when it is one."""
    if ".git" in names:
        dot_git = os.path.join(directory, ".git")
        git_dir = dot_git if os.path.isdir(dot_git) and not os.path.islink(dot_git) else gitdir_target(dot_git)
        if git_dir is not None:
            return git_dir
    return directory if is_git_dir(names) else None


def work_tree_hooks(directory: str, names: Collection[str]) -> str | None:
    """For a directory with these entries: the hooks directory of the repository it is the work tree
    of (its `.git` directory or the one its `.git` file names), or of the bare repository it is."""
    if ".git" in names:
        dot_git = os.path.join(directory, ".git")
        git_dir = dot_git if os.path.isdir(dot_git) and not os.path.islink(dot_git) else gitdir_target(dot_git)
        if git_dir is not None:
            return hooks_dir(git_dir, directory)
    if is_git_dir(names) and os.path.basename(directory) != ".git":
        return hooks_dir(directory, directory)  # bare: relative to the git directory
    return None


def git_reason(target: Path, base: Path, enabled: Collection[str]) -> tuple[Path, str] | None:
    """`(protected path, name)` when `target` (below `base`, a write root) is a git directory's
    config or hooks, a file the config of a repository above it includes, or lies in a repository's
    `core.hooksPath` directory; else None. `enabled`: the
    protected names in force (`.git/config`, `.git/hooks`; hooksPath goes with the latter). Strings
    and two `lexists` a directory, no pathlib: every write of the file tools asks."""
    parts = target.relative_to(base).parts
    if parts and parts[-1] == "HEAD" and ".git/config" in enabled:
        # The file tools never make a repository: with `config` written first and `HEAD` after, a
        # directory would become one whose config nobody checked (bash's are: `tracker.py`).
        return target, REPOSITORY_MARKER
    hooks_on = ".git/hooks" in enabled
    text = str(target)
    for path, name in list(_learnt.items()):  # named by a repository elsewhere in the roots
        if name == INCLUDED and text == path and INCLUDED in enabled:
            return target, INCLUDED
        if name == HOOKS_PATH and hooks_on and (text == path or text.startswith(path.rstrip("/") + "/")):
            return Path(path), HOOKS_PATH
    here = str(base)
    for name in parts:
        if name in GIT_DIR_PROTECTED and GIT_DIR_PROTECTED[name] in enabled and is_git_path(here):
            return Path(here, name), GIT_DIR_PROTECTED[name]
        prefix = here.rstrip("/") + "/"
        if os.path.lexists(prefix + ".git") or os.path.lexists(prefix + "HEAD"):
            names = [n for n in _MARKERS if os.path.lexists(prefix + n)]
            if hooks_on:
                hooks = work_tree_hooks(here, names)
                if hooks is not None and (text == hooks or text.startswith(hooks.rstrip("/") + "/")):
                    return Path(hooks), HOOKS_PATH
            if INCLUDED in enabled and (git_dir := _git_dir_of(here, names)) is not None:
                if text in config_includes(git_dir):
                    return target, INCLUDED
        here = prefix + name
    return None


_MARKERS = (".git", "HEAD", "objects", "refs", "commondir")
"""The entries `work_tree_hooks` looks at."""
