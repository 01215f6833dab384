"""What bash's mount namespace must bind, pin and cover: planned from the policy, for `launch.py`.

`protection` keeps omega's own files (home, config, the code the server runs) read-only where they
lie inside a writable root: a read-only bind each, the writable roots inside it bound back (holes),
and every directory between the outermost enclosing root and it pinned (a bind onto itself: a mount
point cannot be renamed away and recreated). `hiding` lists what to cover: the policy's hidden paths
that exist and the well-known socket places, and pins every directory between a write root and a
hidden path inside it, so the secret stays hidden by identity: a rename above it fails (EBUSY)
instead of moving it out from under its name. `$OMEGA_HOME/state` and `$OMEGA_HOME/run` are made
(0700) before they are looked for (`own_dirs`), so they are covered whether or not anything was in
them when the sandbox started: an OAuth token saved later (`omega-mcp login` while `serve` runs) or
the hub's socket lands under the cover. Otherwise pure path arithmetic and `lexists`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = [
    "SOCKET_PLACES",
    "hiding",
    "own_dirs",
    "own_files",
    "protection",
    "real",
    "real_own",
    "real_roots",
    "within",
]

SOCKET_PLACES = ("/run/user", "/run/dbus", "/tmp/.X11-unix", "/var/run/docker.sock", "/run/docker.sock")
"""Where host services keep UNIX sockets: covered (outside the roots) whatever /proc/net/unix lists."""


def within(path: Path, root: Path) -> bool:
    """`path` is `root` or below it: both absolute and normalised, compared by components (as strings:
    `Path.is_relative_to` costs ten times more, and every bash call makes hundreds of these)."""
    p, r = str(path), str(root)
    return p == r or p.startswith(r if r.endswith("/") else r + "/")


def real(path: Path) -> Path:
    return Path(os.path.realpath(path))


@functools.lru_cache(maxsize=1024)
def real_own(path: Path) -> Path:
    """`real` of omega's own files and the hidden secrets, resolved once: bash cannot move them (they
    are read-only or hidden for it), and bash calls would pay dozens of realpath() walks each."""
    return real(path)


def own_files(policy: SandboxPolicy) -> list[Path]:
    """What bash must never change: omega's home and config, and the code the server runs."""
    candidates = [policy.home, policy.config_path, *policy.own_code]
    return [p for p in dict.fromkeys(real_own(c) for c in candidates if c is not None) if p.exists()]


@functools.lru_cache(maxsize=1024)
def _pins(target: Path, real_roots: tuple[Path, ...]) -> tuple[tuple[str, Path], ...]:
    """A pin for every directory strictly between the outermost root holding `target` and `target`
    (paths alone, no file system: kept, as every bash launch asks the same)."""
    top = min((r for r in real_roots if within(target, r)), key=lambda r: len(r.parts))
    return tuple(("pin", p) for p in reversed(target.parents) if top in p.parents)


def real_roots(roots: tuple[Path, ...]) -> dict[Path, Path]:
    """Each root -> `real` of it: where it lies now (computed once for a plan)."""
    return {root: real(root) for root in roots}


def protection(
    policy: SandboxPolicy, roots: tuple[Path, ...], reals: dict[Path, Path] | None = None
) -> tuple[tuple[tuple[str, Path], ...], tuple[Path, ...], list[str]]:
    """(binds, own files bash could still create, warnings) for omega's own files inside `roots`.

    The server's interpreter prefix and package count as omega's files: a sandboxed command that
    could rewrite them would run its code outside the sandbox on the next call.
    """
    reals = reals or {}
    real_roots = tuple(dict.fromkeys(reals.get(r) or real(r) for r in roots))
    targets: list[Path] = []
    for path in sorted(own_files(policy), key=lambda p: len(p.parts)):
        if any(within(path, r) for r in real_roots) and not any(within(path, t) for t in targets):
            targets.append(path)
    binds: list[tuple[str, Path]] = []
    warnings: list[str] = []
    for target in targets:
        binds.extend(_pins(target, real_roots))
        holes = sorted((r for r in real_roots if target in r.parents), key=lambda r: len(r.parts))
        binds.extend(("pin", r) for r in holes)
        binds.append(("protect", target))
        if target in real_roots:
            warnings.append(f"write root {target} holds omega's own files, so bash gets it read-only")
    unique = tuple(dict.fromkeys(binds))  # two targets may share ancestors: bind each once
    # A servers.toml that does not exist cannot be bound; omega would load one created in the
    # directory it starts from, so say so when bash could create it.
    home = real(policy.home)
    unprotected = [
        candidate
        for candidate in (real(Path("servers.toml")), home / "servers.toml")
        if not candidate.exists()
        and any(within(candidate, r) for r in real_roots)
        and not any(within(candidate, t) for t in targets)
    ]
    return unique, tuple(unprotected), warnings


def own_dirs(policy: SandboxPolicy, warnings: list[str]) -> None:
    """Make `$OMEGA_HOME/state` and `$OMEGA_HOME/run` (0700) if missing: a directory that exists is
    covered, and what appears in it later stays under the cover. A failure is a warning."""
    for directory in (policy.state_dir, policy.run_dir):
        if os.path.isdir(directory):
            continue
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            warnings.append(f"{directory} could not be made ({exc.strerror}): what appears there later is not hidden")


_Placing = tuple[bool, tuple[tuple[str, Path], ...]]
"""Where a hidden path that exists lies against the write roots: (it holds a root, the pins to keep it)."""


@functools.lru_cache(maxsize=64)
def _placings(real_roots: tuple[Path, ...]) -> dict[Path, _Placing]:
    """The hidden paths already placed against these roots, filled in by `hiding` (pure path arithmetic
    on `real_own`, which is resolved once a path exists): every bash launch asks again for the same
    few dozen paths. One dict per set of roots, kept like `_pins`."""
    return {}


def _place(path: Path, real_roots: tuple[Path, ...]) -> _Placing:
    where = real_own(path)
    if any(within(r, where) for r in real_roots):
        return True, ()
    return False, (_pins(where, real_roots) if any(within(where, r) for r in real_roots) else ())


@functools.lru_cache(maxsize=64)
def _socket_places(real_roots: tuple[Path, ...]) -> tuple[Path, ...]:
    """The socket places neither inside a write root nor holding one: the ones to cover where they exist."""
    places: list[Path] = []
    for place in map(Path, SOCKET_PLACES):
        where = real_own(place)
        if not any(within(where, r) or within(r, where) for r in real_roots):
            places.append(place)
    return tuple(places)


def hiding(
    policy: SandboxPolicy, roots: tuple[Path, ...], warnings: list[str], reals: dict[Path, Path] | None = None
) -> tuple[tuple[Path, ...], tuple[tuple[str, Path], ...]]:
    """(what to cover, pins): the policy's hidden paths and the well-known socket places that exist
    (`own_dirs` first), and the directories between a write root and a hidden path inside it. A place
    that holds a write root is not covered (it would hide the root too)."""
    if policy.mode != "rwx":
        own_dirs(policy, warnings)
    reals = reals or {}
    real_roots = tuple(reals.get(r) or real(r) for r in roots)
    placings = _placings(real_roots)
    found: list[Path] = []
    pins: list[tuple[str, Path]] = []
    for path in policy.hidden_paths:
        if not os.path.lexists(path):
            continue  # placed only once it exists: `real_own` keeps what it resolves
        placing = placings.get(path)
        if placing is None:
            placing = placings[path] = _place(path, real_roots)
        holds, keep = placing
        if holds:
            warnings.append(f"{path} is not hidden from bash: it holds a write root")
            continue
        found.append(path)
        pins.extend(keep)
    found.extend(place for place in _socket_places(real_roots) if os.path.lexists(place))
    return tuple(dict.fromkeys(found)), tuple(dict.fromkeys(pins))
