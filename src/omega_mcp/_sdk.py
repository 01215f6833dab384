"""The one module that touches the MCP SDK's private internals; everything else imports from here.

The SDK v2 keeps the stream protocols of its transports in `mcp.shared._stream_protocols`, gives
no public way from a request's `ServerSession` to its long-lived `Connection`, keeps the client's
era probe (`negotiate_auto`) in `mcp.client._probe`, and builds a client session's capabilities
and info privately. omega needs all of them (its own pipe transports implement the streams; list
changes and logs go to connections; a downstream is asked its era as the SDK client asks it, and
each 2026-era request carries the envelope the session would stamp; a traced hub puts back the
server's default `OpenTelemetryMiddleware`, kept in `mcp.server._otel`), so they are reached here,
once: an SDK upgrade that moves them breaks this module and nothing else.
Transports are typed with the public `mcp.client.Transport`. `SESSION_MESSAGES` is the hand-over
from the wire layer's pipes (`wire/pipes.py`, bytes and dicts only) to the SDK's `SessionMessage`.
"""

from __future__ import annotations

from mcp import types
from mcp.client import Transport
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

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
