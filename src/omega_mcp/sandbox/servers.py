"""Downstream stdio servers under omega's sandbox: `[sandbox] servers` and `[servers.NAME] sandbox`.

A confined server gets a `SandboxPolicy` of its own (`server_policy`) and starts through the same
trampoline as bash (`launch.confined_argv`): its own user, PID and mount namespaces, Landlock that
lets it write only its cwd (`$OMEGA_HOME/servers/NAME` unless `cwd` is set), a private /tmp, the
caches its launcher needs (`LAUNCHER_CACHES`) and its declared `write_roots` (with `read_only`,
nothing but its /tmp), its own empty network namespace unless `network = true`, and the same hidden
paths as bash plus its own `hide`, minus `unhide` (omega's token and state always, and the other
servers' directories). A server whose launch reaches into a write root is confined whatever
`[sandbox] servers` says (`server_policy` with a guard: `sandbox/untrusted.py`). Signals and abstract
sockets are scoped by Landlock, and the host's pathname UNIX sockets outside its roots are covered.
`explain_denial` turns the last words of a server that died under confinement into the setting to
relax. Nothing here knows MCP.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from omega_mcp.config import SandboxConfig, ServerConfig, ServerSandboxConfig, ServersSection
from omega_mcp.sandbox.hidden import default_hidden, effective_hidden, tilde
from omega_mcp.sandbox.launch import confined_argv
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.untrusted import LaunchGuard

__all__ = [
    "LAUNCHERS",
    "PRIVATE_CACHES",
    "confined_servers",
    "describe_confinement",
    "explain_denial",
    "moved_caches",
    "offline_launcher",
    "reaches",
    "server_argv",
    "server_dir",
    "server_environment",
    "server_policy",
]

LAUNCHERS = ("npx", "npm", "pnpm", "bunx", "uvx", "uv", "pipx")
"""Package launchers: they download the server at start (so they need the network) into a cache."""
PRIVATE_CACHES: dict[str, str] = {
    "npm_config_cache": ".npm",
    "XDG_CACHE_HOME": ".cache",
    "XDG_DATA_HOME": ".local/share",
    "PIPX_HOME": ".local/pipx",
    "BUN_INSTALL_CACHE_DIR": ".bun/cache",
}
"""Where a confined server's package caches go, inside its own directory: `npx`, `uvx`, `pipx` and
`bunx` follow these variables. A cache shared with the user's own launchers would let a confined
server plant code (`~/.npm/_npx/.../node_modules`) that an unconfined `npx` runs later. A variable
the server's `env` sets itself wins, and that directory is then writable for it."""

# A path refused by the OS, as Node, Python, Go and the C library word it.
_DENIED = re.compile(r"EACCES|EPERM|EROFS|permission denied|operation not permitted|read-only file system", re.I)
_QUOTED_PATH = re.compile(r"""['"](/[^'"]*)['"]""")
_BARE_PATH = re.compile(r"(?:^|[\s:])(/[^\s:'\"]+)")
_REFUSED = re.compile(r"ECONNREFUSED|connection refused", re.IGNORECASE)
_OFFLINE = re.compile(
    r"ENETUNREACH|EAI_AGAIN|ENOTFOUND|network is unreachable|name resolution|name or service not known|"
    r"nodename nor servname|getaddrinfo|no address associated",
    re.I,
)


def server_dir(home: Path, name: str) -> Path:
    """`$OMEGA_HOME/servers/NAME`: a confined server's own directory (its default cwd and its caches)."""
    return home / "servers" / name


def moved_caches(env: Mapping[str, str]) -> tuple[Path, ...]:
    """The cache directories a server's own `env` chose (`PRIVATE_CACHES` variables it sets)."""
    return tuple(dict.fromkeys(Path(os.path.abspath(os.path.expanduser(env[k]))) for k in PRIVATE_CACHES if env.get(k)))


def server_environment(policy: SandboxPolicy, environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` with the package caches the server did not place itself in its own directory."""
    own = server_dir(policy.home, policy.server_name or "")
    private = {k: str(own / sub) for k, sub in PRIVATE_CACHES.items() if not environment.get(k)}
    return {**environment, **private}


def server_policy(section: ServersSection, name: str, guard: LaunchGuard | None = None) -> SandboxPolicy | None:
    """The sandbox of `[servers.NAME]`, or None when it runs unconfined (or is a remote server).

    With `guard`, a server whose launch reaches into a write root (`LaunchGuard.reach`) is confined
    even where `[sandbox] servers = "none"`; with `sandbox = "none"` on it, it stays None here and the
    guard refuses to start it. A `cwd` inside a write root is read-only for the server (it writes its
    own directory, /tmp and its `write_roots`): what it wrote there would run next unconfined.
    """
    entry = section.servers[name]
    if entry.command is None:
        return None
    settings = entry.confinement(section.sandbox.servers)
    if settings is None and entry.sandbox != "none" and guard is not None and reaches(guard, name, entry):
        settings = ServerSandboxConfig()
    if settings is None:
        return None
    home, path = section.place.home, section.place.path
    base = path.parent if path is not None else None
    sandbox = section.sandbox
    hidden = effective_hidden((*sandbox.hide, *settings.hide), (*sandbox.unhide, *settings.unhide), base)
    # The other confined servers' directories, also those not made yet: a server started first must
    # not see the memory file of one started after it (`server_argv` makes them, to cover them).
    others = [server_dir(home, n) for n, s in section.servers.items() if n != name and _confined(s, sandbox)]
    # The config holds the other servers' `env` and `headers` (their keys): not for this one to read.
    configs = [p for p in (path, home / "servers.toml") if p is not None]
    own = server_dir(home, name)
    return SandboxPolicy(
        mode="rx" if settings.network else "sandbox",
        home=home,
        workspace=entry.cwd or own,
        write_roots=() if settings.read_only else (own, *settings.write_roots, *moved_caches(entry.env)),
        config_path=path,
        require_os_sandbox=sandbox.require_os_sandbox,
        max_processes=sandbox.max_processes,
        max_file_size_mb=sandbox.max_file_size_mb,
        max_open_files=sandbox.max_open_files,
        memory_mb=sandbox.memory_mb,
        config_candidates=((Path.cwd() / "servers.toml").absolute(),),
        hidden=tuple(dict.fromkeys((*hidden, *others, *configs))),
        server_name=name,
        read_only=settings.read_only,
        cwd_read_only=entry.cwd is not None and guard is not None and guard.writable_root(entry.cwd) is not None,
    )


def reaches(guard: LaunchGuard, name: str, entry: ServerConfig) -> bool:
    """Whether the launch of stdio server `name` reaches into one of `guard`'s write roots."""
    assert entry.command is not None
    cwd = entry.cwd if entry.cwd is not None else guard.default_cwd(name)
    program = guard.program_path(entry.command, entry.env, cwd)
    return guard.reach(program, cwd, cwd_configured=entry.cwd is not None, args=entry.args, env=entry.env) is not None


def confined_servers(section: ServersSection, guard: LaunchGuard | None = None) -> dict[str, bool]:
    """Each stdio server of `config`, in order: whether it runs confined (with `guard`: also those
    confined because their launch reaches into a write root)."""
    return {
        n: _confined(s, section.sandbox) or (guard is not None and server_policy(section, n, guard) is not None)
        for n, s in section.servers.items()
        if s.command is not None
    }


def _confined(entry: ServerConfig, sandbox: SandboxConfig) -> bool:
    """Whether a server runs confined (and so has `$OMEGA_HOME/servers/NAME`)."""
    return entry.command is not None and entry.confinement(sandbox.servers) is not None


def server_argv(policy: SandboxPolicy, program: str, args: Sequence[str]) -> list[str]:
    """The argv that starts `program` (an absolute path: `spawn` looks it up on the server's PATH)
    confined by `policy`; creates its own directory and its write roots. Start it with
    `server_environment(policy, environment)`.

    Raises:
        OSError: a directory it needs cannot be created.
        SandboxUnavailableError: the OS sandbox cannot be applied here.
    """
    server_dir(policy.home, policy.server_name or "").mkdir(mode=0o700, parents=True, exist_ok=True)
    for root in policy.write_roots:  # declared: made if missing (a path that does not exist gets no rule)
        with contextlib.suppress(OSError):
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The other servers' directories (a memory file, a clone) are theirs alone: those of the servers
    # in the config (made now if need be: a path that does not exist cannot be covered), and any other.
    for other in policy.hidden:
        if other.parent == policy.servers_dir:
            other.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        listed = policy.servers_dir.iterdir()
        siblings = tuple(p for p in listed if p.name != policy.server_name and p not in policy.hidden)
    except OSError:
        siblings = ()
    if siblings:  # left by servers no longer in the config
        policy = dataclasses.replace(policy, hidden=(*policy.hidden, *siblings))
    return confined_argv(policy, [program, *args])


def describe_confinement(policy: SandboxPolicy | None) -> dict[str, object]:
    """How one server runs, for `tools --json`: `{"confined": false}` or what it may do."""
    if policy is None:
        return {"confined": False}
    return {
        "confined": True,
        "network": policy.mode == "rx",
        "cwd": str(policy.workspace),
        "write_roots": [str(r) for r in policy.bash_write_roots if r != policy.tmp_dir],
        "private_tmp": str(policy.tmp_dir),
        "read_only": policy.read_only,
        "hidden": [str(p) for p in policy.hidden_paths],
    }


def explain_denial(policy: SandboxPolicy, lines: Sequence[str]) -> str | None:
    """What the sandbox refused a server, from its last stderr lines, and the setting that allows it.

    E.g. `denied write to ~/.npm (the server is confined): add it to servers.x.sandbox.write_roots`.
    None when the lines show no refusal.
    """
    key = f"servers.{policy.server_name}.sandbox"
    for line in reversed(lines):
        if _DENIED.search(line):
            found = _QUOTED_PATH.search(line) or _BARE_PATH.search(line)
            if found is None:
                continue
            return _denied_path(policy, Path(os.path.normpath(found.group(1))), key)
    if policy.mode == "sandbox" and any(_REFUSED.search(line) for line in lines):
        return (
            f"connection refused: the server is confined without network, so 127.0.0.1 is its own loopback, "
            f"not this machine's: set {key}.network = true to reach a service here"
        )
    if policy.mode == "sandbox" and any(_OFFLINE.search(line) for line in lines):
        return f"no network (the server is confined): set {key}.network = true if it needs one"
    return None


def offline_launcher(policy: SandboxPolicy, command: str) -> str | None:
    """For a confined server without network started by a package launcher (which downloads at start)."""
    launcher = os.path.basename(command)
    if policy.mode != "sandbox" or launcher not in LAUNCHERS:
        return None
    return (
        f"{launcher} fetches the server's package at start, and the server is confined without network: "
        f"set servers.{policy.server_name}.sandbox.network = true"
    )


def _denied_path(policy: SandboxPolicy, path: Path, key: str) -> str:
    shown = tilde(path)
    for hidden in policy.hidden_paths:
        if path.is_relative_to(hidden):
            if hidden.parent == policy.servers_dir:
                return f"{shown} belongs to another server: a confined server sees only its own directory"
            if hidden in (policy.config_path, policy.home / "servers.toml", policy.token_file, policy.state_dir):
                return f"{shown} is omega's own configuration or state: no confined server may read it"
            if hidden in default_hidden():
                return f"{shown} is hidden from the server (a default secret): add {tilde(hidden)!r} to {key}.unhide"
            return f"{shown} is hidden from the server: remove {tilde(hidden)!r} from `hide`"
    if policy.read_only:
        return f"denied write to {shown} (the server is confined, read_only): set {key}.read_only = false"
    directory = path if path.is_dir() else path.parent
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent
    if directory == Path.home() or len(directory.parts) <= 2:  # never the whole home or /srv: the path itself
        directory = path
    return f"denied write to {shown} (the server is confined): add {tilde(directory)!r} to {key}.write_roots"
