"""The sandbox policy: which directories each kind of tool may write, and what is never writable.

Pure data, no I/O beyond `Path` arithmetic: the file tools (`sandbox/paths.py`) enforce it with
symlink-safe opens, and the bash trampoline (`sandbox/child/exec.py`) turns it into Landlock rules.
The blocklist (system directories and omega's own config/state) applies in every mode, so a
model can never widen its own sandbox or register a new server.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omega_mcp.config import ConfigPlace, OnDenied, SandboxConfig, SandboxMode
from omega_mcp.sandbox.hidden import default_hidden, effective_hidden, effective_protected

__all__ = [
    "CLIENTS_DIR_NAME",
    "HUB_CLIENT",
    "MAX_SHELLS_PER_CLIENT",
    "MAX_SHELLS_PER_SESSION",
    "SYSTEM_DIRS",
    "SandboxPolicy",
    "interpreter_dirs",
]

SYSTEM_DIRS: tuple[Path, ...] = tuple(
    Path(p)
    for p in ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/sys", "/proc", "/dev")
)
"""Never writable by the file tools (`/dev/null` excepted), in every mode. `/lib*` is listed out."""

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def interpreter_dirs() -> tuple[Path, ...]:
    """What omega imports and runs from: its interpreter's prefixes (a venv: site-packages, `.pth`
    files, the console script), its package directory (an editable install's source) and every other
    directory on `sys.path` (user site-packages, `PYTHONPATH`), but the current directory, which
    `python -m omega_mcp` puts first and `__main__` takes off again."""
    cwd = Path.cwd()
    paths = [Path(sys.prefix), Path(sys.base_prefix), _PACKAGE_DIR]
    paths += [Path(entry) for entry in sys.path if entry and Path(entry).is_dir() and Path(entry) != cwd]
    return tuple(dict.fromkeys(Path(os.path.realpath(p)) for p in paths))


TOKEN_FILE_NAME = "token"  # noqa: S105 - a file name, not a secret
STATE_DIR_NAME = "state"
RUN_DIR_NAME = "run"
SCRATCH_DIR_NAME = "scratch"
SERVERS_DIR_NAME = "servers"
SESSIONS_DIR_NAME = "sessions"
PRIVATE_TMP_DIR_NAME = "tmp"
MAX_SHELLS_PER_SESSION = 8
"""Background shells that may run at once per client session (`builtin/shells.py`)."""
QUARANTINE_DIR_NAME = "quarantine"
MAX_SHELLS_PER_CLIENT = 8
"""Background shells that may run at once per client, over all its sessions (`builtin/shells.py`)."""
CLIENTS_DIR_NAME = "clients"
"""`$OMEGA_HOME/clients`: one tree per client (`SandboxPolicy.client_dir`)."""
HUB_CLIENT = "@hub"
"""The client of plain `serve`, stdio and the hub's own token: a name no `[hub.clients.NAME]` can have
(those are letters, digits, '-' and '_'), so its tree is never another client's."""


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """The effective sandbox of one running omega (config + flags, paths absolute)."""

    mode: SandboxMode
    home: Path
    workspace: Path
    write_roots: tuple[Path, ...] = ()
    config_path: Path | None = None
    bash_timeout_seconds: float = 120.0
    require_os_sandbox: bool = True
    on_denied: OnDenied = "deny"
    env_passthrough: tuple[str, ...] = ()
    max_processes: int | None = None
    max_file_size_mb: int | None = None
    max_open_files: int | None = None
    memory_mb: int | None = None
    tmp_dir: Path = field(default=Path("/tmp"))
    own_code: tuple[Path, ...] = field(default_factory=interpreter_dirs)
    """What omega imports and runs from (`interpreter_dirs()`): never writable by any tool."""
    config_candidates: tuple[Path, ...] = ()
    """Other files omega would load as its config on a later start (`./servers.toml` of its cwd)."""
    hidden: tuple[Path, ...] = field(default_factory=default_hidden)
    """Secrets hidden from bash and `read` in sandbox and rx modes (`sandbox/hidden.py`: the defaults
    minus `[sandbox] unhide`, plus `[sandbox] hide`). `hidden_paths` adds omega's token and state."""
    server_name: str | None = None
    """The downstream server this policy confines (`sandbox/servers.py`), None for bash and the file
    tools. A server gets a private /tmp and no share of `$OMEGA_HOME/scratch`."""
    read_only: bool = False
    """A confined server that may write nothing but its private /tmp (not even its cwd)."""
    cwd_read_only: bool = False
    """A confined server whose cwd lies in a write root of the tools: it runs there but may not write
    there (what it wrote, `.git/hooks`, `.mcp.json`, would run next outside any sandbox)."""
    protected_names: tuple[str, ...] = field(default_factory=effective_protected)
    """Names read-only for bash and denied to the file tools in every write root (`sandbox/protect.py`:
    the defaults minus `[sandbox] unprotect`, plus `[sandbox] protect`)."""
    shell_lifetime_seconds: float = 3600.0
    """How long a background shell may run (`[sandbox] shell_lifetime`)."""
    foreign: tuple[Path, ...] = ()
    """Other hub clients' workspaces (`server/profiles.py`): never writable, and hidden like omega's own
    files (from bash too in sandbox and rx modes)."""
    client: str = HUB_CLIENT
    """Whose tools run under this policy (`server/profiles.py`): their scratch, caches, private /tmp
    directories and per-session server directories live in `$OMEGA_HOME/clients/<client>/`, and
    every other client's tree is neither writable nor visible to them (sandbox and rx modes)."""
    private_tmp: Path | None = None
    """The calling session's private directory that stands in for `tmp_dir` (`sandbox/world.py`): bash
    sees it at `tmp_dir` and the file tools map `tmp_dir/...` into it. None: bash gets an empty private
    /tmp of its own (sandbox and rx modes), the file tools the host's."""
    pinned_roots: Mapping[Path, Path] = field(init=False, compare=False, repr=False, default_factory=dict[Path, Path])
    """Write root -> where it really was when this policy was made (omega's start). The file tools use
    these, never a fresh realpath: bash may rename a root that lies in another writable root (`/tmp`)
    and leave a symbolic link to anywhere in its place."""

    def __post_init__(self) -> None:
        roots = dict.fromkeys((*self.file_write_roots, *self.bash_write_roots))
        self._pin({root: Path(os.path.realpath(root)) for root in roots})

    def _pin(self, pinned: dict[Path, Path]) -> None:
        """Set `pinned_roots` to `pinned`, with the tmp dir standing for the private /tmp when there is one."""
        if self.private_tmp is not None and self.tmp_dir in pinned:
            pinned[self.tmp_dir] = Path(os.path.realpath(self.private_tmp))
        object.__setattr__(self, "pinned_roots", pinned)

    def with_private_tmp(self, directory: Path) -> SandboxPolicy:
        """This policy with `directory` as its private /tmp: what `dataclasses.replace` gives, without
        resolving every write root again (the roots do not depend on it; a fresh policy per stateless
        2026-era HTTP call spent more time there than in the call)."""
        policy = copy.copy(self)
        object.__setattr__(policy, "private_tmp", directory)
        policy._pin(dict(self.pinned_roots))
        return policy

    def with_write_roots(self, extra: tuple[Path, ...]) -> SandboxPolicy:
        """This policy with `extra` added to `write_roots`, pinned where the originals were pinned (the
        file tools' worker: its world grants what the file tools may write, `file_write_roots`)."""
        policy = copy.copy(self)
        object.__setattr__(policy, "write_roots", tuple(dict.fromkeys((*self.write_roots, *extra))))
        policy._pin(dict(self.pinned_roots))
        return policy

    @classmethod
    def from_settings(
        cls, sb: SandboxConfig, place: ConfigPlace, *, mode: SandboxMode | None = None, workspace: Path | None = None
    ) -> SandboxPolicy:
        """Build the policy from `[sandbox]` and where the file lives; flags (`mode`, `workspace`) override the file."""
        return cls(
            mode=mode or sb.mode,
            home=place.home,
            workspace=(workspace.absolute() if workspace else sb.workspace_in(place.home)),
            write_roots=sb.write_roots,
            config_path=place.path,
            bash_timeout_seconds=sb.bash_timeout,
            require_os_sandbox=sb.require_os_sandbox,
            on_denied=sb.on_denied,
            env_passthrough=sb.env_passthrough,
            max_processes=sb.max_processes,
            max_file_size_mb=sb.max_file_size_mb,
            max_open_files=sb.max_open_files,
            memory_mb=sb.memory_mb,
            config_candidates=(Path.cwd().absolute() / "servers.toml",),
            hidden=effective_hidden(sb.hide, sb.unhide, place.path.parent if place.path else None),
            protected_names=effective_protected(sb.protect, sb.unprotect),
            shell_lifetime_seconds=sb.shell_lifetime,
        )

    @property
    def servers_dir(self) -> Path:
        """`$OMEGA_HOME/servers`: the default working directories of confined servers. A tool that could
        write there would plant files a server loads at its next start (an `.npmrc`, `node_modules`)."""
        return self.home / SERVERS_DIR_NAME

    @property
    def sessions_dir(self) -> Path:
        """`$OMEGA_HOME/sessions`: saved agent conversations, sent to the model again on `--resume`."""
        return self.home / SESSIONS_DIR_NAME

    @property
    def clients_dir(self) -> Path:
        """`$OMEGA_HOME/clients`: every client's own tree, one directory each."""
        return self.home / CLIENTS_DIR_NAME

    @property
    def client_dir(self) -> Path:
        """`$OMEGA_HOME/clients/<client>`: this client's scratch, caches, private /tmp directories and
        session directories; the file tools' corner of the data directory."""
        return self.clients_dir / self.client

    @property
    def private_tmp_root(self) -> Path:
        """`$OMEGA_HOME/clients/<client>/tmp`: every session's private /tmp of this client
        (`sandbox/world.py`), each a directory below; neither bash nor the file tools reach another
        session's."""
        return self.client_dir / PRIVATE_TMP_DIR_NAME

    @property
    def session_dirs_root(self) -> Path:
        """`$OMEGA_HOME/clients/<client>/sessions`: the working directories of this client's
        `share = "session"` server processes (`proxy/pool.py`), one per session."""
        return self.client_dir / SESSIONS_DIR_NAME

    def foreign_trees(self) -> tuple[Path, ...]:
        """The other clients' trees that exist now (one directory listing): hidden from bash and
        confined servers, which cannot write them anyway (their write roots are this client's)."""
        try:
            entries = sorted(os.scandir(self.clients_dir), key=lambda e: e.name)
        except OSError:
            return ()
        return tuple(Path(e.path) for e in entries if e.name != self.client)

    @property
    def quarantine_dir(self) -> Path:
        """`$OMEGA_HOME/quarantine`: what bash wrote at a protected name, moved here when omega undid it."""
        return self.home / QUARANTINE_DIR_NAME

    @property
    def scratch_dir(self) -> Path:
        """`$OMEGA_HOME/clients/<client>/scratch`: bash's writable corner of the data directory (its
        caches below `cache/`), this client's own."""
        return self.client_dir / SCRATCH_DIR_NAME

    @property
    def token_file(self) -> Path:
        return self.home / TOKEN_FILE_NAME

    @property
    def state_dir(self) -> Path:
        """`$OMEGA_HOME/state`: OAuth tokens and pins, hidden from bash and every confined server always."""
        return self.home / STATE_DIR_NAME

    @property
    def run_dir(self) -> Path:
        """`$OMEGA_HOME/run`: the shared hub's socket, hidden from bash and every confined server always."""
        return self.home / RUN_DIR_NAME

    @property
    def protected_paths(self) -> tuple[Path, ...]:
        """omega's own config, state and code: never writable (any mode), token never readable."""
        paths = [self.home / "servers.toml", self.token_file, self.state_dir, self.run_dir, self.servers_dir]
        paths.append(self.sessions_dir)
        paths.append(self.quarantine_dir)
        if self.server_name is None:  # the tools never write a session server's directory (its own cwd)
            paths += [self.session_dirs_root, self.client_dir / "node_modules"]
        # npm puts every node_modules/.bin above a server's cwd ($OMEGA_HOME/servers/NAME) on its PATH.
        paths.append(self.home / "node_modules")
        paths += [*self.config_candidates, *self.own_code, *self.foreign]
        if self.config_path is not None:
            paths.append(self.config_path)
        return tuple(dict.fromkeys(paths))

    @property
    def file_write_roots(self) -> tuple[Path, ...]:
        """Roots the file tools may write beneath; `/` in rwx mode (blocklist still applies)."""
        if self.mode == "rwx":
            return (Path("/"),)
        return tuple(dict.fromkeys((self.workspace, self.client_dir, self.tmp_dir, *self.write_roots)))

    @property
    def bash_write_roots(self) -> tuple[Path, ...]:
        """Roots bash (or a confined server) may write beneath under the OS sandbox (sandbox and rx modes)."""
        if self.server_name is not None:
            if self.read_only:
                return (self.tmp_dir,)
            cwd = () if self.cwd_read_only else (self.workspace,)
            return tuple(dict.fromkeys((*cwd, self.tmp_dir, *self.write_roots)))
        return tuple(dict.fromkeys((self.workspace, self.scratch_dir, self.tmp_dir, *self.write_roots)))

    @property
    def own_hidden(self) -> tuple[Path, ...]:
        """omega's own files no tool may read: its token, state, run directory (the hub's socket), config
        files, saved sessions and the sessions' private /tmp directories (the caller's own is reached at
        `tmp_dir` instead)."""
        configs = [p for p in (self.config_path, self.home / "servers.toml") if p is not None]
        own = (self.token_file, self.state_dir, self.run_dir, *configs, self.sessions_dir, self.private_tmp_root)
        return (*own, *self.foreign)

    @property
    def hidden_paths(self) -> tuple[Path, ...]:
        """What bash must not see in this mode: `hidden`, `own_hidden` and the other clients' trees
        that exist now (`foreign_trees`); none in rwx."""
        if self.mode == "rwx":
            return ()
        return tuple(dict.fromkeys((*self.hidden, *self.own_hidden, *self.foreign_trees())))

    @property
    def bash_network(self) -> bool:
        return self.mode != "sandbox"
