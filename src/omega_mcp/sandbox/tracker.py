"""Protected names in the write roots, tracked across bash calls: what to bind, and what to undo.

`ProtectedTree` knows every protected entry (`protect.Matcher`, and each git directory's config and
hooks found by what the directory is, plus its core.hooksPath directory and the files its config
includes: `gitdirs.py`) at any depth
of bash's write roots (the workspace and `write_roots`; the private /tmp and `$OMEGA_HOME/scratch`
are bash's own and run nothing outside). Directories are looked at again only when they changed: inotify says which
(`inotify.py`); a directory it cannot watch is compared by mtime. A bash run `begin`s (the existing
entries become its read-only binds), may be `check`ed while it runs (a background shell's
`bash_output`) and `end`s; each look undoes every entry that appeared or was replaced while a run
could have done it: moved to `$OMEGA_HOME/quarantine/STAMP/<its path>` (a replaced symbolic link is
put back), except what git itself writes for a new repository (`protect.git_config_problem`,
`hooks_problem`). A change no running bash could have made (no run, or every run had that path
bound and the directories above it unchanged) is the user's: it is kept. Blocking: call from a
worker thread; one look at a time (a lock).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omega_mcp.sandbox.gitdirs import (
    GIT_DIR_PROTECTED,
    HOOKS_PATH,
    INCLUDED,
    config_includes,
    is_git_dir,
    learn,
    work_tree_hooks,
)
from omega_mcp.sandbox.inotify import OVERFLOW, Watcher
from omega_mcp.sandbox.protect import Matcher, git_config_problem, hooks_problem

__all__ = ["ProtectedTree", "Run", "Undone"]

_Ident = tuple[int, int, int, str]  # dev, ino, file type, link target ("" unless a symbolic link)


@dataclass(frozen=True, slots=True)
class Undone:
    """One change omega undid: the path, what happened there, and where its content went (or why not)."""

    path: str
    what: str
    kept: str | None = None
    error: str | None = None

    def __str__(self) -> str:
        if self.error is not None:
            return f"{self.path} ({self.what}): could not be undone: {self.error}"
        where = f"; its content is kept in {self.kept}" if self.kept else ""
        return f"{self.path} ({self.what}) was undone{where}"


@dataclass(slots=True)
class _Entry:
    ident: _Ident
    pattern: str
    full: bool  # the entry is protected itself; False: it starts a longer protected name (a link there)


@dataclass(slots=True)
class _Dir:
    stamp: tuple[int, int, int]  # dev, ino, mtime_ns
    parts: tuple[str, ...]
    subdirs: dict[str, str] = field(default_factory=dict[str, str])  # name -> path
    protected: dict[str, _Entry] = field(default_factory=dict[str, _Entry])  # path -> entry


@dataclass(eq=False, slots=True)
class Run:
    """One bash process's view: the protected entries bound read-only in it, and the directories above them."""

    bound: dict[str, tuple[_Ident, tuple[tuple[int, int], ...]]]
    binds: list[str] = field(default_factory=list[str])
    """The paths to bind read-only: each entry, and for a symbolic link the file it leads to when that
    lies in a write root (elsewhere Landlock keeps it read-only already)."""


def _ident(st: os.stat_result, path: str) -> _Ident:
    link = ""
    if stat.S_ISLNK(st.st_mode):
        try:
            link = os.readlink(path)
        except OSError:
            link = "?"
    return (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode), link)


class ProtectedTree:
    """The protected entries under `roots` (real paths), kept current between bash runs."""

    def __init__(
        self, roots: Sequence[Path], names: Sequence[str], quarantine: Path, *, skip: Sequence[Path] = ()
    ) -> None:
        real = sorted({os.path.realpath(r) for r in roots}, key=len)
        self.roots = [r for i, r in enumerate(real) if not any(r.startswith(o.rstrip("/") + "/") for o in real[:i])]
        self.matcher = Matcher(names)
        self.quarantine = quarantine
        self._skip = {os.path.realpath(p) for p in skip}
        self._dirs: dict[str, _Dir] = {}
        self._known: dict[str, _Entry] = {}
        """Every protected entry as of the last look (kept current entry by entry, not rebuilt)."""
        self._changed: dict[str, _Entry | None] = {}
        """Entries added, replaced or gone since the last look -> what they were then (None: absent)."""
        self._unwatched: set[str] = set()
        """Directories inotify does not watch (no inotify, or its limit reached): compared by mtime."""
        self._runs: set[Run] = set()
        self._git_names = {k: v for k, v in GIT_DIR_PROTECTED.items() if v in self.matcher.names}
        """The entries of a git directory found by content (`gitdirs.is_git_dir`) that are protected."""
        self._hooks: set[str] = set()
        """The directories a repository's core.hooksPath names (protected like .git/hooks)."""
        self._includes: set[str] = set()
        """The files a repository's config includes (protected like .git/config)."""
        self._again: set[str] = set()
        """Cached directories to list again: a hooksPath directory below them was just learnt."""
        self.generation = 0
        """Counts the changes of the protected entries that exist (one added, replaced or gone): a
        long-lived process bound to `binds()` of an older generation lacks a bind (`current`)."""
        self._lock = threading.Lock()
        self._watcher = Watcher()
        self._first = True
        self._closing = False

    def prime(self) -> None:
        """The first look (a walk of every write root, ~40 µs a directory), ahead of the first bash call:
        run it in a thread when omega starts. `close` stops it early."""
        with self._lock:
            if self._first and not self._closing:
                self._refresh()
                self._changed = {}  # what exists at the start is nobody's doing

    def close(self) -> None:
        self._closing = True
        with self._lock:
            self._watcher.close()

    # -- runs ----------------------------------------------------------------------------------

    def begin(self) -> tuple[Run, list[Undone]]:
        """Look (undoing what running bashes did), then register a new run bound to what exists now."""
        with self._lock:
            undone = self._look()
            run = Run({p: (e.ident, self._chain(p)) for p, e in self._known.items() if e.full})
            run.binds.extend(self._binds(run.bound))
            self._runs.add(run)
            return run, undone

    def _binds(self, bound: dict[str, tuple[_Ident, tuple[tuple[int, int], ...]]]) -> list[str]:
        binds: list[str] = []
        for path, (ident, _) in bound.items():
            if ident[2] != stat.S_IFLNK:
                binds.append(path)
            elif self._in_roots(target := os.path.realpath(path)) and os.path.exists(target):
                binds.append(target)
        return binds

    def current(self, *, binds: bool = False) -> tuple[int, list[str]]:
        """`(generation, the paths to bind read-only)` as of now, for a process that is no bash run
        (the file tools' worker, which omega's checks keep off protected names, so nothing it does is
        undone): it counts for no attribution, and a look made here undoes nothing (what changed
        stays noted for the next bash run's look). `binds=False` skips the list (the check of an
        existing process). Blocking: a worker thread."""
        with self._lock:
            if self._first:
                self._refresh()
                self._changed = {}  # as `prime`: what exists at the start is nobody's doing
            elif self.matcher:
                self._refresh()
            if not binds:
                return self.generation, []
            return self.generation, self._binds({p: (e.ident, ()) for p, e in self._known.items() if e.full})

    def _in_roots(self, path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in self.roots)

    def check(self) -> list[Undone]:
        """Look now (a background shell is polled): undo what any running bash did."""
        with self._lock:
            return self._look()

    def end(self, run: Run) -> list[Undone]:
        """The run's process is gone: a last look while it still counts, then forget it."""
        with self._lock:
            try:
                return self._look()
            finally:
                self._runs.discard(run)

    # -- looking ---------------------------------------------------------------------------------

    def _look(self) -> list[Undone]:
        if not self.matcher:
            return []
        self._refresh()
        changed, self._changed = self._changed, {}
        # Entries that left their path: found again elsewhere (a directory above was renamed) they are
        # the same content, which bash could not change (it was bound read-only), not a new one.
        moved = {b.ident[:2] for p, b in changed.items() if b is not None and self._known.get(p) != b}
        undone: list[Undone] = []
        stamp = ""
        for path in sorted(changed):
            entry, before = self._known.get(path), changed[path]
            if entry is None or (before is not None and before.ident == entry.ident):
                continue  # gone, or back as it was
            if before is None and entry.ident[:2] in moved and entry.ident[2] != stat.S_IFLNK:
                continue
            if not self._attributable(path):
                continue  # the user's (or a program's outside bash): kept
            if not stamp:
                stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
            undone.extend(self._undo(path, entry, before, stamp))
        if undone:
            self._refresh()  # what the undo moved or put back
            self._changed = {}
        return undone

    def _attributable(self, path: str) -> bool:
        for run in self._runs:
            bound = run.bound.get(path)
            if bound is None or bound[0][2] == stat.S_IFLNK:  # not bound in it (or a link: not itself bound)
                return True
            if bound[1] != self._chain(path):  # a directory above it was moved: the binding moved with it
                return True
        return False

    def _chain(self, path: str) -> tuple[tuple[int, int], ...]:
        chain: list[tuple[int, int]] = []
        parent = os.path.dirname(path)
        while parent in self._dirs:
            dev, ino, _ = self._dirs[parent].stamp
            chain.append((dev, ino))
            if parent in self.roots:
                break
            parent = os.path.dirname(parent)
        return tuple(chain)

    def _undo(self, path: str, entry: _Entry, before: _Entry | None, stamp: str) -> list[Undone]:
        what = "created" if before is None else "replaced"
        kind = entry.ident[2]
        if entry.full and entry.pattern == ".git/config" and kind == stat.S_IFREG:
            problem = git_config_problem(Path(path))
            if problem is None:
                return []  # git init or clone: only git's own keys
            what += f": {problem}"
        elif entry.full and entry.pattern == ".git/hooks" and kind == stat.S_IFDIR:
            # git init copies its sample hooks, which it never runs: only the others go.
            return [
                self._move(os.path.join(path, name), "created in a new .git/hooks", stamp)
                for name in hooks_problem(Path(path))
            ]
        result = self._move(path, what, stamp)
        if before is not None and before.ident[2] == stat.S_IFLNK and result.error is None:
            try:
                os.symlink(before.ident[3], path)
            except OSError as exc:
                return [Undone(path, what, result.kept, f"the link to {before.ident[3]} was not restored: {exc}")]
        return [result]

    def _move(self, path: str, what: str, stamp: str) -> Undone:
        target = self.quarantine / stamp / path.lstrip("/")
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.move(path, target)
        except OSError as exc:
            return Undone(path, what, error=exc.strerror or str(exc))
        return Undone(path, what, str(target))

    # -- the directory cache -----------------------------------------------------------------------

    def _refresh(self) -> None:
        """Bring the directory cache up to date: changed directories (by inotify or mtime) are listed again."""
        if self._first:
            self._first = False
            for root in self.roots:
                self._visit(root, (), None, force=True)
            self._visit_again()
            return
        changed = self._watcher.changed()
        if OVERFLOW in changed:
            changed = set(self._dirs)
        for root in self.roots:
            if root not in self._dirs:  # a root made after omega started (the workspace, on first use)
                self._visit(root, (), None, force=True)
        for path in sorted(changed | self._unwatched, key=len):  # parents first: they may drop children
            directory = self._dirs.get(path)
            if directory is not None:
                self._visit(path, directory.parts, directory, force=path in changed)
        self._visit_again()

    def _visit_again(self) -> None:
        while self._again and not self._closing:
            path = self._again.pop()
            directory = self._dirs.get(path)
            if directory is not None:
                self._visit(path, directory.parts, directory, force=True)

    def _learn_hooks(self, path: str, names: set[str]) -> None:
        """Note the core.hooksPath directory of the repository `path` is the work tree of (or is)."""
        if ".git" not in names and not is_git_dir(names):
            return
        hooks = work_tree_hooks(path, names)
        if hooks is None or hooks in self._hooks or not self._in_roots(hooks):
            return
        self._hooks.add(hooks)
        learn(hooks, HOOKS_PATH)
        parent = os.path.dirname(hooks)
        if parent != path and parent in self._dirs:
            self._again.add(parent)  # listed before the name was known: list it again

    def _learn_includes(self, git_dir: str) -> None:
        """Note the files the config of the git directory `git_dir` includes (inside the roots)."""
        for included in config_includes(git_dir):
            if included in self._includes or not self._in_roots(included):
                continue
            self._includes.add(included)
            learn(included, INCLUDED)
            parent = os.path.dirname(included)
            if parent != git_dir and parent in self._dirs:
                self._again.add(parent)  # listed before the name was known: list it again

    def _visit(self, path: str, parts: tuple[str, ...], cached: _Dir | None, *, force: bool) -> None:
        todo: list[tuple[str, tuple[str, ...], _Dir | None]] = [(path, parts, cached)]
        while todo and not self._closing:
            path, parts, cached = todo.pop()
            try:
                st = os.lstat(path)
            except OSError:
                self._drop(path)
                continue
            if not stat.S_ISDIR(st.st_mode):
                self._drop(path)
                continue
            stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
            if cached is not None and cached.stamp == stamp and not force:
                continue  # polled and unchanged: nothing appeared or went in it
            force = False  # only the first directory was named by an event
            if self._watcher.add(path):
                self._unwatched.discard(path)
            else:
                self._unwatched.add(path)
            entries = self._list(path, st)
            if entries is None:
                self._drop(path)
                continue
            directory = _Dir(stamp, parts)
            names = {entry.name for entry in entries}
            git_dir = bool(self._git_names) and is_git_dir(names)
            if ".git/hooks" in self.matcher.names:
                self._learn_hooks(path, names)
            if git_dir and INCLUDED in self._git_names.values():
                self._learn_includes(path)
            for entry in entries:
                child = entry.path  # `path` joined with the name, made by scandir (os.path.join cost most)
                by_content = self._git_names.get(entry.name) if git_dir else None
                if by_content is None and child in self._hooks:
                    by_content = HOOKS_PATH
                if by_content is None and child in self._includes:
                    by_content = INCLUDED
                if by_content is not None and self._record(directory, entry, child, by_content, True):
                    continue  # a git directory's config or hooks whatever its name, a hooksPath directory
                if self.matcher.relevant(entry.name):
                    found = self.matcher.entry(parts, entry.name)
                    if found is not None and self._record(directory, entry, child, *found):
                        continue  # a protected directory is one entry: bash cannot change inside it
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir and child not in self._skip:
                    directory.subdirs[entry.name] = child
                    if child not in self._dirs:
                        todo.append((child, (*parts, entry.name), None))
            old = cached if cached is not None else self._dirs.get(path)
            if old is not None:
                for name, child in old.subdirs.items():
                    if directory.subdirs.get(name) != child:
                        self._drop(child)
            self._set_entries(old.protected if old is not None else {}, directory.protected)
            self._dirs[path] = directory

    def _set_entries(self, old: dict[str, _Entry], new: dict[str, _Entry]) -> None:
        """Replace one directory's protected entries in `_known`, noting each change for the next look."""
        for path in old.keys() | new.keys():
            before, after = old.get(path), new.get(path)
            if before == after:
                continue
            self._changed.setdefault(path, self._known.get(path))
            if (before is not None and before.full) or (after is not None and after.full):
                self.generation += 1
            if after is None:
                self._known.pop(path, None)
            else:
                self._known[path] = after

    @staticmethod
    def _record(directory: _Dir, entry: os.DirEntry[str], child: str, pattern: str, full: bool) -> bool:
        """Note a protected entry (or a link where a longer protected name starts); True: do not descend."""
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return True
        if full or stat.S_ISLNK(st.st_mode):
            directory.protected[child] = _Entry(_ident(st, child), pattern, full)
        return full

    def _list(self, path: str, st: os.stat_result) -> list[os.DirEntry[str]] | None:
        try:
            with os.scandir(path) as it:
                return list(it)
        except PermissionError:
            pass
        except OSError:
            return None
        # A directory bash made unreadable (`chmod 300`) could hide a protected name from this look while
        # a program that knows the name still opens it: make it readable again (it is the user's own).
        try:
            if st.st_uid == os.geteuid():
                os.chmod(path, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
            with os.scandir(path) as it:
                return list(it)
        except OSError:
            return None

    def _drop(self, path: str) -> None:
        gone = self._dirs.pop(path, None)
        self._watcher.forget(path)
        self._unwatched.discard(path)
        if gone is not None:
            self._set_entries(gone.protected, {})
            for child in gone.subdirs.values():
                self._drop(child)
