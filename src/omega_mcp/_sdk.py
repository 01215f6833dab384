"""The one module that touches the MCP SDK's private internals; everything else imports from here.

The SDK v2 keeps the stream protocols of its transports in `mcp.shared._stream_protocols`, gives
no public way from a request's `ServerSession` to its long-lived `Connection`, keeps the client's
era probe (`negotiate_auto`) in `mcp.client._probe`, and builds a client session's capabilities
and info privately. omega needs all of them (its own pipe transports implement the streams; list
changes and logs go to connections; a downstream is asked its era as the SDK client asks it, and
each 2026-era request carries the envelope the session would stamp; a traced hub puts back the
server's default `OpenTelemetryMiddleware`, kept in `mcp.server._otel`), so they are reached here,
once: an SDK upgrade that moves them breaks this module and nothing else.
The HTTP session manager hands one event store to every session it admits; `store_per_session` gives
each its own instead (through the manager's private admission and discard), so no session can replay
another's events.
Transports are typed with the public `mcp.client.Transport`. `SESSION_MESSAGES` is the hand-over
from the wire layer's pipes (`wire/pipes.py`, bytes and dicts only) to the SDK's `SessionMessage`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mcp import types
from mcp.client import Transport
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

if TYPE_CHECKING:  # the HTTP server's modules: not imported for stdio
    from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
    from mcp.server.streamable_http import EventStore, StreamableHTTPServerTransport
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = [
    "SESSION_MESSAGES",
    "OpenTelemetryMiddleware",
    "ReadStream",
    "Streams",
    "Transport",
    "WriteStream",
    "client_capabilities",
    "client_info",
    "connection_of",
    "negotiate_auto",
    "store_per_session",
]

Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]
"""What a transport yields: `(read_stream, write_stream)` (the SDK's `TransportStreams`)."""


def connection_of(session: ServerSession) -> Connection:
    """The connection a request's session belongs to (it outlives the request)."""
    return session._connection  # pyright: ignore[reportPrivateUsage]


def client_capabilities(session: ClientSession, version: str) -> types.ClientCapabilities:
    """The capabilities a client session declares at `version` (what its callbacks make it able to answer)."""
    return session._build_capabilities(version)  # pyright: ignore[reportPrivateUsage]


def client_info(session: ClientSession) -> types.Implementation:
    """The `clientInfo` a client session sends."""
    return session._client_info  # pyright: ignore[reportPrivateUsage]


def store_per_session(manager: StreamableHTTPSessionManager, new: Callable[[], EventStore]) -> None:
    """Each session `manager` admits from now on gets its own event store, `new()`, closed once the
    session is discarded (a DELETE, the idle timeout, a crash or the manager's end).

    The manager reads its `event_store` when it builds a session's transport (`_admit_session`, which
    runs without awaiting under its creation lock), so the store is set just for that; the transport
    keeps its store, and `_discard_session` (which may run twice for one session) closes it.
    """
    admit = manager._admit_session  # pyright: ignore[reportPrivateUsage]
    discard = manager._discard_session  # pyright: ignore[reportPrivateUsage]

    def admit_with_store(requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        store = new()
        manager.event_store = store
        try:
            transport = admit(requestor)
        finally:
            manager.event_store = None
        if transport is None:
            _close(store)
        return transport

    async def discard_and_close(session_id: str, transport: StreamableHTTPServerTransport) -> None:
        try:
            await discard(session_id, transport)
        finally:
            _close(transport._event_store)  # pyright: ignore[reportPrivateUsage]

    manager._admit_session = admit_with_store  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
    manager._discard_session = discard_and_close  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]


def _close(store: object) -> None:
    close = getattr(store, "close", None)
    if callable(close):
        close()


class _SessionMessages:
    """The `wire.pipes.Codec` of the SDK's messages: a line is validated straight from its bytes."""

    def from_json(self, line: bytes, /) -> SessionMessage:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))

    def from_object(self, decoded: object, /) -> SessionMessage:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(decoded, by_name=False))

    def to_json(self, item: SessionMessage, /) -> bytes:
        return (item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()


SESSION_MESSAGES = _SessionMessages()
"""Lines to `SessionMessage` and back, for the pipe streams the SDK's sessions read and write."""
