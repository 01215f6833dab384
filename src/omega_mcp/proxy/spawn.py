"""Starting stdio downstream servers, early: before omega has even imported the MCP SDK.

Importing the SDK takes most of a second, and so does starting a typical MCP server. So the CLI
calls `EarlyStarts.start()` right after reading the config: every enabled stdio server is started
at once and sent, as plain JSON, the era probe (`server/discover`) and the handshake (`initialize`),
as `eras.py` asks them, and both sides load in parallel. The first connection attempt of each
server then `adopt()`s its process and picks up the answers (see `connect.py`); later attempts
(restarts) spawn afresh. Nothing here imports the SDK.
Processes nobody adopted are killed when the `EarlyStarts` closes. Every server starts through
`sandbox/child/deathsig.py` (PR_SET_PDEATHSIG, then exec), so it dies even when omega is SIGKILLed.
Env: the SDK's default inherited variables (`INHERITED_ENV`, checked against the SDK by a test),
`PASSED_ENV` and `LC_*`, `PYTHONSAFEPATH=1`, the server's `env`, and omega's marker (`recursion.MARKER`).
With a `LaunchGuard` (`sandbox/untrusted.py`) a server starts in `$OMEGA_HOME/servers/NAME` unless
its `cwd` says otherwise, never unconfined from a write root, and with no write root on its `PATH`:
at every start, early or a restart.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

from omega_mcp.proxy.recursion import MARKER, launches_omega, started_by_omega
from omega_mcp.sandbox.processes import popen_group, signal_group
from omega_mcp.version import __version__

if TYPE_CHECKING:
    from omega_mcp.config import ServersSection
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.sandbox.untrusted import LaunchGuard

__all__ = [
    "EARLY_IDS",
    "INHERITED_ENV",
    "PASSED_ENV",
    "EarlyStarts",
    "Spawned",
    "default_environment",
    "launch_problem",
    "spawn",
]

INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""What the SDK's `get_default_environment()` passes to a stdio server on POSIX."""
PASSED_ENV = (
    "LANG",
    "TZ",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)
"""Also passed on: the locale and time zone, the proxy settings (with `LC_*`), as Claude Code does,
and where the CA certificates are, without which `npx`/`uvx` cannot reach a registry behind a TLS proxy."""
HANDSHAKE_VERSION = "2025-11-25"
"""The newest handshake-era protocol version (the SDK's LATEST_HANDSHAKE_VERSION)."""
MODERN_VERSION = "2026-07-28"
"""The newest 2026-era protocol version (the SDK's LATEST_MODERN_VERSION)."""
EARLY_IDS = {"discover": "omega-early-discover", "initialize": "omega-early-initialize"}
"""The request ids of what an early start asks, by what it asks."""
_DEATHSIG = Path(__file__).resolve().parent.parent / "sandbox" / "child" / "deathsig.py"
"""The launcher every server starts through, so that it dies with omega (see `spawn`)."""

Key = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], str | None, object]


@dataclass(slots=True)
class Spawned:
    """A started server: the process and our ends of its pipes."""

    process: subprocess.Popen[bytes]
    stdin: int
    stdout: int
    stderr: int
    asked: tuple[str, ...] = ()
    """What was written to it before the SDK loaded (`discover`, `initialize`): their answers come first."""


def default_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a stdio server: the SDK's basics, locale, time zone and proxies, then its own `env`.

    `recursion.MARKER` (omega's pid) is always set last, so an omega started below this one, however
    indirectly, knows it and starts no servers of its own. `PYTHONSAFEPATH=1` keeps a Python server
    from importing the script's directory or its cwd first (a planted `mcp_server_time.py`).
    """
    wanted = (*INHERITED_ENV, *PASSED_ENV)
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in wanted or k.startswith("LC_")) and not v.startswith("()")  # no exported bash functions
    }
    return env | {"PYTHONSAFEPATH": "1"} | dict(extra or {}) | {MARKER: str(os.getpid())}


def _key(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
    confinement: SandboxPolicy | None,
) -> Key:
    return command, tuple(args), tuple(sorted((env or {}).items())), str(cwd) if cwd is not None else None, confinement


def _program(command: str, environment: Mapping[str, str], cwd: str | Path | None) -> str:
    """The absolute path `command` runs, or the error Popen would raise (a launcher would only exit 127)."""
    if os.sep in command:  # run as given, relative to the server's cwd
        path = Path(cwd or ".") / command
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        if not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
        return os.path.abspath(path)
    found = shutil.which(command, path=environment.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    return os.path.abspath(found)


def _check_cwd(cwd: str | Path | None) -> None:
    """A working directory that is missing is named as such (Popen would blame the program).

    Raises:
        FileNotFoundError, NotADirectoryError: with `filename` the directory.
    """
    if cwd is None or os.path.isdir(cwd):
        return
    if os.path.lexists(cwd):
        raise NotADirectoryError(errno.ENOTDIR, "is not a directory", str(cwd))
    raise FileNotFoundError(errno.ENOENT, "does not exist", str(cwd))


def launch_problem(
    guard: LaunchGuard,
    server_name: str,
    command: str,
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
    *,
    args: Sequence[str] = (),
    confined: bool = False,
) -> str | None:
    """Why `guard` refuses this server (its launch reaches into a write root and it would run unconfined,
    or a planted `node_modules` lies above its cwd), or None; `cwd` None is the default."""
    where = Path(cwd) if cwd is not None else guard.default_cwd(server_name)
    try:
        program = _program(command, default_environment(env), where)
    except OSError:
        program = command  # not found (yet): the start reports that; a path is still judged as written
    return guard.problem(
        server_name,
        os.path.join(where, program),
        where,
        cwd_configured=cwd is not None,
        args=args,
        env=env,
        confined=confined,
    )


def spawn(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
    *,
    confinement: SandboxPolicy | None = None,
    guard: tuple[LaunchGuard, str] | None = None,
) -> Spawned:
    """Start a server in its own process group with fresh pipes on stdin, stdout and stderr.

    With `confinement` (`sandbox/servers.py`) the server starts through the sandbox trampoline
    instead, in its cwd; the trampoline dies with omega the same way. With `guard` (the guard and the
    server's name) a `cwd` of None means `$OMEGA_HOME/servers/NAME`, and an unconfined server whose
    launch reaches into a write root is refused (PermissionError naming the setting).

    The server runs through the `sandbox/child/deathsig.py` launcher, so it is SIGKILLed when omega dies,
    even by SIGKILL. PR_SET_PDEATHSIG fires when the *thread* that forked the child exits: call this
    from the event-loop (or main) thread, never from a short-lived worker thread. The launcher's
    PDEATHSIG covers the server itself, not its children (npx → node): the process-group kill of a
    normal shutdown does.

    Raises:
        OSError: the command cannot be started.
    """
    environment = default_environment(env)
    _check_cwd(cwd)  # the configured one (confined or not); omega makes the default one
    if guard is not None:
        launch_guard, server_name = guard
        problem = launch_problem(
            launch_guard, server_name, command, env, cwd, args=args, confined=confinement is not None
        )
        if problem is not None:
            raise PermissionError(errno.EPERM, problem)
        configured = cwd is not None
        cwd = Path(cwd) if cwd is not None else launch_guard.default_cwd(server_name)
        if not configured:
            launch_guard.prepare(server_name, cwd)
        environment = launch_guard.environment(environment)
    if confinement is not None:
        from omega_mcp.errors import SandboxUnavailableError
        from omega_mcp.sandbox.servers import server_argv, server_environment

        cwd = confinement.workspace
        environment = server_environment(confinement, environment)
        try:
            launcher = server_argv(confinement, _program(command, environment, cwd), args)
        except SandboxUnavailableError as exc:
            raise PermissionError(errno.EPERM, str(exc)) from None
    else:
        _program(command, environment, cwd)  # deathsig.py runs it by name, as Popen would
        launcher = [sys.executable, "-I", "-S", str(_DEATHSIG), str(os.getpid()), "--", command, *args]
    child_in, our_in = os.pipe()
    our_out, child_out = os.pipe()
    our_err, child_err = os.pipe()
    try:
        # Its own process group: shutdown reaches grandchildren too.
        process = popen_group(launcher, stdin=child_in, stdout=child_out, stderr=child_err, env=environment, cwd=cwd)
    except BaseException:
        for fd in (our_in, our_out, our_err):
            os.close(fd)
        raise
    finally:
        for fd in (child_in, child_out, child_err):
            os.close(fd)
    return Spawned(process, our_in, our_out, our_err)


def _early_requests(capabilities: dict[str, object], era: str) -> tuple[tuple[str, ...], bytes]:
    """What to ask a server started early (as `eras.negotiate` asks it): the probe, the handshake, or both."""
    info = {"name": "omega-mcp", "version": __version__}
    params = {
        "discover": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientInfo": info,
                "io.modelcontextprotocol/clientCapabilities": capabilities,
            }
        },
        "initialize": {"protocolVersion": HANDSHAKE_VERSION, "capabilities": capabilities, "clientInfo": info},
    }
    methods = {"discover": "server/discover", "initialize": "initialize"}
    asked = {"auto": ("discover", "initialize"), "modern": ("discover",)}.get(era, ("initialize",))
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": EARLY_IDS[key], "method": methods[key], "params": params[key]}) + "\n"
        for key in asked
    ]
    return asked, "".join(lines).encode()


class EarlyStarts:
    """Servers started before omega imported the SDK, each waiting for its first connection to adopt it.

    A context manager: on exit, every process nobody adopted is killed with its whole group. The
    CLI holds one for the length of a command; a restart of a server never adopts (it spawns afresh).
    """

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[Key, Spawned]] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard_all()

    def start(self, section: ServersSection, *, serving: bool = False, guard: LaunchGuard | None = None) -> None:
        """Start every enabled stdio server of `section` (`Config.for_servers`) and ask it its era (best effort).

        `serving`: omega serves MCP clients (`serve`), so it declares what it can pass on to them
        (`declared.py`), exactly as the SDK session it hands the server to would. Servers the
        supervisor will refuse (a config problem, omega itself, or any stdio server when this omega
        was started by another) are left alone: it reports why. `guard` is the one the supervisor
        starts servers with (`LaunchGuard.of` this omega's sandbox policy).
        """
        if started_by_omega() is not None:
            return
        from omega_mcp.proxy.declared import declared_capabilities
        from omega_mcp.sandbox.servers import server_policy

        capabilities = declared_capabilities(serving=serving, sampling=section.own_sampling)
        for server_name, server in section.servers.items():
            if not server.enabled or server.command is None or server_name in self._waiting:
                continue
            if section.server_problem(server_name) is not None or launches_omega(server.command, server.args):
                continue
            confinement = server_policy(section, server_name, guard)
            key = _key(server.command, server.args, server.env or None, server.cwd, confinement)
            try:
                spawned = spawn(
                    server.command,
                    server.args,
                    server.env or None,
                    server.cwd,
                    confinement=confinement,
                    guard=(guard, server_name) if guard is not None else None,
                )
            except OSError:
                continue  # the supervisor will try again and report why it cannot start
            asked, lines = _early_requests(capabilities, server.era)
            try:
                if os.write(spawned.stdin, lines) == len(lines):  # a fresh pipe has room for both lines
                    spawned.asked = asked
            except OSError:
                pass
            self._waiting[server_name] = (key, spawned)

    def adopt(
        self,
        server_name: str,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str] | None,
        cwd: str | Path | None,
        *,
        confinement: SandboxPolicy | None = None,
    ) -> Spawned | None:
        """The process `start()` started for this server, if its command line (and sandbox) is still this one."""
        early = self._waiting.get(server_name)
        if early is None or early[0] != _key(command, args, env, cwd, confinement):
            return None
        del self._waiting[server_name]
        return early[1]

    def discard_all(self) -> None:
        """Kill the processes nobody adopted (their whole groups) and close their pipes."""
        while self._waiting:
            _, (_, spawned) = self._waiting.popitem()
            signal_group(spawned.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                spawned.process.wait(timeout=2)
            for fd in (spawned.stdin, spawned.stdout, spawned.stderr):
                with contextlib.suppress(OSError):
                    os.close(fd)
