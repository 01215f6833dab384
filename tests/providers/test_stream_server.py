"""End to end over real HTTP: a server on 127.0.0.1 streams each provider's answer slowly.

The server (http.server in a thread, chunked transfer encoding) follows a script per request:
send bytes, wait for an event, or kill the connection before the stream is complete. The event
is set by the test's `on_text`, so the first piece of text is proven to arrive while the server
is still holding back the end of the stream: without streaming the request could never finish
(the server's wait would run out and the test fail). No timing is measured.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import anyio
import httpx2
import pytest
from stream_support import CASES, FIRST_PIECE_AT, NDJSON, PIECES, TEXT, TOOLS, Case

from omega_mcp.errors import ProviderHTTPError
from omega_mcp.messages import UserMessage
from waits import deadline

WAIT = "wait"
KILL = "kill"
BASE_PATHS = {"openai": "/v1", "openrouter": "/api/v1"}


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.scripts: list[tuple[str, list[Any]]] = []
        self.paths: list[str] = []
        self.released = threading.Event()
        self.waits: list[bool] = []
        self.ended = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A killed or client-closed connection is part of the script; anything else fails loudly."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        server = cast(ScriptedServer, self.server)
        json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.paths.append(self.path)
        content_type, steps = server.scripts.pop(0)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for step in steps:
            if step == WAIT:
                server.waits.append(server.released.wait(10))
            elif step == KILL:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            else:
                self.wfile.write(f"{len(step):x}\r\n".encode() + step + b"\r\n")
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        server.ended.set()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.released.set()  # never leave a handler waiting
        srv.shutdown()
        srv.server_close()
        thread.join(10)


def through_first_text(case: Case) -> int:
    """The offset just past the event that carries the first piece of text."""
    at = case.stream.index(FIRST_PIECE_AT)
    if case.content_type == NDJSON:
        return case.stream.index(b"\n", at) + 1
    ends = [case.stream.find(marker, at) + len(marker) for marker in (b"\n\n", b"\r\n\r\n")]
    return min(end for end in ends if end >= len(b"\n\n") + at)


async def run(case: Case, server: ScriptedServer, on_text: Any) -> Any:
    base = server.url + BASE_PATHS.get(case.name, "")
    async with httpx2.AsyncClient(trust_env=False) as client:
        provider = case.provider(client, base_url=base)
        with deadline(30):
            return await provider.request(
                model="m", system="Be brief.", messages=[UserMessage("go")], tools=TOOLS, on_text=on_text
            )


@pytest.mark.parametrize("name", list(CASES))
async def test_text_reaches_on_text_before_the_server_ends_the_stream(server: ScriptedServer, name: str) -> None:
    case = CASES[name]
    split = through_first_text(case)
    server.scripts.append((case.content_type, [case.stream[:split], WAIT, case.stream[split:]]))
    pieces: list[str] = []
    ended_at_first_piece: list[bool] = []

    def on_text(piece: str) -> None:
        if not pieces:
            ended_at_first_piece.append(server.ended.is_set())
            server.released.set()
        pieces.append(piece)

    response = await run(case, server, on_text)
    assert ended_at_first_piece == [False]
    assert server.waits == [True]  # the server was released by on_text, not by its own time limit
    # The handler sets `ended` just after its last write, which the client may have read already.
    assert await anyio.to_thread.run_sync(server.ended.wait, 10)
    assert "".join(pieces) == TEXT
    assert response == await case.expected()


@pytest.mark.parametrize("name", list(CASES))
async def test_a_connection_killed_before_any_text_is_retried(server: ScriptedServer, name: str) -> None:
    case = CASES[name]
    before_text = case.stream.index(FIRST_PIECE_AT) - 8
    server.scripts.append((case.content_type, [case.stream[:before_text], KILL]))
    server.scripts.append((case.content_type, [case.stream]))
    pieces: list[str] = []
    response = await run(case, server, pieces.append)
    assert response.message.text == TEXT
    assert pieces == list(PIECES)
    assert len(server.paths) == 2


@pytest.mark.parametrize("name", list(CASES))
async def test_a_connection_killed_after_text_is_a_clear_error(server: ScriptedServer, name: str) -> None:
    case = CASES[name]
    server.scripts.append((case.content_type, [case.stream[: through_first_text(case)], KILL]))
    server.scripts.append((case.content_type, [case.stream]))  # must not be asked for
    pieces: list[str] = []
    with pytest.raises(ProviderHTTPError, match=f"the stream from {name} broke after text was shown") as info:
        await run(case, server, pieces.append)
    assert "Traceback" not in str(info.value) and "\n" not in str(info.value)
    assert pieces == [PIECES[0]]
    assert len(server.paths) == 1
