"""One live connection to a downstream MCP server, in the era it speaks: listings, raw requests, signals.

A `DownstreamSession` lives for one connection attempt; the supervisor makes a new one for every
(re)start. It opens one `Link` (connect.py) in the era the server speaks, as the SDK client finds
it: 2026-07-28 when the server offers it (stateless servers included), else the handshake. Each
request is then sent as the client behind it (its `caller`) would send it directly: a 2026-era
client's over the 2026 channel with its own envelope; a handshake-era client's over a handshake
channel, which for a server speaking both eras is a second link opened on first use (a second
process of a stdio server), since a handshake-era client's server may ask it things mid-call that
no 2026-era connection can carry. A request no channel of the client's era can carry is bridged:
2026 input-required rounds are answered for a handshake-era client (rounds.py), and a handshake
server's requests reach a 2026-era client as rounds (server/bridge.py). Results come back raw (the
hot path parses nothing). List changes arrive as notifications (handshake) or on a
`subscriptions/listen` stream (2026), and so do resource updates; a downstream's log message goes
to the client whose call it belongs to, as it is. A plain `tools/call` of a tool the last listing
marked task-only is run as a task (tasks.py). `closed` fires when the primary link ends.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Self

import anyio
import anyio.abc
from anyio import AsyncContextManagerMixin
from mcp import types
from mcp.client.session import IncomingMessage
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from omega_mcp.loglevels import ROUTED, python_level
from omega_mcp.proxy.bounds import too_large
from omega_mcp.proxy.client_requests import CALLER, Caller, ServerRequests
from omega_mcp.proxy.connect import CLIENT_INFO, Link, open_link, open_primary
from omega_mcp.proxy.eras import Era, HandshakeChannel, modern_envelope
from omega_mcp.proxy.http_lane import Lane
from omega_mcp.proxy.listing import list_catalog, list_prompts, list_resources
from omega_mcp.proxy.listing import list_tools as list_raw_tools
from omega_mcp.proxy.modern import Envelope, ModernChannel
from omega_mcp.proxy.rounds import answer_rounds, without_modern_fields
from omega_mcp.proxy.spawn import EarlyStarts
from omega_mcp.proxy.spec import Catalog, DownstreamSpec
from omega_mcp.proxy.stdio import StdioTransport
from omega_mcp.proxy.tasks import run_as_task, task_only
from omega_mcp.wire.pipes import PipeReader, PipeWriter

__all__ = ["DownstreamSession"]

logger = logging.getLogger(__name__)

_ASKING = ("tools/call", "prompts/get", "resources/read")
"""The requests a 2026-era server may answer with an input-required round."""


class DownstreamSession(AsyncContextManagerMixin):
    """A connected session with one downstream server, in its era (enter to connect).

    Raises on enter:
        OSError: a stdio command cannot be started.
        MCPError: the server refused or failed the handshake (or the connection closed during it).
        Exception: whatever the HTTP transport raises for an unreachable URL.
    """

    def __init__(
        self,
        spec: DownstreamSpec,
        *,
        warned: set[str] | None = None,
        early: EarlyStarts | None = None,
        requests: ServerRequests | None = None,
    ) -> None:
        """`requests` answers the server's requests to its client (client_requests.py); None declines them."""
        self.spec = spec
        self._early = early
        self._requests = requests
        if requests is not None:
            requests.connection = self  # a task's notifications and requests name the connection it runs on
        self._warned = warned if warned is not None else set[str]()
        self.closed = anyio.Event()
        self.close_reason: str | None = None
        self.stdio: StdioTransport | None = None
        self._link: Link | None = None
        self._second: Link | None = None
        """A dual-era server's handshake link, opened for the first handshake-era client that needs it."""
        self._second_lock = anyio.Lock()
        self._second_failed: str | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._signals: set[str] = set()
        self._wake = anyio.Event()
        self._close_callbacks: list[Callable[[], None]] = []
        self.on_updated: Callable[[str, str], Awaitable[None]] | None = None
        """Told of each `resources/updated` (server name, URI); set by the supervisor."""
        self.task_only: frozenset[str] = frozenset()
        """The tools of its last listing that run only as tasks: a plain call of one is run as a task."""

    # -- lifecycle ---------------------------------------------------------------------------

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        async with AsyncExitStack() as stack:
            self._link = await open_primary(
                stack,
                self.spec,
                memory=self._warned,
                requests=self._requests,
                on_message=self._primary_message,
                on_eof=lambda: self._lost(self.stopped_because() or "the server closed the connection"),
                early=self._early,
                stdio_ready=self._stdio_ready,
            )
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                modern = self.modern
                if modern is not None:
                    task_group.start_soon(modern.follow, self._signal, self._updated, name="omega listen")
                try:
                    yield self
                finally:
                    self._task_group = None
                    self._lost("omega is shutting the connection down")
                    task_group.cancel_scope.cancel()

    def _stdio_ready(self, stdio: StdioTransport) -> None:
        self.stdio = stdio

    @property
    def link(self) -> Link:
        """The primary link (only while entered)."""
        if self._link is None:
            raise RuntimeError("DownstreamSession used outside its context")
        return self._link

    @property
    def era(self) -> Era:
        """The era the server is spoken to in (for a server speaking both, its 2026 side)."""
        return self.link.era

    @property
    def modern(self) -> ModernChannel | None:
        link = self._link
        return link.channel if link is not None and isinstance(link.channel, ModernChannel) else None

    @property
    def capabilities(self) -> types.ServerCapabilities:
        return self.link.capabilities if self._link is not None else types.ServerCapabilities()

    async def capabilities_for_caller(self, caller: Caller | None) -> types.ServerCapabilities:
        """What the side `caller`'s requests go to declares (a dual-era server's handshake side for a
        handshake-era client, opened now if need be)."""
        return (await self._channel_for(caller)).capabilities

    @property
    def server_info(self) -> types.Implementation | None:
        return self._link.server_info if self._link is not None else None

    @property
    def pipes(self) -> tuple[PipeReader[Any], PipeWriter[Any]] | None:
        """The primary link's raw pipes (a stdio server), or None."""
        return self._link.pipes if self._link is not None else None

    def _link_for(self, modern: bool) -> Link | None:
        """The link a client of that era's `tools/call` goes to as it is (None: not open, or none: a
        handshake-era call to a 2026-only server needs the envelope the SDK path adds)."""
        link = self._link
        if link is not None and link.era == "modern" and not modern:
            return self._second if link.handshake_too else None
        return link

    def pipes_for(self, modern: bool) -> tuple[PipeReader[Any], PipeWriter[Any]] | None:
        """The raw pipes a client of that era's `tools/call` goes to now (None: not a stdio link, or not open)."""
        return link.pipes if (link := self._link_for(modern)) is not None else None

    def lane_for(self, modern: bool) -> Lane | None:
        """The relay's HTTP lane a client of that era's `tools/call` goes to now (None: not one, or not open)."""
        return link.lane if (link := self._link_for(modern)) is not None else None

    # -- failures ----------------------------------------------------------------------------

    def with_exit(self, reason: str) -> str:
        """`reason`, with how the server process ended when it exited by itself."""
        stdio = self.stdio
        if stdio is not None and stdio.overflow is not None:
            return stdio.overflow
        if stdio is not None and stdio.exited_by_itself:
            return f"{reason} ({stdio.exit_detail()})"
        hint = stdio.confinement_hint() if stdio is not None else None
        return f"{reason} ({hint})" if hint else reason

    def failure(self, exc: BaseException) -> str:
        """Why this connection failed, in one line for `server X is down: ...`."""
        if isinstance(exc, TimeoutError):  # only the handshake is bounded by a raising timeout
            return self.with_exit(f"no answer to initialize within timeout ({self.spec.timeout_seconds:g} s)")
        if isinstance(exc, OSError) and self.stdio is not None and self.stdio.pid is None:
            cwd = self.stdio.params.cwd
            if cwd is not None and exc.filename == str(cwd):  # not the program: where it was to run
                return f"cannot start: its working directory {cwd} {exc.strerror} (servers.{self.spec.server_name}.cwd)"
            return f"cannot start {self.stdio.params.command!r}: {exc.strerror or exc}"
        if isinstance(exc, MCPError):
            if exc.code == types.CONNECTION_CLOSED:
                return self.with_exit("the connection closed during the handshake")
            return self.with_exit(f"handshake failed: {exc.message}")
        if isinstance(exc, ValidationError):  # an answer that is no MCP
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or exc.title
            return self.with_exit(f"the server's {exc.title} is invalid: `{where}`: {problem['msg']}")
        if isinstance(self.spec.target, str):
            return f"cannot reach {self.spec.target}: {type(exc).__name__}: {exc}"
        return self.with_exit(f"{type(exc).__name__}: {exc}")

    def _lost(self, reason: str) -> None:
        if not self.closed.is_set():
            self.close_reason = reason
            self.closed.set()
            self._wake.set()
            self._closed_callbacks()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` (synchronously, once) when the connection ends, or when its second link does."""
        if self.closed.is_set():
            callback()
        else:
            self._close_callbacks.append(callback)

    def stopped_because(self) -> str | None:
        """Why omega itself ended the connection (a message over `[hub] max_message_mb`), or None."""
        return self.stdio.overflow if self.stdio is not None else None

    def lose(self, reason: str) -> None:
        """Declare the connection dead (a call saw it fail); the supervisor will reconnect."""
        self._lost(reason)

    # -- what the server sends ---------------------------------------------------------------

    async def _primary_message(self, message: IncomingMessage) -> None:
        await self._on_message(message, primary=True)

    async def _second_message(self, message: IncomingMessage) -> None:
        await self._on_message(message, primary=False)

    async def _on_message(self, message: IncomingMessage, *, primary: bool) -> None:
        if isinstance(message, Exception):
            logger.debug("[%s] transport error: %r", self.spec.server_name, message)
            return
        follows = primary and self._link is not None and self._link.era == "handshake"  # 2026: the listen stream
        match message:
            case types.ToolListChangedNotification() if follows:
                self._signal("tools")
            case types.PromptListChangedNotification() if follows:
                self._signal("prompts")
            case types.ResourceListChangedNotification() if follows:
                self._signal("resources")
            case types.ResourceUpdatedNotification(params=params) if follows or not primary:
                await self._updated(params.uri)
            case types.LoggingMessageNotification(params=params):
                await self._route_log(params)
            case types.ElicitCompleteNotification() if self._requests is not None:
                await self._requests.on_notification(message)
            case _:
                pass

    async def _route_log(self, params: types.LoggingMessageNotificationParams) -> None:
        """omega's log shows it; the client whose call it belongs to gets it as it is (data unflattened)."""
        logging.getLogger(f"omega_mcp.downstream.{self.spec.server_name}").log(
            python_level(params.level),
            "%s%s",
            f"{params.logger}: " if params.logger else "",
            params.data,
            extra={ROUTED: True},
        )
        caller = self._requests.router.log_route(self.spec.server_name) if self._requests is not None else None
        if caller is not None:
            await caller.log(params)

    async def _updated(self, uri: str) -> None:
        if self.on_updated is not None:
            await self.on_updated(self.spec.server_name, uri)

    def _signal(self, kind: str) -> None:
        self._signals.add(kind)
        self._wake.set()

    async def next_signals(self) -> set[str]:
        """Wait for list changes (or the end); returns the kinds that changed."""
        await self._wake.wait()
        self._wake = anyio.Event()
        kinds, self._signals = self._signals, set()
        if self.closed.is_set():
            self._wake.set()  # stay awake: every later wait returns at once
        return kinds

    # -- channels ----------------------------------------------------------------------------

    async def _channel_for(self, caller: Caller | None) -> HandshakeChannel | ModernChannel:
        link = self.link
        if link.era == "handshake" or caller is None or caller.modern or not link.handshake_too:
            return link.channel
        second = await self._second_link()
        return second.channel if second is not None else link.channel

    async def _second_link(self) -> Link | None:
        """The handshake link of a dual-era server, opened now if need be (None: it cannot be)."""
        async with self._second_lock:
            if self._second is not None or self._second_failed is not None or self._task_group is None:
                return self._second
            try:
                with anyio.fail_after(self.spec.connect_timeout_seconds):
                    await self._task_group.start(self._hold_second, name="omega handshake link")
            except Exception as exc:  # the 2026 side still serves: rounds are answered for the client
                self._second_failed = str(exc) or type(exc).__name__
                logger.warning(
                    "server %s: no handshake-era connection for handshake-era clients (%s); using its 2026 side",
                    self.spec.server_name,
                    self._second_failed,
                )
            return self._second

    async def _hold_second(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        CALLER.set(None)  # started from a client's call, but belongs to no call
        gone = anyio.Event()
        try:
            async with AsyncExitStack() as stack:
                self._second = await open_link(
                    stack,
                    self.spec,
                    choice="handshake",
                    requests=self._requests,
                    on_message=self._second_message,
                    on_eof=gone.set,
                )
                task_status.started()
                await gone.wait()
                logger.info(
                    "server %s: its handshake-era connection closed; reopened when needed", self.spec.server_name
                )
        finally:
            self._second = None
            self._closed_callbacks()

    def _closed_callbacks(self) -> None:
        for callback in self._close_callbacks:
            try:
                callback()
            except Exception:  # boundary: an observer must not break the connection's shutdown
                logger.exception("[%s] close callback failed", self.spec.server_name)

    def _envelope(self, caller: Caller | None, channel: ModernChannel) -> Envelope:
        if caller is None:
            own = modern_envelope(channel.session, channel.version)
            return Envelope(
                own["io.modelcontextprotocol/clientInfo"], own["io.modelcontextprotocol/clientCapabilities"]
            )
        info = caller.client_info or CLIENT_INFO
        capabilities = caller.capabilities or types.ClientCapabilities()
        return Envelope(
            info.model_dump(by_alias=True, mode="json", exclude_none=True),
            capabilities.model_dump(by_alias=True, mode="json", exclude_none=True),
            caller.log_level,
        )

    # -- requests ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout_seconds: float,
        progress: ProgressFnT | None = None,
        caller: Caller | None = None,
    ) -> dict[str, Any]:
        """Send one request as `caller`'s client would (None: as omega itself), and return the raw result.

        A 2026-era client gets a 2026-era server's answer as it is (an input-required round included);
        anyone else gets the final answer, its rounds answered on its behalf, without 2026-only fields.

        Raises:
            MCPError: the server answered with an error, the request timed out (`REQUEST_TIMEOUT`,
                after cancelling it) or the connection closed (`CONNECTION_CLOSED`); an answer over
                `[hub] max_message_mb` is `oversize.too_large_error`.
        """
        if (
            method == "tools/call"
            and params is not None
            and "task" not in params
            and params.get("name") in self.task_only
        ):

            async def as_caller(again: str, sent: Mapping[str, Any], seconds: float) -> dict[str, Any]:
                return await self.request(again, sent, timeout_seconds=seconds, caller=caller)

            return await run_as_task(as_caller, params, timeout_seconds)
        token = CALLER.set(caller)  # for the SDK's callbacks: what the server asks meanwhile is this caller's
        try:
            channel = await self._channel_for(caller)
            if isinstance(channel, HandshakeChannel):
                if params is not None and ("requestState" in params or "inputResponses" in params):
                    # A round of a 2026-era server's, and this one is not: nothing of it can be valid here.
                    raise MCPError(types.INVALID_PARAMS, "Invalid or expired requestState")
                return await channel.request(method, params, timeout_seconds=timeout_seconds, progress=progress)
            envelope = self._envelope(caller, channel)

            async def send(sent: Mapping[str, Any] | None) -> dict[str, Any]:
                return await channel.request(method, sent, envelope, timeout_seconds=timeout_seconds, progress=progress)

            raw = await send(params)
            if caller is not None and caller.modern:
                return raw
            if method in _ASKING:

                async def retry(answers: dict[str, Any], state: str | None) -> dict[str, Any]:
                    again = {**(params or {}), "inputResponses": answers}
                    if state is not None:
                        again["requestState"] = state
                    return await send(again)

                raw = await answer_rounds(raw, retry, self._requests, channel.session)
            return without_modern_fields(raw)
        except MCPError as exc:
            raise too_large(exc, self.spec.max_message_bytes) or exc from None
        finally:
            CALLER.reset(token)

    async def _list(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return await self.request(method, params, timeout_seconds=self.spec.timeout_seconds)  # omega's own

    async def notify_roots_changed(self) -> None:
        """Tell a handshake-era server its roots changed (the 2026 era has no such notification)."""
        for link in (self._link, self._second):
            if link is not None and link.era == "handshake":
                await link.session.send_notification(types.RootsListChangedNotification())

    async def set_subscriptions(self, uris: list[str]) -> None:
        """Have the server announce updates of exactly these resources (2026: the listen filter)."""
        modern = self.modern
        if modern is not None:
            modern.subscribe_only(uris)

    async def handshake_subscription(self, uri: str, *, subscribe: bool) -> None:
        """For a server speaking both eras, (un)subscribe `uri` on its handshake link, the one handshake-era
        clients' calls use (opened now if need be), when that side offers subscriptions; else nothing.

        Raises:
            MCPError: the server refused it.
        """
        link = self.link
        if link.era == "handshake" or not link.handshake_too:
            return
        second = await self._second_link()
        resources = second.capabilities.resources if second is not None else None
        if second is None or resources is None or not resources.subscribe:
            return
        channel = second.channel
        assert isinstance(channel, HandshakeChannel)  # a second link is always the handshake side
        method = "resources/subscribe" if subscribe else "resources/unsubscribe"
        await channel.request(method, {"uri": uri}, timeout_seconds=self.spec.timeout_seconds)

    # -- listings ----------------------------------------------------------------------------

    async def list_tools(self) -> tuple[types.Tool, ...]:
        """Every usable tool the spec's globs let through, in the server's order.

        Raises:
            MCPError: the server refused the listing, or did not answer within its `timeout`.
            ValueError: the answer carries no `tools` list.
        """
        tools = await list_raw_tools(self._list, self.spec, self._warned)
        self.task_only = task_only(tools)
        modern = self.modern
        return tuple(modern.usable(tools)) if modern is not None else tools

    async def list_prompts(self) -> tuple[types.Prompt, ...]:
        """The server's prompts (empty when it has none or listing them fails)."""
        return await list_prompts(self._list, self.capabilities, self.spec.server_name)

    async def list_resources(self) -> tuple[tuple[types.Resource, ...], tuple[types.ResourceTemplate, ...]]:
        """The server's resources and resource templates (empty when it has none)."""
        return await list_resources(self._list, self.capabilities, self.spec.server_name)

    async def catalog(self) -> Catalog:
        """Everything the server exports, listed afresh."""
        catalog = await list_catalog(self._list, self.spec, self.capabilities, self._warned)
        self.task_only = task_only(catalog.tools)
        modern = self.modern
        if modern is None:
            return catalog
        return Catalog(
            tuple(modern.usable(catalog.tools)), catalog.prompts, catalog.resources, catalog.resource_templates
        )
