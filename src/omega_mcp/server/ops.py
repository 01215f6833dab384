"""The HTTP hub's operations surface: probes, metrics and drain (beside the transport, `http.py`).

- `GET /healthz` answers 200 while the process serves; `GET /readyz` 200 once the first connection
  round to the downstream servers has settled (every enabled server connected or failed once), 503
  while starting or draining. Neither needs a token: probes carry no secrets, and they say nothing
  but "ok" / "starting" / "draining".
- `GET /metrics` (the hub's own token: a `[hub.clients]` token gets 403, so one client never reads
  the tools another uses) is Prometheus text from `prometheus-client`, named by the OpenTelemetry
  MCP semantic conventions: the histogram `mcp_server_operation_duration_seconds` labelled
  `mcp_method_name`, `gen_ai_tool_name` (a namespace tool's name, else `_OTHER`: label values stay
  bounded whatever clients send) and `error_type` (`tool_error` for an isError result, the JSON-RPC
  error code otherwise, "" for none); `omega_downstream_up{server}` (1 connected, else 0) and
  `omega_sessions` (open handshake-era sessions). The registry is the hub's own, not the process
  default, so nothing else leaks into it. `MetricsMiddleware` times every MCP request as SDK
  middleware (outermost, so the fast tools/call path is measured too).
- Drain (`drain`, on SIGTERM): `/readyz` turns 503 at once while the listener stays open; a new
  handshake session (`initialize` without a session id) gets 503; requests of existing sessions and
  2026-era requests are served until `[hub] drain_seconds` pass or nothing is in flight and nothing
  arrived for `QUIET_SECONDS`; then the caller shuts down as usual (calls in flight finish).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp_types import INVALID_PARAMS, CallToolResult
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from omega_mcp.narrow import object_or_none
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.server.auth import HubTokens
from omega_mcp.toolbox import Toolbox

__all__ = ["QUIET_SECONDS", "HubMetrics", "MetricsMiddleware", "Operations", "OpsMiddleware"]

logger = logging.getLogger(__name__)

QUIET_SECONDS = 2.0
"""While draining: how long without a request (and none in flight) counts as "nothing arrives"."""
OTHER = "_OTHER"
# The OpenTelemetry MCP conventions' advice for mcp.server.operation.duration (seconds).
_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _Gauges(Collector):
    """`omega_downstream_up` and `omega_sessions`, read at each scrape."""

    def __init__(self, downstreams: Downstreams, sessions: Callable[[], int]) -> None:
        self._downstreams = downstreams
        self._sessions = sessions

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "omega_downstream_up", "Whether a downstream server is connected (1) or not (0).", labels=["server"]
        )
        for status in self._downstreams.statuses():
            up.add_metric([status.server_name], 1.0 if status.state == "connected" else 0.0)
        yield up
        yield GaugeMetricFamily("omega_sessions", "Open handshake-era MCP sessions.", value=float(self._sessions()))


class HubMetrics:
    """The hub's own Prometheus registry."""

    def __init__(self, toolbox: Toolbox, downstreams: Downstreams, sessions: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self._toolbox = toolbox
        self.duration = Histogram(
            "mcp_server_operation_duration_seconds",
            "Duration of the MCP requests the hub answered.",
            ["mcp_method_name", "gen_ai_tool_name", "error_type"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_Gauges(downstreams, sessions))

    def tool_label(self, name: object) -> str:
        """A namespace tool's name, else `_OTHER`."""
        if isinstance(name, str) and self._toolbox.namespace().resolve(name) is not None:
            return name
        return OTHER

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _error_type(method: str, result: HandlerResult) -> str:
    if method == "tools/call":
        if isinstance(result, CallToolResult) and result.is_error:
            return "tool_error"
        if isinstance(result, dict) and result.get("isError") is True:
            return "tool_error"
    return ""


class MetricsMiddleware(ServerMiddleware[Any]):
    """Times every MCP request into `mcp_server_operation_duration_seconds`."""

    def __init__(self, metrics: HubMetrics) -> None:
        self.metrics = metrics

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        started = time.perf_counter()
        error = ""
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            error = str(exc.error.code)
            raise
        except ValidationError:
            error = str(INVALID_PARAMS)
            raise
        except Exception as exc:
            error = type(exc).__qualname__
            raise
        else:
            error = _error_type(ctx.method, result)
            return result
        finally:
            name = ctx.params.get("name") if ctx.method == "tools/call" and ctx.params else None
            self.metrics.duration.labels(ctx.method, self.metrics.tool_label(name), error).observe(
                time.perf_counter() - started
            )


class Operations:
    """Readiness and drain state of one hub process."""

    def __init__(self, downstreams: Downstreams, metrics: HubMetrics, tokens: HubTokens) -> None:
        self.downstreams = downstreams
        self.metrics = metrics
        self.tokens = tokens
        self.draining = False
        self.in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._arrival = anyio.Event()

    @property
    def ready(self) -> bool:
        return self.downstreams.ready and not self.draining

    def arrived(self) -> None:
        self._arrival.set()
        if not self.in_flight:
            self._idle = anyio.Event()
        self.in_flight += 1

    def finished(self) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            self._idle.set()

    async def drain(self, seconds: float) -> None:
        """Refuse new sessions and report not ready; return once `seconds` passed, or sooner when
        nothing is in flight and nothing arrived for `QUIET_SECONDS`."""
        self.draining = True
        logger.info("draining: /readyz answers 503, new sessions are refused (at most %g s)", seconds)
        with anyio.move_on_after(seconds):
            while True:
                await self._idle.wait()
                arrival = self._arrival = anyio.Event()
                with anyio.move_on_after(QUIET_SECONDS):
                    await arrival.wait()
                if not arrival.is_set() and not self.in_flight:
                    break
        logger.info("drained (%d request(s) still in flight finish during shutdown)", self.in_flight)


_PEEK_BYTES = 64 * 1024
"""While draining, how much of a session-less request's body is read to tell an `initialize`."""


async def _body(receive: Receive) -> tuple[bytes, list[Message]]:
    """The start of the request body (up to `_PEEK_BYTES`: the app's own limit applies to the rest),
    and the messages read, to replay them to the app."""
    messages: list[Message] = []
    size = 0
    while size <= _PEEK_BYTES:
        message = await receive()
        messages.append(message)
        size += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            break
    return b"".join(m.get("body", b"") for m in messages), messages


def _opens_session(body: bytes) -> bool:
    try:
        data = object_or_none(json.loads(body))
    except ValueError:
        return False
    return data is not None and data.get("method") == "initialize"


class OpsMiddleware:
    """ASGI: answers `/healthz`, `/readyz`, `/metrics`; counts `/mcp` POSTs; refuses new sessions while draining."""

    def __init__(self, app: ASGIApp, ops: Operations) -> None:
        self.app = app
        self.ops = ops

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path"), scope.get("method")
        if path in ("/healthz", "/readyz", "/metrics") and method in ("GET", "HEAD"):
            await self._answer(path, scope)(scope, receive, send)
            return
        if method != "POST":
            await self.app(scope, receive, send)
            return
        if self.ops.draining and not any(k == b"mcp-session-id" for k, _ in scope["headers"]):
            body, messages = await _body(receive)
            if _opens_session(body):
                refusal = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "omega is draining"}}
                await JSONResponse(refusal, status_code=503, headers={"Connection": "close"})(scope, receive, send)
                return
            receive = _replay(messages, receive)
        self.ops.arrived()
        try:
            await self.app(scope, receive, send)
        finally:
            self.ops.finished()

    def _answer(self, path: str, scope: Scope) -> Response:
        if path == "/healthz":
            return PlainTextResponse("ok\n")
        if path == "/readyz":
            if self.ops.ready:
                return PlainTextResponse("ready\n")
            return PlainTextResponse("draining\n" if self.ops.draining else "starting\n", status_code=503)
        client = self.ops.tokens.client_of(next((v for k, v in scope["headers"] if k == b"authorization"), b""))
        if client is None:
            return PlainTextResponse("missing or wrong bearer token\n", status_code=401)
        if client:
            return PlainTextResponse("the hub's own token is required\n", status_code=403)
        return Response(self.ops.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
