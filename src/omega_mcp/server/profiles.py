"""Hub clients and what each may do: `[hub.clients.NAME]` as a view over the one Toolbox.

A client's bearer token names it (`auth.py`); its profile is the tools it may see and call (`tools`
allow globs minus `exclude_tools` deny globs, `fnmatch` and case-sensitive like a server's own,
over built-in names and full `mcp__<server>__<tool>` names) and the sandbox its built-in calls run
in: its own `workspace` and `mode` when set, else the hub's. Never a second routing table: the
Toolbox resolves every name, then asks the profile (`Toolbox.call_tool_wire(profile=...)`); a tool
the profile does not permit is, to that client, an unknown tool (the same JSON-RPC error, naming
only its own tools), absent from its tools/list and its search results. Every other client's own
workspace, and the hub's when the client has one of its own, is foreign to it: never writable by
its tools and hidden from them (`SandboxPolicy.foreign`; not in rwx mode, which confines nothing).
The hub's own token, and stdio, have no profile: every tool, the hub's sandbox. A window of the shared
hub (`omega-mcp attach`, `server/unix.py`) is a client too, named by its window id, with the workspace
and mode it brings: its profile is made by `Profiles.window` when it connects and is in `WINDOW` for
every request of its connection (which has no HTTP request); it leaves with `Profiles.leave`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, cast

from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.session import ServerSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp._sdk import connection_of
from omega_mcp.config import ClientConfig
from omega_mcp.names import Route, normalize, tool_prefix
from omega_mcp.proxy.pool import SESSION
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.auth import client_of_scope
from omega_mcp.toolbox import Toolbox

__all__ = [
    "PROFILE",
    "WINDOW",
    "ClientProfile",
    "ClientScope",
    "Profiles",
    "client_policy",
    "input_schema_for_caller",
    "session_key",
]

PROFILE: ContextVar[ClientProfile | None] = ContextVar("omega_profile", default=None)
"""The profile of the hub client whose request is being handled (set by `ClientScope`); None: every tool."""

WINDOW: ContextVar[ClientProfile | None] = ContextVar("omega_window", default=None)
"""The profile of the attached window whose connection is being served (`server/unix.py`); None elsewhere."""

_POOL_CLEANUP = "omega_mcp.pool_cleanup"
"""`Connection.state` key: the connection's own session servers are stopped when it closes."""


def _matcher(globs: Sequence[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs)) if globs else None


class ClientProfile:
    """One `[hub.clients.NAME]`: the tools it may use and the sandbox of its built-in calls."""

    def __init__(self, name: str, config: ClientConfig, policy: SandboxPolicy | None) -> None:
        self.name = name
        self.config = config
        self.policy = policy
        self._allow = _matcher(config.tools) if config.tools is not None else None
        self._everything = config.tools is None
        self._deny = _matcher(config.exclude_tools)
        self._verdicts: dict[Route, bool] = {}

    def permits(self, route: Route) -> bool:
        """Whether this client may see and call the tool at `route` (decided once per route)."""
        verdict = self._verdicts.get(route)
        if verdict is None:
            if route.server_name is None:
                name = route.tool_name
            else:
                name = f"{tool_prefix(route.server_name)}{normalize(route.tool_name)}"
            allowed = self._everything or (self._allow is not None and self._allow.fullmatch(name) is not None)
            verdict = allowed and (self._deny is None or self._deny.fullmatch(name) is None)
            if len(self._verdicts) > 65_536:  # namespaces change: never grow without bound
                self._verdicts.clear()
            self._verdicts[route] = verdict
        return verdict

    def visible(self, toolbox: Toolbox, tools: Iterable[types.Tool]) -> list[types.Tool]:
        """The tools of a listing this client may see (search mode's own two tools route nowhere: kept)."""
        namespace = toolbox.namespace()
        return [t for t in tools if (route := namespace.resolve(t.name)) is None or self.permits(route)]


def client_policy(hub: SandboxPolicy, config: ClientConfig, foreign: Sequence[Path]) -> SandboxPolicy | None:
    """The sandbox of a client's built-in calls: the hub's with its own workspace and mode, and the
    `foreign` workspaces (every other one but those holding its own); None when it has none of its own."""
    workspace = config.workspace or hub.workspace
    others = tuple(
        dict.fromkeys(p for p in foreign if p != workspace and not workspace.is_relative_to(p) and p != hub.home)
    )
    if config.workspace is None and config.mode is None and not others:
        return None
    return dataclasses.replace(hub, workspace=workspace, mode=config.mode or hub.mode, foreign=others)


class Profiles:
    """Every client's profile by name, and which one a request comes from (reloaded as a whole)."""

    def __init__(self, hub: SandboxPolicy, clients: Mapping[str, ClientConfig]) -> None:
        self.hub = hub
        self.by_name: dict[str, ClientProfile] = {}
        self.windows: dict[str, ClientProfile] = {}
        """The attached windows' profiles by client name (never touched by a reload)."""
        self._window_policies: dict[tuple[Path, str], SandboxPolicy | None] = {}
        self.replace(clients)

    def replace(self, clients: Mapping[str, ClientConfig]) -> None:
        """Take a new `[hub.clients]` (SIGHUP): profiles of unchanged clients are kept as they were."""
        own = {name: c.workspace for name, c in clients.items() if c.workspace is not None}
        old = self.by_name
        profiles: dict[str, ClientProfile] = {}
        for name, config in clients.items():
            foreign = [w for other, w in own.items() if other != name]
            if config.workspace is not None:
                foreign.append(self.hub.workspace)  # a client with a workspace of its own: the hub's is not its
            policy = client_policy(self.hub, config, foreign)
            kept = old.get(name)
            if kept is not None and kept.config == config and kept.policy == policy:
                profiles[name] = kept  # its sessions' private /tmp and protected names stay as they are
            else:
                profiles[name] = ClientProfile(name, config, policy)
        self.by_name = profiles

    def window(self, name: str, workspace: Path | None, mode: str | None) -> ClientProfile:
        """A window joins as client `name` with its own workspace and mode (None: the hub's): every other
        client's own workspace, and the hub's when it has one of its own, is foreign to it. Windows with
        the same workspace and mode share one policy object (so one workplace in the Toolbox); each
        connection still has its own private /tmp and shells (they are the connection's)."""
        config = ClientConfig.model_construct(token="", tools=None, exclude_tools=(), workspace=workspace, mode=mode)
        key = (workspace or self.hub.workspace, mode or self.hub.mode)
        if key not in self._window_policies:
            foreign = [c.config.workspace for c in self.by_name.values() if c.config.workspace is not None]
            if workspace is not None and workspace != self.hub.workspace:
                foreign.append(self.hub.workspace)
            self._window_policies[key] = client_policy(self.hub, config, foreign)
        profile = self.windows[name] = ClientProfile(name, config, self._window_policies[key])
        return profile

    def leave(self, name: str) -> None:
        """A window's connection ended."""
        self.windows.pop(name, None)

    def of(self, http_request: object) -> ClientProfile | None:
        """The profile of the client whose token an HTTP request carries; None for the hub's own token
        (and for stdio, which has no request); without a request, the attached window's (`WINDOW`)."""
        if http_request is None:
            return WINDOW.get()
        scope: object = getattr(http_request, "scope", None)
        name = client_of_scope(cast(Mapping[str, object], scope)) if isinstance(scope, dict) else None
        return self.by_name.get(name) if name else None

    def policies(self) -> list[SandboxPolicy]:
        """The clients' own sandboxes (for the checks before start and the workspaces to create)."""
        return [p.policy for p in self.by_name.values() if p.policy is not None]


def session_key(
    session: ServerSession,
    http_request: object,
    profile: ClientProfile | None,
    end: Callable[[object], Awaitable[None]],
) -> Hashable | None:
    """Whose `share = "session"` server connections a call uses (`proxy/pool.py`): an HTTP session's
    connection (`end(connection)` runs when it closes); for a 2026-era HTTP request, which has no
    session, its client token's; None on stdio (one client: the shared connection is its own). An
    attached window is keyed as an HTTP client is: its connection, or (2026 era) its client name."""
    if http_request is None and WINDOW.get() is None:
        return None
    connection = connection_of(session)
    if connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return ("omega-client", profile.name if profile is not None else "")
    if not connection.state.get(_POOL_CLEANUP):
        connection.state[_POOL_CLEANUP] = True
        connection.exit_stack.push_async_callback(end, connection)
    return connection


class ClientScope(ServerMiddleware[Any]):
    """Every request of the HTTP hub runs as its client: `PROFILE` is the profile of its token, and for
    a tool call `SESSION` names whose `share = "session"` connections it uses (`session_key`)."""

    def __init__(self, profiles: Profiles, catalog: Downstreams | None) -> None:
        self.profiles = profiles
        self.catalog = catalog

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        profile = self.profiles.of(ctx.request)
        key = None
        if ctx.method == "tools/call" and self.catalog is not None:
            key = session_key(ctx.session, ctx.request, profile, self.catalog.pool.end)
        profile_token, session_token = PROFILE.set(profile), SESSION.set(key)
        try:
            return await call_next(ctx)
        finally:
            SESSION.reset(session_token)
            PROFILE.reset(profile_token)


def input_schema_for_caller(toolbox: Toolbox, name: str) -> Mapping[str, Any] | None:
    """The schema the SDK checks a 2026-era call's Mcp-Param-* headers against: a dict lookup, for a
    tool this caller may call (else None: the SDK skips the check and the call is refused as unknown,
    so the headers never tell a client about a tool its profile hides). In search mode too: a tool
    is callable by name whether or not the session has found it yet."""
    profile = PROFILE.get()
    if profile is not None:
        route = toolbox.namespace().resolve(name)
        if route is None or not profile.permits(route):
            return None
    return toolbox.input_schema(name)
