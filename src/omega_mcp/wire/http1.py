"""A small HTTP/1.1 client for the relay's POSTs: keep-alive connections to one origin, h11 framing.

The relay (`fastpath/relay.py`) sends a `tools/call` to a streamable HTTP server as one POST and
reads the answer (a JSON body or a server-sent event stream) itself. The SDK's HTTP client (httpx,
its auth flow, the transport's request models and tasks) costs several milliseconds of CPU per
call, more than the rest of the hop together; this is the few hundred microseconds a POST needs.
At most 100 connections are open at once (httpx's default); a request beyond waits for one.
It speaks `http://` and `https://` to one host and port, with no proxy, no redirects and no
credentials in the URL; TLS is verified with the SSL context httpx itself makes
(`httpx2.create_ssl_context()`: `SSL_CERT_FILE` / `SSL_CERT_DIR`, else the system's CA store), so
a server the SDK's client trusts is trusted here and no other. h11 (which httpx and uvicorn already
use) does the framing: chunked bodies, `Connection: close`, a bounded head.

A connection goes back to the pool only after a whole exchange on it; one left mid-answer (a
cancelled or failed call) is closed. An idle connection the server has closed (its keep-alive
timeout) is noticed before reuse and dropped, so a request is never sent into a dead socket.
"""

from __future__ import annotations

import select
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11
import httpx2

__all__ = ["Http1Pool", "Response", "speakable"]

_CHUNK = 1 << 16
_MAX_HEAD = 64 * 1024  # the status line and headers of an answer
_MAX_IDLE = 64  # idle connections kept per origin
_MAX_OPEN = 100  # connections per origin at once, as httpx's default: more requests wait for one


def speakable(url: str) -> bool:
    """Whether `url` is one this client can speak to: `http://` or `https://` with a host and no
    credentials (httpx would turn those into a Basic `Authorization`)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and "@" not in parts.netloc


@dataclass(slots=True)
class Response:
    """An answer's status and headers (names lowercase); `body()` yields its bytes as they come."""

    status: int
    headers: dict[str, str]
    _connection: _Connection = field(repr=False)

    def header(self, name: str) -> str:
        return self.headers.get(name, "")

    def body(self) -> AsyncIterator[bytes]:
        return self._connection.body()


class _Connection:
    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)

    def stale(self) -> bool:
        """Whether the server has closed (or written to) this idle connection."""
        sock = self.stream.extra(anyio.abc.SocketAttribute.raw_socket)  # noqa: S610 - anyio's, not Django's
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    async def _next(self) -> object:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                chunk = await self.stream.receive(_CHUNK)
            except anyio.EndOfStream:
                chunk = b""
            self.h11.receive_data(chunk)

    async def send(self, request: h11.Request, body: bytes) -> Response:
        data = self.h11.send(request) or b""
        data += self.h11.send(h11.Data(data=body)) or b""
        data += self.h11.send(h11.EndOfMessage()) or b""
        await self.stream.send(data)
        while True:
            event = await self._next()
            if isinstance(event, h11.Response):
                headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in event.headers}
                return Response(event.status_code, headers, self)
            if isinstance(event, h11.ConnectionClosed):
                raise anyio.EndOfStream
            # an interim 1xx answer: read on

    async def body(self) -> AsyncIterator[bytes]:
        while True:
            event = await self._next()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise anyio.EndOfStream

    def reusable(self) -> bool:
        if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
            return False
        self.h11.start_next_cycle()
        return True


class Http1Pool:
    """Keep-alive HTTP/1.1 connections to the origin of one `http://` or `https://` URL (`speakable`)."""

    def __init__(self, url: str, *, connect_timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        assert speakable(url) and parts.hostname, url
        self._tls = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port or (443 if self._tls else 80)
        self._authority = parts.netloc.encode()
        self._ssl: ssl.SSLContext | None = None
        self.target = ((parts.path or "/") + (f"?{parts.query}" if parts.query else "")).encode()
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()  # idle and busy: all closed with the pool
        self._slots = anyio.CapacityLimiter(_MAX_OPEN)
        self._closed = False

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.stale():
                return connection
            await self._discard(connection)
        if self._tls and self._ssl is None:
            self._ssl = httpx2.create_ssl_context()  # what the SDK's client verifies with
            self._ssl.set_alpn_protocols(["http/1.1"])
        with anyio.fail_after(self._connect_timeout):
            if self._ssl is not None:
                stream = await anyio.connect_tcp(
                    self._host,
                    self._port,
                    ssl_context=self._ssl,
                    tls_hostname=self._host,
                    tls_standard_compatible=False,
                )
            else:  # (a `tls_hostname` alone would turn TLS on)
                stream = await anyio.connect_tcp(self._host, self._port)
            connection = _Connection(stream)
        self._open.add(connection)
        return connection

    @asynccontextmanager
    async def send(
        self, headers: Iterable[tuple[str, str]], body: bytes, *, method: bytes = b"POST"
    ) -> AsyncGenerator[Response]:
        """POST `body` (or another `method`) to the URL's path; the answer, whose body the caller reads
        inside the block.

        Raises:
            OSError, TimeoutError: connecting failed (or took longer than the connect timeout).
            anyio.EndOfStream, anyio.BrokenResourceError: the server closed the connection.
            h11.ProtocolError: the answer is no HTTP/1.1.
        """
        head = [
            (b"host", self._authority),
            (b"content-length", str(len(body)).encode()),
            *((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers),
        ]
        async with self._slots:
            if self._closed:
                raise anyio.ClosedResourceError
            connection = await self._connection()
            kept = False
            try:
                response = await connection.send(h11.Request(method=method, target=self.target, headers=head), body)
                yield response
                kept = connection.reusable() and not self._closed and len(self._idle) < _MAX_IDLE
            finally:
                if kept:
                    self._idle.append(connection)
                else:
                    await self._discard(connection)

    async def _discard(self, connection: _Connection) -> None:
        self._open.discard(connection)
        # Shielded (it never waits beyond one loop turn): a cancelled close leaves the socket to a later
        # turn of the loop, which a loop that is stopping never runs.
        with anyio.CancelScope(shield=True):
            await connection.stream.aclose()

    async def aclose(self) -> None:
        """Close every connection, those in use as well (their exchanges fail)."""
        self._closed = True
        self._idle.clear()
        for connection in list(self._open):
            await self._discard(connection)
