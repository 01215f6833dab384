"""One live connection to a downstream MCP server: transport, handshake, listings, raw requests.

A `DownstreamSession` lives for one connection attempt; the supervisor in `proxy.py` makes a new
one for every (re)start. It is assembled from SDK parts exactly as `mcp.Client(mode="legacy")`
does (transport streams → `JSONRPCDispatcher` → `ClientSession` → `initialize`), because the
handshake era is what every server in the wild speaks, carries `notifications/*/list_changed`
and `notifications/cancelled`, and costs no `server/discover` probe. Holding the dispatcher lets
a `tools/call` go out and come back as plain JSON: the downstream's result is handed upstream
without being parsed into models and dumped again (the hot path). A stdio server started early
by `EarlyStarts` (spawn.py) was already sent `initialize`: its answer is read and adopted instead.
`closed` fires when the transport reaches EOF (a stdio server exiting), which is how a crash is
noticed; remote URLs try streamable HTTP, then SSE (SSE first for URLs ending in `/sse`).
The server's own requests (sampling, elicitation, roots) go to `ServerRequests` (client_requests.py),
whose callbacks also decide which client capabilities the handshake declares.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Self, TypeVar, cast

import anyio
import httpx2
from anyio import AsyncContextManagerMixin
from mcp import types
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError

from omega_mcp._sdk import Streams
from omega_mcp.loglevels import python_level
from omega_mcp.pipes import PipeReader, PipeWriter
from omega_mcp.proxy.bounds import bound_json, too_large
from omega_mcp.proxy.client_requests import ServerRequests
from omega_mcp.proxy.oauth import auth_failure, http_auth
from omega_mcp.proxy.spawn import INIT_ID, EarlyStarts
from omega_mcp.proxy.spec import Catalog, DownstreamSpec, Target, usable_tools
from omega_mcp.proxy.stdio import StdioTransport
from omega_mcp.proxy.streams import EofWatch
from omega_mcp.version import __version__

__all__ = ["DownstreamSession"]

logger = logging.getLogger(__name__)


_CLIENT_INFO = types.Implementation(name="omega-mcp", version=__version__)
_T = TypeVar("_T")


class DownstreamSession(AsyncContextManagerMixin):
    """A connected, initialized session with one downstream server (enter to connect).

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
        self._warned = warned if warned is not None else set[str]()
        self.closed = anyio.Event()
        self.close_reason: str | None = None
        self.stdio: StdioTransport | None = None
        self.capabilities = types.ServerCapabilities()
        self.server_info: types.Implementation | None = None
        self._signals: set[str] = set()
        self._wake = anyio.Event()
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
        self._session: ClientSession | None = None
        self._headers: dict[str, str] = {}
        self.pipes: tuple[PipeReader, PipeWriter] | None = None
        """The raw pipes of a stdio server (the tools/call relay writes and intercepts on them)."""
        self._close_callbacks: list[Callable[[], None]] = []

    # -- lifecycle ---------------------------------------------------------------------------

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        target = self.spec.target
        async with AsyncExitStack() as stack:
            if isinstance(target, str):
                stack.push_async_exit(await self._connect_url(target))
            else:
                await self._connect(stack, self._transport(target))
            try:
                yield self
            finally:
                self._lost("omega is shutting the connection down")

    def _transport(self, target: Target) -> AbstractAsyncContextManager[Streams]:
        if isinstance(target, StdioServerParameters):
            self.stdio = StdioTransport(
                target,
                server_name=self.spec.server_name,
                early=self._early,
                confinement=self.spec.confinement,
                guard=self.spec.guard,
                max_message_bytes=self.spec.max_message_bytes,
            )
            return self.stdio
        if isinstance(target, str):
            raise TypeError("URL targets are connected by _connect_url")
        return target()

    async def _connect_url(self, url: str) -> AsyncExitStack:
        """Streamable HTTP first, then the older SSE transport (first for URLs ending in `/sse`).

        With `auth = "oauth"` both go through the OAuth client (proxy/oauth.py); an OAuth failure
        (`needs login: ...`) ends the attempt at once: the other transport would fail the same way.
        """
        headers = dict(self.spec.headers)
        auth = http_auth(self.spec.oauth) if self.spec.oauth is not None else None

        refused: list[str] = []

        limit = self.spec.max_message_bytes

        async def note_refusal(response: httpx2.Response) -> None:
            if response.status_code >= 400 and not refused:  # the SDK reports it as "an error response"
                refused.append(f"HTTP {response.status_code} {response.reason_phrase}".rstrip())
            bound_json(response, limit)

        def streamable(stack: AsyncExitStack) -> AbstractAsyncContextManager[Streams]:
            # The SDK's defaults: 30 s to connect or write, 300 s of silence on a stream.
            client = httpx2.AsyncClient(
                headers=headers,
                auth=auth,
                timeout=httpx2.Timeout(30.0, read=300.0),
                event_hooks={"response": [note_refusal]},
            )
            stack.push_async_callback(client.aclose)
            return streamable_http_client(url, http_client=client, max_sse_event_size=limit)

        def sse(_: AsyncExitStack) -> AbstractAsyncContextManager[Streams]:
            return sse_client(url, headers=headers, auth=auth)

        attempts = [sse, streamable] if url.rstrip("/").endswith("/sse") else [streamable, sse]
        first_error: Exception | None = None
        for make in attempts:
            try:
                async with AsyncExitStack() as stack:
                    await self._connect(stack, make(stack))
                    return stack.pop_all()
            except Exception as exc:  # the other transport may still work; report the first failure
                logger.debug("[%s] %s transport failed: %r", self.spec.server_name, make.__name__, exc)
                if (oauth_failure := auth_failure(exc)) is not None:
                    raise oauth_failure from None
                first_error = first_error or exc
        assert first_error is not None
        if refused:
            raise MCPError(types.INTERNAL_ERROR, refused[0]) from first_error
        raise first_error

    async def _connect(self, stack: AsyncExitStack, transport: AbstractAsyncContextManager[Streams]) -> None:
        read, write = await stack.enter_async_context(transport)
        early: dict[str, Any] | None = None
        if isinstance(read, PipeReader) and isinstance(write, PipeWriter):
            self.pipes = (read, write)
            if self.stdio is not None and self.stdio.early_initialize:
                with anyio.fail_after(self.spec.timeout_seconds):  # initialize is a request: `timeout` bounds it
                    early = await self._early_answer(read)
        dispatcher = JSONRPCDispatcher[Any](
            EofWatch(read, lambda: self._lost(self.stopped_because() or "the server closed the connection")), write
        )
        options = self._requests.session_options() if self._requests is not None else {}
        session = ClientSession(
            dispatcher=dispatcher, client_info=_CLIENT_INFO, message_handler=self._on_message, **options
        )
        await stack.enter_async_context(session)
        if early is None:
            with anyio.fail_after(self.spec.timeout_seconds):
                result = await session.initialize()
        else:
            # EarlyStarts already sent `initialize`: take its answer and finish the handshake.
            result = types.InitializeResult.model_validate(early, by_name=False)
            if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
                raise MCPError(types.INVALID_REQUEST, f"unsupported protocol version {result.protocol_version}")
            session.adopt(result)
            await session.send_notification(types.InitializedNotification())
        self._dispatcher, self._session = dispatcher, session
        self.capabilities = result.capabilities
        self.server_info = result.server_info
        # What the SDK's handshake-era stamp sets; only the HTTP transport reads it.
        self._headers = {MCP_PROTOCOL_VERSION_HEADER: result.protocol_version}

    async def _early_answer(self, read: PipeReader) -> dict[str, Any]:
        """The answer to the `initialize` that `EarlyStarts.start` wrote before the SDK was loaded."""
        while True:
            try:
                item = await read.receive()
            except anyio.EndOfStream:
                raise MCPError(types.CONNECTION_CLOSED, "Connection closed") from None
            if not isinstance(item, SessionMessage):
                continue
            message = item.message
            if isinstance(message, types.JSONRPCResponse) and message.id == INIT_ID:
                return message.result
            if isinstance(message, types.JSONRPCError) and message.id == INIT_ID:
                raise MCPError.from_error_data(message.error)
            # Anything before the answer (a log line as a notification) has no session to go to yet.

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

    # -- signals from the downstream ---------------------------------------------------------

    def _lost(self, reason: str) -> None:
        if not self.closed.is_set():
            self.close_reason = reason
            self.closed.set()
            self._wake.set()
            for callback in self._close_callbacks:
                try:
                    callback()
                except Exception:  # boundary: an observer must not break the connection's shutdown
                    logger.exception("[%s] close callback failed", self.spec.server_name)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` (synchronously, once) when the connection ends."""
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

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            logger.debug("[%s] transport error: %r", self.spec.server_name, message)
            return
        match message:
            case types.ToolListChangedNotification():
                self._signal("tools")
            case types.PromptListChangedNotification():
                self._signal("prompts")
            case types.ResourceListChangedNotification():
                self._signal("resources")
            case types.LoggingMessageNotification(params=params):
                # Re-logged under omega's logger: stderr shows it, and clients that asked for logs
                # (logging/setLevel) receive it, attributed to this server.
                data = params.data if isinstance(params.data, str) else json.dumps(params.data, default=str)
                logging.getLogger(f"omega_mcp.downstream.{self.spec.server_name}").log(
                    python_level(params.level), "%s%s", f"{params.logger}: " if params.logger else "", data
                )
            case types.ElicitCompleteNotification() if self._requests is not None:
                await self._requests.on_notification(message)
            case _:
                pass

    def _signal(self, kind: str) -> None:
        self._signals.add(kind)
        self._wake.set()

    async def next_signals(self) -> set[str]:
        """Wait for list_changed notifications (or the end); returns the kinds that changed."""
        await self._wake.wait()
        self._wake = anyio.Event()
        kinds, self._signals = self._signals, set()
        if self.closed.is_set():
            self._wake.set()  # stay awake: every later wait returns at once
        return kinds

    # -- listings ----------------------------------------------------------------------------

    @property
    def session(self) -> ClientSession:
        """The SDK session (only while entered)."""
        if self._session is None:
            raise RuntimeError("DownstreamSession used outside its context")
        return self._session

    async def _paginate(
        self, fetch: Callable[[types.PaginatedRequestParams | None], Awaitable[Any]], items: str
    ) -> list[Any]:
        found: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:  # every page: one that never ends is bounded by the listing's timeout
            page = await fetch(types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            found.extend(getattr(page, items))
            cursor = page.next_cursor
            if not cursor or self._looped(cursor, seen, items):
                return found

    def _looped(self, cursor: str, seen: set[str], items: str) -> bool:
        """Whether a listing came back to a cursor it already followed (it would never end)."""
        if cursor not in seen:
            seen.add(cursor)
            return False
        logger.warning(
            "[%s] its %s list repeats the cursor %r; listing stops there", self.spec.server_name, items, cursor
        )
        return True

    async def list_tools(self) -> tuple[types.Tool, ...]:
        """Every usable tool the spec's globs let through, in the server's order.

        Read as raw JSON, one tool at a time: one broken tool definition must not cost the others.

        Raises:
            MCPError: the server refused the listing, or did not answer within its `timeout`.
            ValueError: the answer carries no `tools` list.
        """
        tools: list[types.Tool] = []
        seen: set[str] = set()
        cursors: set[str] = set()
        cursor: object = None
        while True:  # every page: one that never ends is bounded by the listing's timeout
            params = {"cursor": cursor} if isinstance(cursor, str) and cursor else None
            page = await self.request("tools/list", params, timeout_seconds=self.spec.timeout_seconds)
            raw = page.get("tools")
            if not isinstance(raw, list):
                raise ValueError("its tools/list answer has no `tools` list")
            tools += usable_tools(self.spec.server_name, cast(list[object], raw), seen, self._warned)
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor or self._looped(cursor, cursors, "tools"):
                break
        for glob in self.spec.unmatched_globs([t.name for t in tools]):
            if f"filter {glob}" not in self._warned:  # once per server and glob, across re-lists
                self._warned.add(f"filter {glob}")
                logger.warning(
                    "server %s: the filter %r matches none of its %d tools", self.spec.server_name, glob, len(tools)
                )
        return tuple(t for t in tools if self.spec.exports(t.name))

    async def _optional(self, kind: str, fetch: Callable[[], Awaitable[Sequence[_T]]]) -> tuple[_T, ...]:
        try:
            return tuple(await fetch())
        except Exception as exc:  # a broken optional listing must not take the server's tools down
            logger.warning("[%s] listing %s failed: %s", self.spec.server_name, kind, exc)
            return ()

    async def list_prompts(self) -> tuple[types.Prompt, ...]:
        """The server's prompts (empty when it has none or listing them fails)."""
        if self.capabilities.prompts is None:
            return ()
        return await self._optional(
            "prompts", lambda: self._paginate(lambda p: self.session.list_prompts(params=p), "prompts")
        )

    async def list_resources(self) -> tuple[tuple[types.Resource, ...], tuple[types.ResourceTemplate, ...]]:
        """The server's resources and resource templates (empty when it has none)."""
        if self.capabilities.resources is None:
            return (), ()
        session = self.session
        resources = await self._optional(
            "resources", lambda: self._paginate(lambda p: session.list_resources(params=p), "resources")
        )
        templates = await self._optional(
            "resource templates",
            lambda: self._paginate(lambda p: session.list_resource_templates(params=p), "resource_templates"),
        )
        return resources, templates

    async def catalog(self) -> Catalog:
        """Everything the server exports, listed afresh."""
        tools = await self.list_tools()
        prompts = await self.list_prompts()
        resources, templates = await self.list_resources()
        return Catalog(tools, prompts, resources, templates)

    # -- requests ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout_seconds: float,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send one request and return the raw result dict (unparsed: it is passed on as is).

        Raises:
            MCPError: the server answered with an error, the request timed out (`REQUEST_TIMEOUT`,
                after sending `notifications/cancelled`) or the connection closed (`CONNECTION_CLOSED`).
        """
        if self._dispatcher is None:
            raise RuntimeError("DownstreamSession used outside its context")
        opts: CallOptions = {"timeout": timeout_seconds, "headers": dict(self._headers)}
        if progress is not None:
            opts["on_progress"] = progress
        try:
            return await self._dispatcher.send_raw_request(method, params, opts)
        except MCPError as exc:
            raise too_large(exc, self.spec.max_message_bytes) or exc from None
