"""Hub clients and what each may do: `[hub.clients.NAME]` as a view over the one Toolbox.

A client's bearer token names it (`auth.py`); its profile is the tools it may see and call (`tools`
allow globs minus `exclude_tools` deny globs, `fnmatch` and case-sensitive like a server's own,
over built-in names and full `mcp__<server>__<tool>` names) and the sandbox its built-in calls run
in: its own tree `$OMEGA_HOME/clients/NAME/` (scratch, caches, private /tmp, session directories:
`SandboxPolicy.client_dir`), its own `workspace` and `mode` when set, else the hub's. Never a second routing table: the
Toolbox resolves every name, then asks the profile (the call context's `profile`); a tool
the profile does not permit is, to that client, an unknown tool (the same JSON-RPC error, naming
only its own tools), absent from its tools/list and its search results. Every other client's own
workspace, and the hub's when the client has one of its own, is foreign to it: never writable by
its tools and hidden from them (`SandboxPolicy.foreign`; not in rwx mode, which confines nothing).
The hub's own token, and stdio, have no profile: every tool, the hub's sandbox. A window of the shared
hub (`omega-mcp attach`, `server/unix.py`) is a client too, named by its window id, with the workspace
and mode it brings: its profile is made by `Profiles.window` when it connects and is in the lifespan
state of its connection's serving loop (`window_of(ctx.lifespan_context)`: the connection has no HTTP
request); it leaves with `Profiles.leave`. The MCP server asks who a request comes from and puts the
answer in the call's context (`calling.CallContext`): profile, session key and session directories.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, cast

from mcp import MCPError, types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.session import ServerSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp._sdk import connection_of
from omega_mcp.config import ClientConfig
from omega_mcp.names import Route, normalize, tool_prefix
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import HUB_CLIENT, SandboxPolicy
from omega_mcp.server.auth import client_of_scope
from omega_mcp.toolbox import Toolbox

__all__ = [
    "PROFILE",
    "WINDOW_STATE",
    "ClientProfile",
    "ClientScope",
    "Profiles",
    "client_policy",
    "input_schema_for_caller",
    "session_key",
    "window_of",
]

PROFILE: ContextVar[ClientProfile | None] = ContextVar("omega_profile", default=None)
"""The profile of the hub client whose request is being handled (set by `ClientScope`); None: every tool.
Read only by `input_schema_for_caller`: the SDK's `get_tool_input_schema(name)` callback is given the
tool's name alone. Every handler asks the request itself (`Profiles.of`) and passes the answer on."""

WINDOW_STATE = "omega_mcp.window"
"""Lifespan state key: the profile of the attached window whose connection is served (`server/unix.py`)."""

_COUNTED = "omega_mcp.client_session"
"""`Connection.state` key: this connection counts against its client's `max_sessions_per_client`."""
_POOL_CLEANUP = "omega_mcp.pool_cleanup"
"""`Connection.state` key: the connection's own session servers are stopped when it closes."""


def _matcher(globs: Sequence[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs)) if globs else None


class ClientProfile:
    """One `[hub.clients.NAME]`: the tools it may use and the sandbox of its built-in calls."""

    def __init__(self, name: str, config: ClientConfig, policy: SandboxPolicy) -> None:
        self.name = name
        self.config = config
        self.policy = policy
        self._allow = _matcher(config.tools) if config.tools is not None else None
        self._everything = config.tools is None
        self._deny = _matcher(config.exclude_tools)
        self._verdicts: dict[Route, bool] = {}
        self._prompts = _matcher(config.prompts) if config.prompts is not None else None
        self._resources = _matcher(config.resources) if config.resources is not None else None
        self._servers_version = -1
        self._servers: set[str] = set()

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

    def uses_server(self, downstreams: Downstreams, server_name: str) -> bool:
        """Whether this client may use some tool of `server_name`: only then does it see the server's
        prompts, resources, templates, completions and subscriptions (decided once per catalog version)."""
        version = downstreams.version
        if self._servers_version != version:
            self._servers_version = version
            self._servers = {name for name, tool in downstreams.tools() if self.permits(Route(name, tool.name))}
        return server_name in self._servers

    def allows_prompt(self, downstreams: Downstreams, server_name: str, exported: str) -> bool:
        """Whether this client may see and get the prompt exported as `exported` (`<server>__<prompt>`)."""
        allowed = self._prompts is None or self._prompts.fullmatch(exported) is not None
        return allowed and self.uses_server(downstreams, server_name)

    def allows_resource(self, downstreams: Downstreams, server_name: str, uri: str) -> bool:
        """Whether this client may see, read, complete and subscribe to the resource (or template) `uri`."""
        allowed = self._resources is None or self._resources.fullmatch(uri) is not None
        return allowed and self.uses_server(downstreams, server_name)

    def visible(self, toolbox: Toolbox, tools: Iterable[types.Tool]) -> list[types.Tool]:
        """The tools of a listing this client may see (search mode's own two tools route nowhere: kept)."""
        namespace = toolbox.namespace()
        return [t for t in tools if (route := namespace.resolve(t.name)) is None or self.permits(route)]


def client_policy(
    hub: SandboxPolicy, config: ClientConfig, foreign: Sequence[Path], name: str = HUB_CLIENT
) -> SandboxPolicy:
    """The sandbox of client `name`'s built-in calls: the hub's with its own tree
    (`$OMEGA_HOME/clients/<name>/`: scratch, caches, private /tmp, session directories), its own
    workspace and mode when set, and the `foreign` workspaces (every other one but those holding its own)."""
    workspace = config.workspace or hub.workspace
    others = tuple(
        dict.fromkeys(p for p in foreign if p != workspace and not workspace.is_relative_to(p) and p != hub.home)
    )
    return dataclasses.replace(hub, workspace=workspace, mode=config.mode or hub.mode, foreign=others, client=name)


class Profiles:
    """Every client's profile by name, and which one a request comes from (reloaded as a whole)."""

    def __init__(
        self, hub: SandboxPolicy, clients: Mapping[str, ClientConfig], max_sessions_per_client: int = 32
    ) -> None:
        self.hub = hub
        self.max_sessions_per_client = max_sessions_per_client
        """`[hub] max_sessions_per_client`: handshake-era sessions one client token may hold open."""
        self.open_sessions: dict[str, set[int]] = {}
        """Each named client's open handshake-era sessions (their connections' ids)."""
        self.by_name: dict[str, ClientProfile] = {}
        self.windows: dict[str, ClientProfile] = {}
        """The attached windows' profiles by client name (never touched by a reload)."""
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
            policy = client_policy(self.hub, config, foreign, name)
            kept = old.get(name)
            if kept is not None and kept.config == config and kept.policy == policy:
                profiles[name] = kept  # its sessions' private /tmp and protected names stay as they are
            else:
                profiles[name] = ClientProfile(name, config, policy)
        self.by_name = profiles

    def window(self, name: str, workspace: Path | None, mode: str | None) -> ClientProfile:
        """A window joins as client `name` with its own workspace and mode (None: the hub's) and its own
        tree (`$OMEGA_HOME/clients/<name>/`: scratch, caches, private /tmp, session directories), like a
        `[hub.clients]` token: every other client's own workspace, and the hub's when it has one of its
        own, is foreign to it."""
        config = ClientConfig.model_construct(token="", tools=None, exclude_tools=(), workspace=workspace, mode=mode)
        foreign = [c.config.workspace for c in self.by_name.values() if c.config.workspace is not None]
        if workspace is not None and workspace != self.hub.workspace:
            foreign.append(self.hub.workspace)
        profile = self.windows[name] = ClientProfile(name, config, client_policy(self.hub, config, foreign, name))
        return profile

    def leave(self, name: str) -> None:
        """A window's connection ended."""
        self.windows.pop(name, None)

    def of(self, http_request: object, window: ClientProfile | None = None) -> ClientProfile | None:
        """The profile of the client whose token an HTTP request carries; None for the hub's own token
        (and for stdio, which has no request); without a request, the attached `window`'s (`window_of`)."""
        if http_request is None:
            return window
        scope: object = getattr(http_request, "scope", None)
        name = client_of_scope(cast(Mapping[str, object], scope)) if isinstance(scope, dict) else None
        return self.by_name.get(name) if name else None

    def policies(self) -> list[SandboxPolicy]:
        """The clients' own sandboxes (for the checks before start and the workspaces to create)."""
        return [p.policy for p in self.by_name.values()]


def window_of(lifespan_context: object) -> ClientProfile | None:
    """The attached window whose connection a request comes on (`server/unix.py`), or None."""
    window = (
        cast(Mapping[str, object], lifespan_context).get(WINDOW_STATE) if isinstance(lifespan_context, dict) else None
    )
    return window if isinstance(window, ClientProfile) else None


def session_key(
    session: ServerSession,
    http_request: object,
    profile: ClientProfile | None,
    end: Callable[[object], Awaitable[None]],
    *,
    window: bool = False,
) -> Hashable | None:
    """Whose `share = "session"` server connections a call uses (`proxy/pool.py`): an HTTP session's
    connection (`end(connection)` runs when it closes); for a 2026-era HTTP request, which has no
    session, its client token's; None on stdio (one client: the shared connection is its own). An
    attached `window` is keyed as an HTTP client is: its connection, or (2026 era) its client name."""
    if http_request is None and not window:
        return None
    connection = connection_of(session)
    if connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return ("omega-client", profile.name if profile is not None else "")
    if not connection.state.get(_POOL_CLEANUP):
        connection.state[_POOL_CLEANUP] = True
        connection.exit_stack.push_async_callback(end, connection)
    return connection


class ClientScope(ServerMiddleware[Any]):
    """Every request of the HTTP hub runs as its client: a named client's `initialize` counts against its
    `max_sessions_per_client`, and `PROFILE` is the profile of its token (for the SDK's schema lookup)."""

    def __init__(self, profiles: Profiles) -> None:
        self.profiles = profiles

    def _count_session(self, ctx: ServerRequestContext[Any, Any], profile: ClientProfile) -> None:
        """A named client's `initialize` opens one of its at most `max_sessions_per_client` sessions.

        Raises:
            MCPError: it holds that many already (the answer says which limit and how to raise it).
        """
        connection = connection_of(ctx.session)
        if connection.protocol_version in MODERN_PROTOCOL_VERSIONS or connection.state.get(_COUNTED):
            return
        mine = self.profiles.open_sessions.setdefault(profile.name, set())
        limit = self.profiles.max_sessions_per_client
        if len(mine) >= limit:
            raise MCPError(
                code=types.INVALID_REQUEST,
                message=f"client {profile.name} already holds {len(mine)} open sessions, the hub's "
                f"max_sessions_per_client ({limit}): end one (DELETE /mcp with its Mcp-Session-Id), or raise "
                "[hub] max_sessions_per_client in the hub's config",
            )
        connection.state[_COUNTED] = True
        mine.add(id(connection))

        async def closed() -> None:
            mine.discard(id(connection))

        connection.exit_stack.push_async_callback(closed)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        profile = self.profiles.of(ctx.request, window_of(ctx.lifespan_context))
        if profile is not None and ctx.method == "initialize":
            self._count_session(ctx, profile)
        token = PROFILE.set(profile)
        try:
            return await call_next(ctx)
        finally:
            PROFILE.reset(token)


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
