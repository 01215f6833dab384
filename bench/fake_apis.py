"""Fake model APIs on 127.0.0.1 for bench/real_clients.py: they record every request and answer the least a
client takes as a finished turn.

One stdlib HTTP server answers both: Anthropic Messages (`POST .../v1/messages`, SSE when the body asks
`stream`, and `.../count_tokens`) as Claude Code calls it, and the OpenAI Responses API
(`POST .../responses`, SSE) as Codex calls it. Any other path is a 404 with a JSON error body, recorded
like the rest, so a run's traffic shows everything the client asked for.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

REPLY = "hello"


@dataclass
class Request:
    """One request as the fake API saw it."""

    at: float
    """time.monotonic() when its body had been read."""
    method: str
    path: str
    body: Any
    """The JSON body (None when there was none or it was no JSON)."""
    encoding: str = ""


@dataclass
class Recorder:
    """The requests of the current run (reset between runs)."""

    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    first: threading.Event = field(default_factory=threading.Event)
    """Set at the first model request (Messages or Responses)."""

    def reset(self) -> None:
        with self.lock:
            self.requests = []
            self.first = threading.Event()

    def add(self, request: Request, *, model: bool) -> None:
        with self.lock:
            self.requests.append(request)
            if model:
                self.first.set()

    def snapshot(self) -> list[Request]:
        with self.lock:
            return list(self.requests)


def is_model_request(request: Request) -> bool:
    """A request for a model turn: Messages (not count_tokens) or Responses."""
    path = request.path.split("?", 1)[0]
    return request.method == "POST" and (path.endswith("/messages") or path.endswith("/responses"))


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def _anthropic_message(model: str) -> dict[str, Any]:
    return {
        "id": "msg_fake_1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }  # fmt: skip


def _anthropic_stream(model: str) -> bytes:
    start = {**_anthropic_message(model), "content": [], "stop_reason": None}
    return _sse([
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": REPLY}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ])  # fmt: skip


def _responses_stream(model: str) -> bytes:
    item = {
        "type": "message", "id": "msg_fake_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": REPLY, "annotations": []}],
    }  # fmt: skip
    usage = {
        "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 11,
    }  # fmt: skip
    base = {"id": "resp_fake_1", "object": "response", "created_at": int(time.time()), "model": model}
    return _sse([
        ("response.created", {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                        "item": {**item, "status": "in_progress", "content": []}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_fake_1",
                                        "output_index": 0, "content_index": 0, "delta": REPLY}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed",
                                "response": {**base, "status": "completed", "output": [item], "usage": usage}}),
    ])  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _read(self) -> Request:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        return Request(time.monotonic(), self.command, self.path, body, encoding)

    def _send(self, status: int, content_type: str, payload: bytes, *, stream: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if stream:
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _answer(self) -> None:
        request = self._read()
        path = request.path.split("?", 1)[0]
        model_request = is_model_request(request)
        cast("_Server", self.server).recorder.add(request, model=model_request)
        body = request.body if isinstance(request.body, dict) else {}
        model = str(body.get("model") or "fake-model")
        if request.method == "POST" and path.endswith("/messages/count_tokens"):
            self._send(200, "application/json", json.dumps({"input_tokens": 10}).encode())
        elif model_request and path.endswith("/messages"):
            if body.get("stream"):
                self._send(200, "text/event-stream", _anthropic_stream(model), stream=True)
            else:
                self._send(200, "application/json", json.dumps(_anthropic_message(model)).encode())
        elif model_request:
            self._send(200, "text/event-stream", _responses_stream(model), stream=True)
        else:
            error = {"type": "error", "error": {"type": "not_found_error", "message": f"no {path} here"}}
            self._send(404, "application/json", json.dumps(error).encode())

    def do_POST(self) -> None:
        self._answer()

    def do_GET(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops a kept-alive connection when it exits is no error; anything else is printed."""
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class FakeApi:
    """The fake API on an ephemeral loopback port, served by a daemon thread until `close`."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self._server = _Server(self.recorder)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-api", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
