"""Nothing omega starts runs from a write root: where a stdio server may start, and from what.

Everything a model may write is untrusted input to everything that runs later. A downstream server
is such a later thing: started in the workspace, `python -m pkg` imports a planted `pkg.py` (the
script directory, here the cwd, comes first on `sys.path`) and `npx -y pkg` runs a planted
`node_modules/.bin/pkg`. So a `LaunchGuard` (built from the sandbox policy of this omega) gives
every stdio server, confined or not, `$OMEGA_HOME/servers/NAME` as its default cwd, refuses a
server whose `cwd` or program lies inside a write root (workspace, `write_roots`, the writable parts
of `$OMEGA_HOME`, the tools' `/tmp`; omega's own files inside them are read-only for the tools and
do not count), drops write-root directories from the server's `PATH` and sets `PYTHONSAFEPATH=1`.
Launchers look for packages and settings from their cwd upwards (`npm exec`: the nearest directory
with `package.json` or `node_modules`; `uv`: the nearest `uv.toml`), and `$OMEGA_HOME` above the
server's own directory is writable by the file tools: an empty `node_modules` and `uv.toml` in the
default cwd end that walk there.

A server whose launch reaches into a write root (`reach`: its program, its `cwd`, or any argument or
`env` value that names a path there: `python3 ~/proj/server.py`, `--directory=X`, `PYTHONPATH` lists,
`~` and relative paths against the server's cwd, symbolic links resolved) runs the model's next edit
at its next start: it is always confined (`sandbox/servers.py` confines it even where `[sandbox]
servers = "none"`), and `sandbox = "none"` on it is refused (`problem`). Only the host's /tmp itself is
not a write root for arguments and `env` values: in sandbox and rx modes the tools write a private
/tmp, and in rwx mode they write anywhere, so no path check could be complete there (a server's
program or `cwd` in /tmp still counts). Pure path arithmetic plus those markers; nothing here knows MCP.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from omega_mcp.sandbox.hidden import tilde
from omega_mcp.sandbox.policy import SERVERS_DIR_NAME, SandboxPolicy

__all__ = ["LaunchGuard", "Reach", "default_server_cwd", "named_paths"]

LAUNCHER_STOPS = ("node_modules", "uv.toml")
"""Made (empty) in a server's default cwd: `npm exec` and `uv` look no further up for packages or settings."""


def default_server_cwd(home: Path, server_name: str) -> Path:
    """`$OMEGA_HOME/servers/NAME`: where a stdio server starts unless its `cwd` says otherwise."""
    return home / SERVERS_DIR_NAME / server_name


def _spellings(path: Path) -> tuple[Path, ...]:
    return tuple(dict.fromkeys((Path(os.path.normpath(path)), Path(os.path.realpath(path)))))


def named_paths(value: str, cwd: Path) -> list[Path]:
    """The paths an argument or `env` value may name: itself, the part after `=` of `--flag=X` (or
    `NAME=X`), each entry of a `:`-separated list; `~` expanded, relative ones against `cwd` when
    they look like a path (a `/` or a leading `.`) or exist there. Absolute, not resolved."""
    pieces = [value]
    if "=" in value:
        pieces.append(value.split("=", 1)[1])
    found: list[Path] = []
    for piece in pieces:
        for raw in piece.split(os.pathsep):
            if not raw or "\0" in raw:
                continue
            item = os.path.expanduser(raw)
            if os.path.isabs(item):
                found.append(Path(item))
            elif "/" in item or item.startswith(".") or os.path.lexists(cwd / item):
                found.append(cwd / item)
    return list(dict.fromkeys(found))


@dataclass(frozen=True, slots=True)
class Reach:
    """What of a server's launch lies in a write root: the setting (`cwd`, `command`, `args[1]`,
    `env.PYTHONPATH`), the path it names, and the root."""

    setting: str
    path: Path
    root: Path


@dataclass(frozen=True, slots=True)
class LaunchGuard:
    """Where a model may write, as seen by the servers omega starts (see the module docstring)."""

    home: Path
    roots: tuple[Path, ...]
    """Every directory a tool may write beneath (lexical and real spellings)."""
    exempt: tuple[Path, ...]
    """omega's own files inside those roots, which no tool may write (its code, config, servers)."""
    host_tmp: tuple[Path, ...] = ()
    """The host's /tmp (both spellings): a write root for a server's program and cwd, not its arguments."""

    @classmethod
    def of(cls, policy: SandboxPolicy) -> LaunchGuard:
        """The guard of this omega's sandbox (the same roots whatever the mode: in rwx mode the model
        may write anywhere, and a server living in the workspace is still the first thing it rewrites)."""
        roots = (policy.workspace, policy.home, policy.tmp_dir, policy.scratch_dir, *policy.write_roots)
        roots = tuple(dict.fromkeys(s for r in roots for s in _spellings(r)))
        exempt = tuple(dict.fromkeys(s for p in policy.protected_paths for s in _spellings(p)))
        return cls(home=policy.home, roots=roots, exempt=exempt, host_tmp=_spellings(policy.tmp_dir))

    def widened(self, roots: Iterable[Path]) -> LaunchGuard:
        """This guard with more write roots (the hub clients' own workspaces, `server/profiles.py`)."""
        more = tuple(s for r in roots for s in _spellings(r))
        return LaunchGuard(self.home, tuple(dict.fromkeys((*self.roots, *more))), self.exempt, self.host_tmp)

    def default_cwd(self, server_name: str) -> Path:
        """`$OMEGA_HOME/servers/NAME`."""
        return default_server_cwd(self.home, server_name)

    def writable_root(self, path: Path, *, arguments: bool = False) -> Path | None:
        """The write root a model could plant `path` in (by either spelling), or None. `arguments`: not
        the host's /tmp itself (see the module docstring)."""
        for spelling in _spellings(path):
            if any(spelling.is_relative_to(e) for e in self.exempt):
                continue
            for root in self.roots:
                if arguments and root in self.host_tmp:
                    continue
                if spelling.is_relative_to(root):
                    return root
        return None

    def reach(
        self,
        program: str,
        cwd: Path,
        *,
        cwd_configured: bool,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> Reach | None:
        """The first part of a launch that lies in a write root (see the module docstring), or None.
        `program` is the path the command runs (`program_path`), `env` the server's own `env` only."""
        if cwd_configured and (root := self.writable_root(cwd)) is not None:
            return Reach("cwd", cwd, root)
        if (root := self.writable_root(Path(program))) is not None:
            return Reach("command", Path(program), root)
        named = [(f"args[{i}]", value) for i, value in enumerate(args)]
        named += [(f"env.{key}", value) for key, value in (env or {}).items()]
        for setting, value in named:
            for path in named_paths(value, cwd):
                root = self.writable_root(path, arguments=True)
                if root is not None:
                    return Reach(setting, path, root)
        return None

    def program_path(self, command: str, env: Mapping[str, str] | None, cwd: Path) -> str:
        """The absolute path `command` runs (looked up on the server's `PATH` as the guard leaves it),
        or `command` as written (joined to `cwd` when it has a `/`) when it is not found."""
        if os.sep in command:
            return os.path.join(cwd, os.path.expanduser(command))
        path = self.environment({"PATH": os.environ.get("PATH", os.defpath), **(env or {})})["PATH"]
        found = shutil.which(command, path=path)
        return os.path.abspath(found) if found is not None else command

    def problem(
        self,
        server_name: str,
        program: str,
        cwd: Path,
        *,
        cwd_configured: bool,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        confined: bool = False,
    ) -> str | None:
        """Why this server must not start, naming the setting: its launch reaches into a write root and
        it would run unconfined (`sandbox = "none"`), or a `node_modules` a model could plant lies above
        its cwd. A confined server may reach into the write roots: what it runs is confined."""
        key = f"servers.{server_name}"
        reach = self.reach(program, cwd, cwd_configured=cwd_configured, args=args, env=env)
        if reach is not None and not confined:
            return (
                f'not started: {key}.sandbox = "none", but {key}.{reach.setting} names {tilde(reach.path)}, inside '
                f"{tilde(reach.root)}, where omega's tools may write, so a model could change what the server runs "
                f'at its next start; such a server runs only confined: remove sandbox = "none" from [{key}], '
                "or move what it runs outside the write roots"
            )
        if reach is not None:
            return None
        above = self.planted_above(cwd)
        if above is not None:
            return (
                f"not started: {tilde(above)} lies above the server's cwd ({key}.cwd, {tilde(cwd)}) where omega's "
                "tools may write, and npm runs the programs of every node_modules/.bin above its cwd; remove it, "
                "or give the server another cwd"
            )
        return None

    def planted_above(self, cwd: Path) -> Path | None:
        """A `node_modules` in a directory above `cwd` that a model could have written, or None: npm puts
        the `node_modules/.bin` of every directory from the cwd up to `/` on a script's `PATH`."""
        for directory in Path(os.path.normpath(cwd)).parents:
            found = directory / "node_modules"
            if os.path.lexists(found) and self.writable_root(found) is not None:
                return found
        return None

    def environment(self, environment: Mapping[str, str]) -> dict[str, str]:
        """`environment` with `PYTHONSAFEPATH=1` (unless set) and no `PATH` entry a model could plant in."""
        env = {"PYTHONSAFEPATH": "1", **environment}
        if "PATH" in env:
            kept = [
                p for p in env["PATH"].split(os.pathsep) if os.path.isabs(p) and self.writable_root(Path(p)) is None
            ]
            env["PATH"] = os.pathsep.join(kept)
        return env

    def prepare(self, server_name: str, cwd: Path) -> None:
        """Make the default cwd (`$OMEGA_HOME/servers/NAME`) and its launcher stops; nothing for another cwd."""
        if cwd != self.default_cwd(server_name):
            return
        cwd.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            (cwd / LAUNCHER_STOPS[0]).mkdir(mode=0o700, exist_ok=True)
            if not (cwd / LAUNCHER_STOPS[1]).exists():
                (cwd / LAUNCHER_STOPS[1]).write_text("# omega-mcp: uv looks no further up than here\n")
