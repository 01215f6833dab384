"""The one module that touches the MCP SDK's private internals; everything else imports from here.

The SDK v2 keeps the stream protocols of its transports in `mcp.shared._stream_protocols` and
gives no public way from a request's `ServerSession` to its long-lived `Connection`. omega needs
both (its own pipe transports implement the streams; list changes and logs go to connections), so
they are reached here, once: an SDK upgrade that moves them breaks this module and nothing else.
Transports are typed with the public `mcp.client.Transport`.
"""

from __future__ import annotations

from mcp.client import Transport
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

__all__ = ["ReadStream", "Streams", "Transport", "WriteStream", "connection_of"]

Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]
"""What a transport yields: `(read_stream, write_stream)` (the SDK's `TransportStreams`)."""


def connection_of(session: ServerSession) -> Connection:
    """The connection a request's session belongs to (it outlives the request)."""
    return session._connection  # pyright: ignore[reportPrivateUsage]
