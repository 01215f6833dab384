"""The MCP front-end: a low-level SDK `Server` whose handlers delegate to the Toolbox.

The server answers both protocol eras the SDK speaks (the 2024-11-05 … 2025-11-25 handshake
and the 2026-07-28 per-request envelope). Tool failures are already `isError` results when they
leave the Toolbox; an unknown tool name is the one JSON-RPC error (INVALID_PARAMS, text
`Unknown tool` plus the closest names), as the MCP spec prescribes. On handshake-era connections
`tools/call` takes a fast path (a server middleware, before the SDK's model validation) and a
downstream's result is handed back unparsed; over stdio, calls to stdio servers go further, through
the relay (`fastpath/relay.py`, installed by `server/stdio.py`). List changes reach handshake-era
clients as `notifications/*/list_changed` and 2026-era clients through `subscriptions/listen`;
downstream prompts and resources are re-exported. A new transport to serve on goes in `server/`.
Background shells belong to the connection that started them (`_shell_owner`): a connection's
`exit_stack` kills them when it closes (stdio: the client went away; HTTP: its session was deleted
or timed out). That is the SDK's per-connection hook: the lifespan is per server on the HTTP hub.
A stateless 2026-era HTTP request has no session, so it may not start background shells; a
2026-era stdio stream has one client for omega's life, so its shells are the process's.
Downstream servers' own requests (sampling, elicitation, roots) and log messages go to the client
whose request caused them: each `tools/call`, `prompts/get` and `resources/read` names its caller
(`as_caller`; `proxy/client_requests.py` routes, `clients.py` sends); clients register once
initialized, and their `notifications/roots/list_changed` is passed on. A 2026-era client gets
input-required rounds (`bridge.py`). Prompts, resources and subscriptions: `exports.py`.
Who calls and how is read off each request once and handed to the Toolbox as one `CallContext`
(`_context`): the hub client (`profiles.py`, a window's from its serving loop's lifespan state), the
shells' owner, the approver, the caller, progress, `_meta`, and the session's own connections.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import AsyncGenerator, Hashable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.runner import serve_dual_era_loop
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp._sdk import ReadStream, WriteStream, connection_of
from omega_mcp.builtin.shells import NO_SESSION
from omega_mcp.calling import CallContext, Caller, SessionDirs
from omega_mcp.errors import DownstreamRefusedError, UnknownToolError
from omega_mcp.narrow import object_or_none
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.results import from_wire, modern_complete, to_wire
from omega_mcp.sandbox.approvals import Approver
from omega_mcp.server.approver import elicitation_approver
from omega_mcp.server.bridge import Bridge, Raw, Run, Unreachable, asks_nothing, ours, replica_of_request
from omega_mcp.server.clients import SessionCaller
from omega_mcp.server.exports import CatalogHandlers
from omega_mcp.server.instructions import HubInstructions
from omega_mcp.server.logs import LogForwarder
from omega_mcp.server.pages import page
from omega_mcp.server.profiles import (
    WINDOW_STATE,
    ClientProfile,
    ClientScope,
    Profiles,
    input_schema_for_caller,
    session_key,
    window_of,
)
from omega_mcp.server.tasks import TASKS_CAPABILITY, TaskHandlers
from omega_mcp.server.tool_search import SessionTools
from omega_mcp.server.tracing import request_spans
from omega_mcp.toolbox import Toolbox
from omega_mcp.version import __version__

__all__ = ["OmegaServer", "build_server"]

logger = logging.getLogger(__name__)

SERVER_NAME = "omega"
_SHELLS_CLEANUP = "omega_mcp.shells_cleanup"
"""`Connection.state` key: the connection's background shells are killed when it closes."""
_NOTIFY_SECONDS = 2.0
_BRIDGE = "omega_mcp.bridge"
"""Lifespan key: the `Bridge` of 2026-era calls waiting for input (one per lifespan)."""


def _bridge_of(lifespan_context: object) -> Bridge | None:
    state = object_or_none(lifespan_context)
    bridge = state.get(_BRIDGE) if state is not None else None
    return bridge if isinstance(bridge, Bridge) else None


def _call_result(raw: Raw | types.InputRequiredResult, name: str) -> types.CallToolResult | types.InputRequiredResult:
    if isinstance(raw, types.InputRequiredResult):
        return raw
    if raw.get("resultType") == "input_required":  # a 2026-era server's own round, for a 2026-era client
        return types.InputRequiredResult.model_validate(raw, by_name=False)
    return from_wire(raw, invalid=f"tool {name} returned an invalid result")


_OPENINGS = frozenset({"initialize", "server/discover"})


class OmegaServer(Server[Any]):
    """The SDK server plus the live sessions to tell when a list changes."""

    def __init__(
        self,
        toolbox: Toolbox,
        *,
        catalog: Downstreams | None = None,
        instructions: str | None = None,
        client_instructions: HubInstructions | None = None,
        tool_search: SessionTools | None = None,
        profiles: Profiles | None = None,
    ) -> None:
        self.toolbox = toolbox
        self.client_instructions = client_instructions
        """Each hub client's own `instructions` (its workspace, mode and tree), or None: `instructions` for all."""
        self.catalog = catalog
        self.tool_search = tool_search
        """Search mode (`[hub] tool_search`), or None when it is off."""
        self.profiles = profiles
        """The HTTP hub's `[hub.clients]` (and the attached windows), or None: one client, every tool."""
        # Connections (not sessions: a ServerSession lives for one request) that listed or called.
        self._connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._bus = InMemorySubscriptionBus()
        extra: dict[str, Any] = {"on_subscriptions_listen": ListenHandler(self._bus)}
        if catalog is not None:
            extra = CatalogHandlers(catalog, self.as_caller, self._bus, self._remember, self.client_of).handlers()
        super().__init__(
            SERVER_NAME,
            version=__version__,
            title="omega-mcp tool hub",
            instructions=instructions,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
            lifespan=self._lifespan,
            # The SDK's Mcp-Param-* check looks the schema up here, not in a tools/list per call.
            get_tool_input_schema=functools.partial(input_schema_for_caller, toolbox),
            **extra,
        )
        self._following = False
        self._leader_gone = anyio.Event()
        self._announced: tuple[int, int, int] | None = None
        # Registered directly: the constructor's on_set_logging_level warns that logging is
        # deprecated in the 2026 era, but handshake-era clients (Claude Code, the Inspector) use it.
        self.logs = LogForwarder()
        self.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._on_set_level)
        self.add_notification_handler("notifications/initialized", types.NotificationParams, self._on_initialized)
        self.add_notification_handler(
            "notifications/roots/list_changed", types.NotificationParams, self._on_roots_list_changed
        )
        # Tasks (tasks.py) go first: a task-augmented tools/call is not the fast path's.
        self.tasks = (
            TaskHandlers(
                toolbox,
                catalog,
                lambda s, r: SessionCaller(s, r, self.logs.level_of),
                self.client_of,
                self.session_of,
            )
            if catalog is not None
            else None
        )
        if self.tasks is not None and catalog is not None:
            catalog.client_requests.task_status = self.tasks.relay_status
            catalog.client_requests.task_label = self.tasks.label
            catalog.pool.on_stopped = self.tasks.connection_ended
        # No SDK OpenTelemetry middleware (a span per request even unexported) unless `traced`.
        self.middleware = [
            self._own_instructions,
            *([self.tasks.middleware] if self.tasks is not None else []),
            self._fast_call_tool,
        ]

    def _remember(self, session: ServerSession) -> None:
        self._connections.add(connection_of(session))  # dropped with the connection (a weak set)

    def client_of(self, ctx: Any) -> ClientProfile | None:
        """The hub client a request comes from (`Profiles.of`); None: the hub's own token, or stdio."""
        profiles = self.profiles
        return profiles.of(ctx.request, window_of(ctx.lifespan_context)) if profiles is not None else None

    async def _own_instructions(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """A hub client's answer to `initialize` or `server/discover` names its own workspace, mode and
        tree (a window's, a client token's), not the hub's."""
        result = await call_next(ctx)
        if ctx.method not in _OPENINGS or self.client_instructions is None or not isinstance(result, dict):
            return result
        profile = self.client_of(ctx)
        if profile is not None and "instructions" in result:
            result["instructions"] = self.client_instructions.of(profile.policy)
        return result

    def _context(
        self,
        ctx: Any,
        profile: ClientProfile | None,
        owner: object | None,
        caller: Caller,
        *,
        approve: Approver | None,
        progress: ProgressFnT | None,
        meta: Mapping[str, Any] | None,
        extra: Mapping[str, Any] | None = None,
    ) -> CallContext:
        """The context of one tools/call, built once: who calls (`profile`, the shells' `owner`, the
        `caller` its server's requests go to) and how; on the HTTP hub also the session whose own
        `share = "session"` connections it uses, and where their directories go."""
        key, dirs = self.session_of(ctx, profile)
        return CallContext(
            owner=owner,
            profile=profile,
            approve=approve,
            caller=caller,
            progress=progress,
            meta=meta,
            extra=extra,
            session_key=key,
            session_dirs=dirs,
        )

    def session_of(self, ctx: Any, profile: ClientProfile | None) -> tuple[Hashable | None, SessionDirs | None]:
        """Whose `share = "session"` connections a request of `profile` uses (None: the shared ones), and
        where their directories go: on the HTTP hub (and an attached window) its session's."""
        key: Hashable | None = None
        dirs: SessionDirs | None = None
        if (profiles := self.profiles) is not None:
            window = window_of(ctx.lifespan_context) is not None
            if self.catalog is not None:
                key = session_key(ctx.session, ctx.request, profile, self.catalog.pool.end, window=window)
            policy = profile.policy if profile is not None else profiles.hub
            dirs = SessionDirs(policy.client, policy.session_dirs_root)
        return key, dirs

    def _shell_owner(self, session: ServerSession, http_request: object, window: ClientProfile | None) -> object | None:
        """Who owns a call's background shells: its connection; the process (None) for a 2026-era
        stdio stream, whose one client lives as long as omega; NO_SESSION for a 2026-era HTTP request."""
        connection = connection_of(session)
        if connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # The connection is built for this one request: nothing would end its shells. An attached
            # window's 2026-era stream is one client: its profile owns them (ended when it leaves).
            return NO_SESSION if http_request is not None else window
        if not connection.state.get(_SHELLS_CLEANUP):
            connection.state[_SHELLS_CLEANUP] = True
            connection.exit_stack.push_async_callback(self.toolbox.end_session, connection)
        return connection

    # -- tools -------------------------------------------------------------------------------

    async def _on_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        self._remember(ctx.session)
        if self.tool_search is not None:
            listed = await self.tool_search.list_tools(self.tool_search.owner(ctx.session, ctx.request))
        else:
            listed = await self.toolbox.list_tools()
        if (profile := self.client_of(ctx)) is not None:
            listed = profile.visible(self.toolbox, listed)
        tools, cursor = page(listed, params, "tools")
        return types.ListToolsResult(tools=tools, next_cursor=cursor)

    # -- search mode (server/tool_search.py) ------------------------------------------------

    async def _searched_call(
        self,
        session: ServerSession,
        http_request: object,
        name: str,
        arguments: Mapping[str, Any] | None,
        profile: ClientProfile | None,
    ) -> tuple[types.CallToolResult | None, str, Mapping[str, Any] | None]:
        """In search mode: `search_tools` answered here, `call_tool` unwrapped (`SessionTools.intercept`)."""
        if self.tool_search is None:
            return None, name, arguments
        owner = self.tool_search.owner(session, http_request)
        return await self.tool_search.intercept(owner, name, arguments, self._tools_changed_for, profile)

    async def _called(self, session: ServerSession, http_request: object, name: str) -> None:
        """A tool was called by name: in search mode it joins the session's list."""
        if self.tool_search is not None:
            await self.tool_search.called(self.tool_search.owner(session, http_request), name, self._tools_changed_for)

    async def _tools_changed_for(self, owner: object) -> None:
        """Tell one session its tool list changed (bounded; a gone client is no failure)."""
        if isinstance(owner, Connection):
            with anyio.move_on_after(_NOTIFY_SECONDS):
                try:
                    await owner.send_tool_list_changed()
                except Exception as exc:  # boundary: a gone client must not fail its own call
                    logger.debug("tools/list_changed not delivered: %s", exc)
        elif owner is None:  # a 2026-era stdio client listens through subscriptions/listen
            await self._bus.publish(ToolsListChanged())

    def relay_accepts(self, name: str) -> bool:
        """Whether the stdio relay may take a call of `name` (in search mode: once it was listed)."""
        return self.tool_search is None or self.tool_search.relay_accepts(name)

    async def _on_call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        self._remember(ctx.session)
        session: ServerSession = ctx.session
        profile = self.client_of(ctx)
        answered, name, arguments = await self._searched_call(
            session, ctx.request, params.name, params.arguments, profile
        )
        if answered is not None:
            return answered
        approve = elicitation_approver(session, ctx.request_id)
        owner = self._shell_owner(session, ctx.request, window_of(ctx.lifespan_context))
        extra = (
            {}
            if ours(params.request_state)
            else params.model_dump(
                by_alias=True, mode="json", exclude_none=True, include={"input_responses", "request_state"}
            )
        )

        async def run(progress: ProgressFnT, caller: Caller) -> Raw:
            # report_progress is a no-op unless the client asked for progress (in either era).
            context = self._context(
                ctx, profile, owner, caller, approve=approve, progress=progress, meta=ctx.meta, extra=extra or None
            )
            result = await self.toolbox.call_tool_wire(name, arguments, context)
            await self._called(session, ctx.request, name)
            return result

        try:
            raw = await self.as_caller(ctx, params.request_state, params.input_responses, run)
        except UnknownToolError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except DownstreamRefusedError as exc:  # the downstream's own error, as a direct client gets it
            raise MCPError(code=exc.code, message=exc.rpc_message, data=exc.data) from None
        return _call_result(raw, name)

    async def as_caller(
        self,
        ctx: Any,
        request_state: str | None,
        input_responses: types.InputResponses | None,
        run: Run,
    ) -> Raw | types.InputRequiredResult:
        """`run` a client's request as that client: what a downstream asks or logs meanwhile goes to it.

        A handshake-era client is asked directly; a 2026-era one through the bridge's rounds when it
        can be asked anything (or it is the next round of one), else with an `Unreachable` caller.
        """
        session: ServerSession = ctx.session
        if session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            caller = SessionCaller(session, ctx.request_id, self.logs.level_of)
            return await run(session.report_progress, caller)
        bridge = _bridge_of(ctx.lifespan_context)
        if bridge is None or (not ours(request_state) and asks_nothing(session.client_capabilities)):
            return await run(session.report_progress, Unreachable(session, ctx.meta))
        client = bridge if ctx.request is None else None  # no HTTP request: the stream's one client
        report = session.report_progress
        replica = replica_of_request(ctx.request)
        return await bridge.run(
            session, ctx.meta, request_state, input_responses, run, report=report, client=client, replica=replica
        )

    async def _fast_call_tool(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """`tools/call` without model round trips (handshake era once initialized; 2026 era when no round can
        be needed: `as_caller` would use `Unreachable`); a 2026 answer gets the runner's `modern_complete`."""
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        session = ctx.session
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        rounds = params.get("requestState") is not None or params.get("inputResponses") is not None
        if (rounds or not asks_nothing(session.client_capabilities)) if modern else session.client_params is None:
            return await call_next(ctx)  # 2026: rounds may be needed (the bridge); handshake: not initialized
        name, raw_arguments, raw_meta = params.get("name"), params.get("arguments"), params.get("_meta")
        arguments, meta = object_or_none(raw_arguments), object_or_none(raw_meta)
        if (
            not isinstance(name, str)
            or (raw_arguments is not None and arguments is None)
            or (raw_meta is not None and meta is None)
        ):
            return await call_next(ctx)  # malformed: the SDK's validation gives the proper error
        self._remember(session)
        asked = modern or (meta is not None and meta.get("progressToken") is not None)  # 2026: as `as_caller`
        progress = session.report_progress if asked else None
        http_request = ctx.request if modern else None
        approve = None if modern else elicitation_approver(session, ctx.request_id)
        caller = Unreachable(session, meta) if modern else SessionCaller(session, ctx.request_id, self.logs.level_of)
        profile, window = self.client_of(ctx), window_of(ctx.lifespan_context)
        try:
            if self.tool_search is not None:
                answered, name, arguments = await self._searched_call(session, http_request, name, arguments, profile)
                if answered is not None:
                    return modern_complete(to_wire(answered), self.server_info_stamp) if modern else to_wire(answered)
            owner = self._shell_owner(session, http_request, window)
            context = self._context(ctx, profile, owner, caller, approve=approve, progress=progress, meta=meta)
            result = await self.toolbox.call_tool_wire(name, arguments, context)
            if self.tool_search is not None:
                await self._called(session, http_request, name)
            return modern_complete(result, self.server_info_stamp) if modern else result
        except UnknownToolError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except DownstreamRefusedError as exc:  # the downstream's own error, as a direct client gets it
            raise MCPError(code=exc.code, message=exc.rpc_message, data=exc.data) from None

    # -- logging -----------------------------------------------------------------------------

    def client_log_level(self) -> str | None:
        """The log level asked for by a (the, over stdio) handshake-era client, if any."""
        return next((level for c in list(self._connections) if (level := self.logs.level_of(c)) is not None), None)

    async def _on_set_level(self, ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        self._remember(ctx.session)
        self.logs.set_level(connection_of(ctx.session), params.level)
        return types.EmptyResult()

    # -- clients, for the downstreams' requests ----------------------------------------------

    async def _on_initialized(self, ctx: Any, params: types.NotificationParams) -> None:
        """A handshake-era client is ready: downstream requests outside any call may go to it."""
        session: ServerSession = ctx.session
        if self.catalog is None or session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        requests, connection = self.catalog.client_requests, connection_of(session)
        await requests.add_client(SessionCaller(session, None, self.logs.level_of))
        connection.exit_stack.push_async_callback(requests.remove_client, connection)

    async def _on_roots_list_changed(self, ctx: Any, params: types.NotificationParams) -> None:
        if self.catalog is not None:
            await self.catalog.client_requests.client_roots_changed(connection_of(ctx.session))

    # -- change notifications ----------------------------------------------------------------

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """By default: `listChanged` for tools (and for prompts/resources with downstreams)."""
        if notification_options is None:
            downstream = self.catalog is not None
            notification_options = NotificationOptions(
                tools_changed=True, prompts_changed=downstream, resources_changed=downstream
            )
        options = super().create_initialization_options(notification_options, experimental_capabilities, extensions)
        if self.tasks is not None:  # declared only where the era defines tasks (the SDK sieves it elsewhere)
            options.capabilities = options.capabilities.model_copy(update={"tasks": TASKS_CAPABILITY})
        return options

    def initialization_options(self) -> InitializationOptions:
        """The default initialization options (see `create_initialization_options`)."""
        return self.create_initialization_options()

    async def run(
        self,
        read_stream: ReadStream[SessionMessage | Exception],
        write_stream: WriteStream[SessionMessage],
        initialization_options: InitializationOptions,
        raise_exceptions: bool = False,
        *,
        window: ClientProfile | None = None,
    ) -> None:
        """Serve one connection, as `Server.run`; an attached `window`'s (`server/unix.py`) with its profile
        in the lifespan state, where every request of the connection finds it (`window_of`)."""
        if window is None:
            return await super().run(read_stream, write_stream, initialization_options, raise_exceptions)
        async with self.lifespan(self) as state:
            await serve_dual_era_loop(
                self,
                read_stream,
                write_stream,
                lifespan_state={**state, WINDOW_STATE: window},
                init_options=initialization_options,
                raise_exceptions=raise_exceptions,
            )

    @asynccontextmanager
    async def _lifespan(self, _: Server[Any]) -> AsyncGenerator[dict[str, Any]]:
        # The SDK enters the lifespan once per `Server.run` (a stdio connection) and once for the whole
        # HTTP hub (its session manager), not per HTTP session. One connection at a time leads
        # (forwards list changes and logs to every remembered connection); when the leader's
        # connection ends, another live one takes over, so an HTTP hub never goes deaf.
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(self._lead_when_needed)
            yield {_BRIDGE: Bridge(task_group)}
            task_group.cancel_scope.cancel()

    async def _lead_when_needed(self) -> None:
        while True:
            if not self._following:
                self._following = True
                try:
                    async with anyio.create_task_group() as task_group:
                        task_group.start_soon(self.logs.run)
                        if self.catalog is not None:
                            task_group.start_soon(self.follow_changes)
                finally:
                    self._following = False
                    self._leader_gone.set()
                    self._leader_gone = anyio.Event()
            await self._leader_gone.wait()

    async def _notify(self, kind: str) -> None:
        await self._bus.publish(
            {"tools": ToolsListChanged, "prompts": PromptsListChanged}.get(kind, ResourcesListChanged)()
        )
        for connection in list(self._connections):
            with anyio.move_on_after(_NOTIFY_SECONDS):
                try:
                    if kind == "tools":
                        await connection.send_tool_list_changed()
                    elif kind == "prompts":
                        await connection.send_prompt_list_changed()
                    else:
                        await connection.send_resource_list_changed()
                except Exception as exc:  # boundary: a gone client must not break the others
                    logger.debug("%s/list_changed not delivered: %s", kind, exc)

    async def follow_changes(self) -> None:
        """Forward every change of the downstream lists to the clients, until cancelled."""
        catalog = self.catalog
        if catalog is None:
            return
        # Kept on the server, not here: a leader taking over announces what changed in between.
        if self._announced is None:
            self._announced = catalog.versions()
        while True:
            now = catalog.versions()
            for kind, before, after in zip(("tools", "prompts", "resources"), self._announced, now, strict=True):
                if after != before:
                    await self._notify(kind)
            self._announced = now
            await catalog.wait_changed()


def build_server(
    toolbox: Toolbox,
    *,
    catalog: Downstreams | None = None,
    instructions: str | None = None,
    client_instructions: HubInstructions | None = None,
    tool_search: SessionTools | None = None,
    profiles: Profiles | None = None,
    traced: bool = False,
) -> OmegaServer:
    """The MCP server for a (started) Toolbox; downstream prompts and resources come from `catalog`.

    Pass the same (entered) `Downstreams` the Toolbox routes to. Without one the lists are simply
    empty: a hub always answers prompts/list, resources/list and completion. `tool_search` (a
    `SessionTools` over the same Toolbox) puts the hub in search mode when its catalog calls for it;
    `profiles` (the HTTP hub's `[hub.clients]`) scope each request to its client (`ClientScope`);
    `traced` puts the SDK's request spans back, outermost (tracing.py).
    """
    server = OmegaServer(
        toolbox,
        catalog=catalog if catalog is not None else Downstreams([]),
        instructions=instructions,
        client_instructions=client_instructions,
        tool_search=tool_search,
        profiles=profiles,
    )
    scope = [ClientScope(profiles)] if profiles is not None else []
    server.middleware[:0] = [*([request_spans()] if traced else []), *scope]  # spans outermost
    return server
