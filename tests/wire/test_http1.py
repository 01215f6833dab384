"""The relay's HTTP/1.1 client (`wire/http1.py`), its event reader (`wire/sse.py`) and its HTTP lane
(`proxy/http_lane.py`), against a raw server.

The server here is a loopback TCP listener that reads each request (head and `Content-Length`
body) and writes a canned answer, so what goes over the wire, how many connections are made and
what a status or content type becomes are all seen directly.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.tls import TLSListener
from mcp import types

from omega_mcp.proxy.http_lane import Lane, Refusal, lane_for
from omega_mcp.wire.http1 import Http1Pool, speakable
from omega_mcp.wire.sse import ServerSentEvents, TooLong
from waits import deadline

Answer = Callable[[bytes, bytes], bytes]
"""(request head, body) → the raw answer."""


def _answer(status: str, body: bytes, content_type: str = "application/json", *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"content-type: {content_type}", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _chunked(*chunks: bytes, content_type: str = "text/event-stream") -> bytes:
    head = f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


@dataclass
class _Server:
    url: str
    connections: int = 0
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    close_after_answer: bool = False


@asynccontextmanager
async def _served(answer: Answer, tls: ssl.SSLContext | None = None) -> AsyncIterator[_Server]:
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener: anyio.abc.Listener[Any] = tcp if tls is None else TLSListener(tcp, tls, standard_compatible=False)
    server = _Server(f"{'https' if tls else 'http'}://127.0.0.1:{port}/mcp?x=1")

    async def handle(stream: anyio.abc.ByteStream) -> None:
        server.connections += 1
        buffer = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffer:
                    try:
                        buffer += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                while len(buffer) < length:
                    buffer += await stream.receive()
                body, buffer = buffer[:length], buffer[length:]
                server.requests.append((head, body))
                await stream.send(answer(head, body))
                if server.close_after_answer:
                    return

    async with listener, anyio.create_task_group() as task_group:
        task_group.start_soon(listener.serve, handle)
        try:
            yield server
        finally:
            task_group.cancel_scope.cancel()


async def _post(pool: Http1Pool, body: bytes = b"{}") -> tuple[int, dict[str, str], bytes]:
    async with pool.send([("content-type", "application/json")], body) as response:
        data = b"".join([chunk async for chunk in response.body()])
    return response.status, response.headers, data


async def test_requests_share_one_kept_alive_connection_and_carry_host_length_and_path():
    async with _served(lambda head, body: _answer("200 OK", b'{"echo":' + body + b"}")) as server:
        pool = Http1Pool(server.url)
        try:
            answers = [await _post(pool, b'{"n":%d}' % n) for n in range(3)]
        finally:
            await pool.aclose()
    assert [a[2] for a in answers] == [b'{"echo":{"n":%d}}' % n for n in range(3)]
    assert answers[0][0] == 200 and answers[0][1]["content-type"] == "application/json"
    assert server.connections == 1
    head = server.requests[0][0].decode()
    assert head.startswith("POST /mcp?x=1 HTTP/1.1\r\n")
    assert f"host: {server.url.split('/')[2]}" in head.lower() and "content-length: 7" in head.lower()


async def test_a_connection_the_server_closed_while_idle_is_not_reused():
    async with _served(lambda head, body: _answer("200 OK", b"{}")) as server:
        server.close_after_answer = True
        pool = Http1Pool(server.url)
        try:
            for _ in range(3):
                assert (await _post(pool))[0] == 200
                await anyio.sleep(0.05)  # the server's close reaches us while the connection is idle
        finally:
            await pool.aclose()
    assert server.connections == 3


async def test_a_chunked_body_is_read_whole_and_connection_close_is_honoured():
    def answer(head: bytes, body: bytes) -> bytes:
        return _chunked(b"data: 1\n", b"\n", content_type="text/plain").replace(
            b"chunked\r\n", b"chunked\r\nconnection: close\r\n", 1
        )

    async with _served(answer) as server:
        pool = Http1Pool(server.url)
        try:
            assert (await _post(pool))[2] == b"data: 1\n\n"
            assert (await _post(pool))[2] == b"data: 1\n\n"
        finally:
            await pool.aclose()
    assert server.connections == 2  # `connection: close` → a new one for the next request


def test_http_and_https_urls_with_a_host_and_no_credentials_are_spoken_to():
    assert speakable("http://127.0.0.1:8000/mcp") and speakable("https://example.test/mcp")
    assert not speakable("ftp://example.test/mcp") and not speakable("http://user:pw@example.test/mcp")
    assert not speakable("http:///mcp") and not speakable("http://host:99999/mcp")


def test_the_relay_leaves_oauth_and_proxied_servers_to_the_sdk(monkeypatch: pytest.MonkeyPatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for url in ("http://127.0.0.1:1/mcp", "https://127.0.0.1:1/mcp"):
        assert isinstance(lane_for(url, {}, oauth=False, max_message_bytes=1 << 20), Lane)
    assert lane_for("http://127.0.0.1:1/mcp", {}, oauth=True, max_message_bytes=1 << 20) is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert lane_for("https://127.0.0.1:1/mcp", {}, oauth=False, max_message_bytes=1 << 20) is None


def test_headers_are_the_sdk_transports_for_each_era():
    lane = Lane("http://127.0.0.1:1/mcp", {"Authorization": "Bearer t", "Accept": "text/html"}, 1 << 20)
    lane.session_id, lane.protocol_version = "s-1", "2025-11-25"
    handshake = dict(lane.headers("tools/call", {"name": "echo"}, None))
    assert handshake == {
        "authorization": "Bearer t",
        "accept": "application/json, text/event-stream",  # the transport's own wins over a configured one
        "content-type": "application/json",
        "mcp-session-id": "s-1",
        "mcp-protocol-version": "2025-11-25",
    }
    lane.modern = True
    lane.param_headers = lambda name, arguments: {"Mcp-Param-Region": str(arguments["region"])}
    modern = dict(lane.headers("tools/call", {"name": "wé", "arguments": {"region": "eu"}}, "2026-07-28"))
    assert modern["mcp-protocol-version"] == "2026-07-28" and modern["mcp-method"] == "tools/call"
    assert modern["mcp-name"] != "wé" and modern["Mcp-Param-Region"] == "eu"  # a non-ASCII name is encoded
    assert "mcp-session-id" not in modern


def test_server_sent_events_are_decoded_across_chunks_and_line_endings():
    events = ServerSentEvents(limit=100)
    assert events.feed(b'event: message\r\nid: 1\r\ndata: {"a":') == []
    assert events.feed(b"1}\r\n\r\n: a comment\n\nevent: other\ndata: no\n\ndata: x\ndata: y\n\n") == [
        b'{"a":1}',
        b"x\ny",
    ]
    assert events.feed(b"data:nospace\r\rid: 7\ndata: \n\n") == [b"nospace"]  # empty data: priming only
    assert events.last_id == "7"
    with pytest.raises(TooLong):
        ServerSentEvents(limit=10).feed(b"data: " + b"x" * 20 + b"\n")
    with pytest.raises(TooLong):
        ServerSentEvents(limit=10).feed(b"data: " + b"x" * 20)  # no end of line yet: bounded too


@pytest.mark.parametrize(
    ("answer", "session", "expected"),
    [
        (_answer("404 Not Found", b""), "s-1", (types.INVALID_REQUEST, "Session terminated")),
        (_answer("404 Not Found", b""), None, (types.METHOD_NOT_FOUND, "Not Found")),
        (_answer("500 Internal Server Error", b"oops", "text/plain"), None, (types.INTERNAL_ERROR, None)),
        (_answer("202 Accepted", b""), None, (types.INVALID_REQUEST, "server answered a request with 202 Accepted")),
        (
            _answer("400 Bad Request", b'{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"bad"}}'),
            None,
            (-32602, "bad"),
        ),
        (_answer("200 OK", b"hi", "text/plain"), None, (types.INVALID_REQUEST, "Unexpected content type: text/plain")),
        (_answer("307 Temporary Redirect", b"", "text/plain", "location: /other"), None, (types.INVALID_REQUEST, None)),
    ],
)
async def test_an_answer_that_is_no_answer_is_the_error_the_sdk_transport_makes_of_it(
    answer: bytes, session: str | None, expected: tuple[int, str | None]
):
    async with _served(lambda head, body: answer) as server:
        lane = Lane(server.url, {}, 1 << 20)
        lane.session_id = session
        try:
            with pytest.raises(Refusal) as raised:
                await lane.exchange(b"{}", lane.headers("tools/call", {}, None), lambda message: None)
        finally:
            await lane.aclose()
    code, message = expected
    assert raised.value.error["code"] == code
    if message is not None:
        assert raised.value.error["message"] == message


async def test_an_event_stream_answer_is_offered_message_by_message_and_the_rest_goes_to_the_inbox():
    stream = _chunked(
        b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
        b'"params":{"progressToken":"t","progress":1}}\n\n',
        b'data: {"jsonrpc":"2.0","id":7,"method":"roots/list"}\n\n',
        b'data: {"jsonrpc":"2.0","id":"r-1","result":{"content":[]}}\n\n',
    )
    offered: list[Any] = []

    def deliver(message: dict[str, Any]) -> bool | None:
        offered.append(message.get("method") or message.get("id"))
        if message.get("method") == "roots/list":
            return None  # left: to the SDK session
        return message.get("id") == "r-1"

    async with _served(lambda head, body: stream) as server:
        lane = Lane(server.url, {}, 1 << 20)
        send, receive = anyio.create_memory_object_stream[Any](4)
        lane.session_inbox = send  # the SDK session's read stream, as `with_inbox` sets it
        try:
            assert await lane.exchange(b"{}", lane.headers("tools/call", {}, None), deliver) is True
            assert await lane.exchange(b"{}", lane.headers("tools/call", {}, None), deliver) is True
        finally:
            await lane.aclose()
    assert offered == ["notifications/progress", "roots/list", "r-1"] * 2
    assert server.connections == 1  # the stream read to its end: the connection was kept
    inboxed = [receive.receive_nowait() for _ in range(2)]
    assert [m.message.method for m in inboxed] == ["roots/list", "roots/list"]
    send.close()
    receive.close()


async def test_at_most_a_hundred_connections_are_open_at_once_and_the_rest_wait():
    async with _served(lambda head, body: _answer("200 OK", b"{}")) as server:
        pool = Http1Pool(server.url)
        entered = 0
        release = anyio.Event()

        async def hold() -> None:
            nonlocal entered
            async with pool.send([], b"{}") as response:
                entered += 1
                await release.wait()
                async for _ in response.body():
                    pass

        try:
            async with anyio.create_task_group() as task_group:
                for _ in range(120):
                    task_group.start_soon(hold)
                with deadline(10):
                    while entered < 100:  # noqa: ASYNC110 - a count, polled
                        await anyio.sleep(0.01)
                await anyio.sleep(0.1)
                assert entered == 100 and server.connections == 100  # the other 20 wait for a connection
                release.set()
        finally:
            await pool.aclose()
    assert entered == 120 and server.connections == 100  # and then reuse the first ones


async def test_a_stream_that_ends_before_the_answer_is_resumed_from_its_last_event():
    """As the SDK's transport: after an event with an id, a GET with `Last-Event-ID` (after `retry:`)."""

    def answer(head: bytes, body: bytes) -> bytes:
        if head.startswith(b"POST"):
            return _chunked(b"id: e1\nretry: 10\ndata: \n\n", b'id: e2\ndata: {"jsonrpc":"2.0","method":"x/y"}\n\n')
        return _chunked(b'id: e3\ndata: {"jsonrpc":"2.0","id":"r-1","result":{"content":[]}}\n\n')

    offered: list[Any] = []

    def deliver(message: dict[str, Any]) -> bool | None:
        offered.append(message.get("method") or message.get("id"))
        return message.get("id") == "r-1"

    async with _served(answer) as server:
        lane = Lane(server.url, {"X-Team": "a"}, 1 << 20)
        lane.session_id, lane.protocol_version = "s-1", "2025-11-25"
        try:
            assert await lane.exchange(b"{}", lane.headers("tools/call", {}, None), deliver) is True
        finally:
            await lane.aclose()
    assert offered == ["x/y", "r-1"]
    get = server.requests[1][0].decode().lower()
    assert get.startswith("get /mcp?x=1 http/1.1") and "last-event-id: e2" in get
    assert "mcp-session-id: s-1" in get and "mcp-protocol-version: 2025-11-25" in get and "x-team: a" in get


async def test_a_stream_that_ends_before_the_answer_with_no_event_id_is_not_resumed():
    async with _served(lambda head, body: _chunked(b'data: {"jsonrpc":"2.0","method":"x/y"}\n\n')) as server:
        lane = Lane(server.url, {}, 1 << 20)
        try:
            assert await lane.exchange(b"{}", lane.headers("tools/call", {}, None), lambda m: False) is False
        finally:
            await lane.aclose()
    assert len(server.requests) == 1


async def test_an_answer_that_is_no_json_is_the_sdk_transports_parse_error():
    async with _served(lambda head, body: _chunked(b"data: {nope\n\n")) as server:
        lane = Lane(server.url, {}, 1 << 20)
        try:
            with pytest.raises(Refusal) as raised:
                await lane.exchange(b"{}", lane.headers("tools/call", {}, None), lambda m: True)
        finally:
            await lane.aclose()
    assert raised.value.error["code"] == types.PARSE_ERROR
    assert raised.value.error["message"].startswith("Failed to parse JSON response")


def test_a_crlf_split_between_two_chunks_is_one_line_end():
    events = ServerSentEvents(limit=100)
    assert events.feed(b"data: a\r") == []
    assert events.feed(b"\ndata: b\r\n\r") == []
    assert events.feed(b"\n") == [b"a\nb"]


def _certificates(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (its PEM file) and a server context with a certificate it signed for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("omega test CA", ca_key, "omega test CA", ca_key, True)
    server = certificate("127.0.0.1", server_key, "omega test CA", ca_key, False)
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context


async def test_https_is_verified_as_the_sdk_client_verifies_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Trusted through `SSL_CERT_FILE` (as httpx trusts it): kept alive over TLS; untrusted: refused."""
    ca_file, context = _certificates(tmp_path)
    async with _served(lambda head, body: _answer("200 OK", b"{}"), tls=context) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        pool = Http1Pool(server.url)
        try:
            assert [(await _post(pool))[2] for _ in range(3)] == [b"{}"] * 3
        finally:
            await pool.aclose()
        assert server.connections == 1
        monkeypatch.delenv("SSL_CERT_FILE")
        pool = Http1Pool(server.url)
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                await _post(pool)
        finally:
            await pool.aclose()
    assert len(server.requests) == 3
