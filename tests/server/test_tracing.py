"""Traces of the HTTP hub (server/tracing.py): a real `serve --http` exporting over OTLP/HTTP to a
tiny receiver on loopback (decoded with `opentelemetry.proto`), a stdio downstream that logs what
it receives, and an `mcp.Client` call; and the one warning line when the `otel` extra is missing."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from hub_support import hub_client, start_hub
from omega_mcp.server.tracing import start_tracing
from proxy_support import ECHO_SERVER
from waits import scaled

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_TRACEPARENT = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"


class _Receiver:
    """An OTLP/HTTP trace receiver: every span posted to /v1/traces, with its service, and the raw bodies."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Span]] = []
        self.bodies: list[bytes] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.changed:
                    receiver.bodies.append(body)
                    for resource_spans in request.resource_spans:
                        service = next(
                            (
                                a.value.string_value
                                for a in resource_spans.resource.attributes
                                if a.key == "service.name"
                            ),
                            "",
                        )
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend((service, span) for span in scope_spans.spans)
                    receiver.changed.notify_all()
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def named(self, name: str) -> list[tuple[str, Span]]:
        with self.changed:
            return [(service, span) for service, span in self.spans if span.name == name]

    def wait_for(self, *names: str, seconds: float = 30) -> None:
        with self.changed:
            ok = self.changed.wait_for(
                lambda: all(any(s.name == n for _, s in self.spans) for n in names), scaled(seconds)
            )
        assert ok, f"no spans {names} within {scaled(seconds):g} s; got {[s.name for _, s in self.spans]}"


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    rx = _Receiver()
    thread = threading.Thread(target=rx.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rx
    finally:
        rx.server.shutdown()
        rx.server.server_close()
        thread.join(10)


@pytest.mark.e2e
async def test_a_downstream_call_is_a_child_span_of_the_sdk_server_span_and_carries_the_trace(
    tmp_path: Path, receiver: _Receiver
) -> None:
    received = tmp_path / "received.jsonl"
    config = tmp_path / "omega.toml"
    args = [str(ECHO_SERVER), "--log-file", str(received)]
    config.write_text(f"[servers.echo]\ncommand = {sys.executable!r}\nargs = {json.dumps(args)}\n")
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        "OMEGA_TOKEN": "tracing-secret-token-0123456789abcdef",
    }
    hub = start_hub(tmp_path, "--config", str(config), env=env)
    try:
        async with hub_client(hub.url, hub.token) as client:
            meta: Any = {"traceparent": CLIENT_TRACEPARENT}
            assert not (await client.call_tool("mcp__echo__echo", {"text": "hi"}, meta=meta)).is_error
            with pytest.raises(MCPError):
                await client.call_tool("mcp__echo__refuse", {})
            assert (await client.call_tool("mcp__echo__crash", {})).is_error
        await anyio.to_thread.run_sync(receiver.wait_for, "tools/call mcp__echo__echo", "tools/call crash")
    finally:
        assert hub.stop() == 0
    assert "traces: exported over OTLP/HTTP as service omega-mcp" in hub.log.read_text()

    [(service, server_span)] = receiver.named("tools/call mcp__echo__echo")
    [(_, ours)] = receiver.named("tools/call echo")
    assert service == "omega-mcp"
    assert server_span.kind == Span.SPAN_KIND_SERVER
    assert server_span.trace_id.hex() == CLIENT_TRACE  # the client's trace, joined
    assert ours.kind == Span.SPAN_KIND_CLIENT
    assert ours.trace_id == server_span.trace_id
    assert ours.parent_span_id == server_span.span_id
    attributes = {a.key: a.value.string_value for a in ours.attributes}
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "echo"
    assert attributes["omega.server.name"] == "echo"
    assert "error.type" not in attributes

    # The downstream got the trace context of the SDK's send span, a child of ours (not the client's).
    [send] = [s for _, s in receiver.named("MCP send tools/call echo") if s.parent_span_id == ours.span_id]
    calls = [json.loads(line) for line in received.read_text().splitlines()]
    [call] = [m for m in calls if m.get("method") == "tools/call" and m["params"]["name"] == "echo"]
    assert call["params"]["_meta"]["traceparent"] == f"00-{send.trace_id.hex()}-{send.span_id.hex()}-01"

    # A downstream that died under the call, and one that answered with a JSON-RPC error: omega's span says so.
    [(_, crashed)] = receiver.named("tools/call crash")
    assert {a.key: a.value.string_value for a in crashed.attributes}["error.type"] == "tool_error"
    [(_, refused)] = receiver.named("tools/call refuse")
    assert {a.key: a.value.string_value for a in refused.attributes}["error.type"] == "-32042"
    assert refused.status.code == refused.status.STATUS_CODE_ERROR

    with receiver.changed:
        assert not any(hub.token.encode() in body for body in receiver.bodies)


def test_without_the_otel_extra_serve_warns_once_and_serves_untraced(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert start_tracing({}) is None  # no endpoint: nothing is imported, nothing installed
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with caplog.at_level(logging.WARNING, logger="omega_mcp"):
        assert start_tracing({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}) is None
    [line] = [r.getMessage() for r in caplog.records if r.name == "omega_mcp" and r.getMessage().startswith("traces:")]
    assert "pip install 'omega-mcp[otel]'" in line
