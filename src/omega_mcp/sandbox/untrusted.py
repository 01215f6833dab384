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
default cwd end that walk there. Pure path arithmetic plus those markers; nothing here knows MCP.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from omega_mcp.sandbox.hidden import tilde
from omega_mcp.sandbox.policy import SERVERS_DIR_NAME, SandboxPolicy

__all__ = ["LaunchGuard", "default_server_cwd"]

LAUNCHER_STOPS = ("node_modules", "uv.toml")
"""Made (empty) in a server's default cwd: `npm exec` and `uv` look no further up for packages or settings."""


def default_server_cwd(home: Path, server_name: str) -> Path:
    """`$OMEGA_HOME/servers/NAME`: where a stdio server starts unless its `cwd` says otherwise."""
    return home / SERVERS_DIR_NAME / server_name


def _spellings(path: Path) -> tuple[Path, ...]:
    return tuple(dict.fromkeys((Path(os.path.normpath(path)), Path(os.path.realpath(path)))))


@dataclass(frozen=True, slots=True)
class LaunchGuard:
    """Where a model may write, as seen by the servers omega starts (see the module docstring)."""

    home: Path
    roots: tuple[Path, ...]
    """Every directory a tool may write beneath (lexical and real spellings)."""
    exempt: tuple[Path, ...]
    """omega's own files inside those roots, which no tool may write (its code, config, servers)."""

    @classmethod
    def of(cls, policy: SandboxPolicy) -> LaunchGuard:
        """The guard of this omega's sandbox (the same roots whatever the mode: in rwx mode the model
        may write anywhere, and a server living in the workspace is still the first thing it rewrites)."""
        roots = (policy.workspace, policy.home, policy.tmp_dir, policy.scratch_dir, *policy.write_roots)
        roots = tuple(dict.fromkeys(s for r in roots for s in _spellings(r)))
        exempt = tuple(dict.fromkeys(s for p in policy.protected_paths for s in _spellings(p)))
        return cls(home=policy.home, roots=roots, exempt=exempt)

    def widened(self, roots: Iterable[Path]) -> LaunchGuard:
        """This guard with more write roots (the hub clients' own workspaces, `server/profiles.py`)."""
        more = tuple(s for r in roots for s in _spellings(r))
        return LaunchGuard(self.home, tuple(dict.fromkeys((*self.roots, *more))), self.exempt)

    def default_cwd(self, server_name: str) -> Path:
        """`$OMEGA_HOME/servers/NAME`."""
        return default_server_cwd(self.home, server_name)

    def writable_root(self, path: Path) -> Path | None:
        """The write root a model could plant `path` in (by either spelling), or None."""
        for spelling in _spellings(path):
            if any(spelling.is_relative_to(e) for e in self.exempt):
                continue
            for root in self.roots:
                if spelling.is_relative_to(root):
                    return root
        return None

    def problem(self, server_name: str, program: str, cwd: Path, *, cwd_configured: bool) -> str | None:
        """Why this server must not start (its `cwd` or program lies in a write root), naming the setting."""
        key = f"servers.{server_name}"
        root = self.writable_root(cwd) if cwd_configured else None
        if root is not None:
            return (
                f"not started: {key}.cwd ({tilde(cwd)}) lies inside {tilde(root)}, where omega's tools may write, "
                "so a model could plant code the server imports at its start; use a directory outside the "
                f"write roots, or remove `cwd` (the default is {tilde(self.default_cwd(server_name))})"
            )
        root = self.writable_root(Path(program))
        if root is not None:
            return (
                f"not started: {key}.command runs {tilde(Path(program))}, inside {tilde(root)}, where omega's tools "
                "may write, so a model could replace it; install the server outside the write roots"
            )
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
