"""Opening one connection (a `Link`) to a downstream: its transport, its SDK session, its era.

The transport is what the spec names: a stdio process (`StdioTransport`; its first start may be
one `EarlyStarts` made, which was sent the era probe and the handshake before the SDK loaded, so
their answers are read here first), a URL (streamable HTTP, then the older SSE transport, which
speaks only the handshake era; SSE first for URLs ending in `/sse`), or a transport factory
(tests). On it runs an SDK `ClientSession` over a `JSONRPCDispatcher`, asked its era by
`eras.negotiate` and wrapped as a `HandshakeChannel` or a `ModernChannel`. Everything is entered on
the caller's exit stack. Over HTTP an answer is bounded by `max_message_mb` (`bounds.py`). The
session reads through an `EofWatch`, by which the link notices that its server went away. The probe
never costs a server (`open_primary`): a stdio server that the probe and handshake together fail
to connect (it crashed on `server/discover`) is started again and asked the handshake alone, and
from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from mcp import types
from mcp.client.session import ClientSession, MessageHandlerFnT
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage

from omega_mcp._sdk import ReadStream, Streams
from omega_mcp.proxy.bounds import bound_json
from omega_mcp.proxy.client_requests import ServerRequests
from omega_mcp.proxy.eras import Era, EraChoice, HandshakeChannel, negotiate, settle_early, usable_answer
from omega_mcp.proxy.http_lane import Lane, lane_for, with_inbox
from omega_mcp.proxy.modern import ModernChannel
from omega_mcp.proxy.oauth import auth_failure, http_auth
from omega_mcp.proxy.spawn import EARLY_IDS, EarlyStarts
from omega_mcp.proxy.spec import DownstreamSpec
from omega_mcp.proxy.stdio import StdioTransport
from omega_mcp.version import __version__
from omega_mcp.wire.pipes import MessageReadStream, PipeReader, PipeWriter

__all__ = ["CLIENT_INFO", "EofWatch", "Link", "open_link", "open_primary"]

logger = logging.getLogger(__name__)

CLIENT_INFO = types.Implementation(name="omega-mcp", version=__version__)
OnMessage = MessageHandlerFnT


class EofWatch(MessageReadStream[SessionMessage]):
    """A read stream that reports its end (the peer went away) before passing it on."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    def __getattr__(self, name: str) -> Any:  # `last_context` and friends, when the inner stream has them
        return getattr(self._inner, name)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_eof()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(slots=True)
class Link:
    """One open connection to a downstream, in one era."""

    era: Era
    session: ClientSession
    channel: HandshakeChannel | ModernChannel
    handshake_too: bool
    """Whether a second, handshake-era link may be tried for handshake-era clients (a 2026-era server
    does not say whether it also speaks the handshake era: SDK servers list only their 2026 versions)."""
    stdio: StdioTransport | None = None
    pipes: tuple[PipeReader[Any], PipeWriter[Any]] | None = None
    lane: Lane | None = None
    """The relay's own POSTs to a streamable HTTP server (proxy/http_lane.py), when it can make them."""

    @property
    def capabilities(self) -> types.ServerCapabilities:
        return self.channel.capabilities

    @property
    def server_info(self) -> types.Implementation | None:
        return self.channel.server_info


async def _early_answers(read: PipeReader[Any], asked: tuple[str, ...]) -> dict[str, Mapping[str, Any] | MCPError]:
    """The answers to the probe and handshake `EarlyStarts.start` wrote: until one is usable or all came back."""
    answers: dict[str, Mapping[str, Any] | MCPError] = {}
    keys = {EARLY_IDS[key]: key for key in asked}
    while len(answers) < len(asked):
        try:
            item = await read.receive()
        except anyio.EndOfStream:
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed") from None
        if not isinstance(item, SessionMessage):
            continue
        message = item.message
        if isinstance(message, types.JSONRPCResponse) and message.id in keys:
            key = keys[message.id]
            answers[key] = message.result
            if usable_answer(key, message.result):
                break
        if isinstance(message, types.JSONRPCError) and message.id in keys:
            answers[keys[message.id]] = MCPError.from_error_data(message.error)
        # Anything else before the answers (a log line as a notification) has no session to go to yet.
    return answers


async def _open(
    stack: AsyncExitStack,
    spec: DownstreamSpec,
    transport: AbstractAsyncContextManager[Streams],
    *,
    choice: EraChoice,
    http: bool,
    requests: ServerRequests | None,
    on_message: OnMessage,
    on_eof: Callable[[], None],
    stdio: StdioTransport | None = None,
) -> Link:
    read, write = await stack.enter_async_context(transport)
    pipes = (read, write) if isinstance(read, PipeReader) and isinstance(write, PipeWriter) else None
    early: dict[str, Mapping[str, Any] | MCPError] | None = None
    if pipes is not None and stdio is not None and stdio.early_asked:
        with anyio.fail_after(spec.timeout_seconds):  # the handshake is a request: `timeout` bounds it
            early = await _early_answers(pipes[0], stdio.early_asked)
    dispatcher = JSONRPCDispatcher[Any](EofWatch(read, on_eof), write)
    options = requests.session_options() if requests is not None else {}
    session = ClientSession(dispatcher=dispatcher, client_info=CLIENT_INFO, message_handler=on_message, **options)
    await stack.enter_async_context(session)
    with anyio.fail_after(spec.timeout_seconds):
        if early is not None:
            era = await settle_early(session, early)
        else:
            era = await negotiate(session, dispatcher, choice, http=http)
    if era == "modern":
        channel: HandshakeChannel | ModernChannel = ModernChannel(session, dispatcher, spec.server_name)
        handshake_too = spec.era == "auto"
    else:
        result = session.initialize_result
        assert result is not None
        channel, handshake_too = HandshakeChannel(session, dispatcher, result), True
    return Link(era, session, channel, handshake_too, stdio, pipes)


async def _open_url(
    stack: AsyncExitStack,
    spec: DownstreamSpec,
    url: str,
    *,
    choice: EraChoice,
    requests: ServerRequests | None,
    on_message: OnMessage,
    on_eof: Callable[[], None],
) -> Link:
    """Streamable HTTP first, then the older SSE transport (first for URLs ending in `/sse`).

    With `auth = "oauth"` both go through the OAuth client (proxy/oauth.py); an OAuth failure
    (`needs login: ...`) ends the attempt at once: the other transport would fail the same way.
    """
    headers = dict(spec.headers)
    auth = http_auth(spec.oauth) if spec.oauth is not None else None
    limit = spec.max_message_bytes
    refused: list[str] = []
    lane: Lane | None = None  # the streamable attempt's, when the relay can speak to the server

    async def note_refusal(response: httpx2.Response) -> None:
        if response.status_code >= 400 and not refused:  # the SDK reports it as "an error response"
            refused.append(f"HTTP {response.status_code} {response.reason_phrase}".rstrip())
        bound_json(response, limit)
        if lane is not None:
            lane.note_response(response)

    def streamable(stack: AsyncExitStack) -> AbstractAsyncContextManager[Streams]:
        nonlocal lane
        lane = lane_for(url, headers, oauth=auth is not None, max_message_bytes=limit)
        # The SDK's defaults: 30 s to connect or write, 300 s of silence on a stream.
        client = httpx2.AsyncClient(
            headers=headers,
            auth=auth,
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"response": [note_refusal]},
        )
        stack.push_async_callback(client.aclose)
        transport = streamable_http_client(url, http_client=client, max_sse_event_size=limit)
        return transport if lane is None else with_inbox(transport, lane)

    def sse(_: AsyncExitStack) -> AbstractAsyncContextManager[Streams]:
        return sse_client(url, headers=headers, auth=auth)

    attempts = [sse, streamable] if url.rstrip("/").endswith("/sse") else [streamable, sse]
    if choice == "modern":
        attempts = [streamable]  # SSE carries only the handshake era
    first_error: Exception | None = None
    for make in attempts:
        try:
            async with AsyncExitStack() as attempt:
                era_choice: EraChoice = choice if make is streamable else "handshake"
                link = await _open(
                    attempt,
                    spec,
                    make(attempt),
                    choice=era_choice,
                    http=True,
                    requests=requests,
                    on_message=on_message,
                    on_eof=on_eof,
                )
                stack.push_async_exit(attempt.pop_all())
                if make is streamable and lane is not None:
                    lane.modern = link.era == "modern"
                    if (result := link.session.initialize_result) is not None and not lane.modern:
                        lane.protocol_version = result.protocol_version  # the negotiated version
                    if isinstance(link.channel, ModernChannel):
                        lane.param_headers = link.channel.param_headers
                    link.lane = lane
                return link
        except Exception as exc:  # the other transport may still work; report the first failure
            logger.debug("[%s] %s transport failed: %r", spec.server_name, make.__name__, exc)
            if (oauth_failure := auth_failure(exc)) is not None:
                raise oauth_failure from None
            first_error = first_error or exc
    assert first_error is not None
    if refused:
        raise MCPError(types.INTERNAL_ERROR, refused[0]) from first_error
    raise first_error


async def open_link(
    stack: AsyncExitStack,
    spec: DownstreamSpec,
    *,
    choice: EraChoice,
    requests: ServerRequests | None,
    on_message: OnMessage,
    on_eof: Callable[[], None],
    early: EarlyStarts | None = None,
    stdio_ready: Callable[[StdioTransport], None] | None = None,
) -> Link:
    """Open and negotiate one connection to `spec`'s server on `stack`.

    `stdio_ready` learns a stdio server's transport before its handshake (so a failure can say how
    the process ended).

    Raises:
        OSError: a stdio command cannot be started.
        MCPError: the server refused or failed the handshake (or the connection closed during it).
        Exception: whatever the HTTP transport raises for an unreachable URL.
    """
    target = spec.target
    if isinstance(target, str):
        return await _open_url(
            stack, spec, target, choice=choice, requests=requests, on_message=on_message, on_eof=on_eof
        )
    stdio: StdioTransport | None = None
    if isinstance(target, StdioServerParameters):
        stdio = StdioTransport(
            target,
            server_name=spec.server_name,
            early=early,
            confinement=spec.confinement,
            guard=spec.guard,
            max_message_bytes=spec.max_message_bytes,
        )
        if stdio_ready is not None:
            stdio_ready(stdio)
        transport: AbstractAsyncContextManager[Streams] = stdio
    else:
        transport = target()
    return await _open(
        stack,
        spec,
        transport,
        choice=choice,
        http=False,
        requests=requests,
        on_message=on_message,
        on_eof=on_eof,
        stdio=stdio,
    )


_HANDSHAKE_ONLY = "era: connected by the handshake alone"
_NO_RETRY = "era: the handshake alone did not connect it either"


class _EofGate:
    """An `on_eof` that holds back an end of stream seen during the handshake until the attempt is kept
    (the end of a process the probe crashed is no end of the session)."""

    def __init__(self, on_eof: Callable[[], None]) -> None:
        self._on_eof = on_eof
        self._open = False
        self._ended = False

    def __call__(self) -> None:
        if self._open:
            self._on_eof()
        else:
            self._ended = True

    def open(self) -> None:
        self._open = True
        if self._ended:
            self._on_eof()


async def open_primary(
    stack: AsyncExitStack,
    spec: DownstreamSpec,
    *,
    memory: set[str],
    requests: ServerRequests | None,
    on_message: OnMessage,
    on_eof: Callable[[], None],
    early: EarlyStarts | None = None,
    stdio_ready: Callable[[StdioTransport], None] | None = None,
) -> Link:
    """`open_link` in `spec.era`, and for an `auto` server that is no URL and fails it, once more with the
    handshake alone (a fresh process). `memory` (kept by the supervisor across restarts) remembers the
    outcome, so a server the probe costs is asked the handshake alone from then on, and one that fails
    both ways is not started twice each time.

    Raises:
        The errors of `open_link`.
    """
    choice: EraChoice = "handshake" if spec.era == "auto" and _HANDSHAKE_ONLY in memory else spec.era
    retry = choice == "auto" and not isinstance(spec.target, str) and _NO_RETRY not in memory
    gate = _EofGate(on_eof)
    options: dict[str, Any] = {"requests": requests, "on_message": on_message, "stdio_ready": stdio_ready}
    async with AsyncExitStack() as attempt:
        try:
            link = await open_link(attempt, spec, choice=choice, on_eof=gate, early=early, **options)
        except MCPError as exc:
            if not retry:
                gate.open()
                raise
            logger.debug("[%s] probe and handshake failed (%s); the handshake alone next", spec.server_name, exc)
        else:
            stack.push_async_exit(attempt.pop_all())
            gate.open()
            return link
    gate = _EofGate(on_eof)  # the first attempt's process is stopped: its end is no one's news
    try:
        link = await open_link(stack, spec, choice="handshake", on_eof=gate, **options)
    except Exception:
        memory.add(_NO_RETRY)
        gate.open()
        raise
    memory.add(_HANDSHAKE_ONLY)
    logger.info("[%s] connected by the handshake alone (the era probe failed it)", spec.server_name)
    gate.open()
    return link
