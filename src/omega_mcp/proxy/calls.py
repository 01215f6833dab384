"""Forwarding one tools/call to a downstream session, and the isError wording of every failure.

The downstream's result comes back as wire JSON and is handed on untouched (the hot path parses
nothing it does not have to; only a result without a `content` list is checked against the SDK
model). A failure is an isError result a model can act on: a timeout (the request was cancelled
downstream), a server that went away, or a transport failure. A JSON-RPC error the server answered
with is raised (`DownstreamRefusedError`): an MCP client gets that very error (code, message,
data), the agent loop and `call` its sentence. The relay (fastpath/relay.py) does the same. The SDK hands each
progress notification to its callback in a task of its own, so the result can overtake the last
one; a call waits (bounded) for the progress it forwards before handing its result on, or an HTTP
client whose response stream closes with the result would never see that progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
from mcp import types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from omega_mcp.errors import DownstreamRefusedError
from omega_mcp.proxy.modern import RESERVED_META
from omega_mcp.proxy.oauth import step_up_needed
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.results import Wire, checked_wire, error_wire, invalid_result
from omega_mcp.wire.oversize import is_too_large, limit_text

__all__ = ["forward_call", "refused", "timed_out", "too_long", "went_away"]

_PROGRESS_DRAIN_SECONDS = 2.0
_tracer = trace.get_tracer("omega-mcp")


class _Progress:
    """Forwards progress and knows when none is still on its way upstream."""

    def __init__(self, forward: ProgressFnT) -> None:
        self._forward = forward
        self._busy = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if not self._busy:
            self._idle = anyio.Event()
        self._busy += 1
        try:
            await self._forward(progress, total, message)
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()

    async def drain(self) -> None:
        await anyio.lowlevel.checkpoint()  # a forward spawned just before the result starts first
        with anyio.move_on_after(_PROGRESS_DRAIN_SECONDS):
            await self._idle.wait()


def timed_out(server_name: str, tool_name: str, timeout: float) -> str:
    """The isError text of a call that ran past the server's `timeout`."""
    return (
        f"{tool_name} on server {server_name} timed out after {timeout:g} s and was cancelled "
        f"(raise `timeout` in [servers.{server_name}] if it needs longer)"
    )


def went_away(server_name: str, tool_name: str, *, remote: bool = False, why: str | None = None) -> str:
    """The isError text of a call whose server died (or, `remote`, whose connection broke) under it.

    `why` is `DownstreamSession.stopped_because()`: omega ended the connection itself, for that reason.
    """
    again = "reconnect to it" if remote else "restart it"
    if why is not None:
        return f"server {server_name} was stopped during the call to {tool_name}: {why}; omega will {again}"
    return f"server {server_name} went away during the call to {tool_name}; omega will {again}"


def too_long(server_name: str, tool_name: str, limit: int) -> str:
    """The isError text of a call whose result was longer than `[hub] max_message_mb` (the server is fine)."""
    return (
        f"the result of {tool_name} from server {server_name} is longer than {limit_text(limit)} and was dropped "
        "(raise max_message_mb in [hub] for larger results)"
    )


def refused(server_name: str, tool_name: str, message: str, code: int) -> str:
    """The isError text of a call the server answered with a JSON-RPC error."""
    return f"server {server_name} refused the call to {tool_name}: {message} (error {code})"


async def forward_call(
    session: DownstreamSession,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    progress: ProgressFnT | None = None,
    meta: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Wire:
    """Send one tools/call and return the result as wire JSON; failures are isError results.

    `extra` holds the client's other call fields (a 2026-era retry's `inputResponses` and
    `requestState`), passed on as they are; for a 2026-era client an input-required round of a
    2026-era server comes back as it is (`resultType: "input_required"`).

    Traced (server/tracing.py), the call is a CLIENT span, child of the client's request span; the
    SDK's own send span under it carries the trace context downstream in `_meta` (its
    `traceparent` replaces the client's). Untraced, no span is made (the current one is not recording).

    Raises:
        DownstreamRefusedError: the server answered with a JSON-RPC error (not a timeout or a lost
            connection); an MCP client gets that error as it is.
    """
    if not trace.get_current_span().is_recording():
        return await _forward(session, tool_name, arguments, progress=progress, meta=meta, extra=extra)
    server_name = session.spec.server_name
    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "omega.server.name": server_name,
    }
    with _tracer.start_as_current_span(
        f"tools/call {tool_name}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            result = await _forward(session, tool_name, arguments, progress=progress, meta=meta, extra=extra)
        except DownstreamRefusedError as exc:
            span.set_attribute("error.type", str(exc.code))
            span.set_status(StatusCode.ERROR, exc.rpc_message)
            raise
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise
        if result.get("isError") is True:
            span.set_attribute("error.type", "tool_error")
            span.set_status(StatusCode.ERROR)
        return result


async def _forward(
    session: DownstreamSession,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    progress: ProgressFnT | None,
    meta: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None,
) -> Wire:
    server_name, timeout = session.spec.server_name, session.spec.timeout_seconds
    params: dict[str, Any] = {**(extra or {}), "name": tool_name, "arguments": arguments}
    if meta:
        # The progress token and the 2026 envelope keys belong to one hop (the dispatcher mints
        # our own); everything else (a client's tracing or tool-use ids) passes on.
        forwarded = {k: v for k, v in meta.items() if k != "progressToken" and not k.startswith(RESERVED_META)}
        if forwarded:
            params["_meta"] = forwarded
    tracked = _Progress(progress) if progress is not None else None
    try:
        result = await session.request("tools/call", params, timeout_seconds=timeout, progress=tracked)
    except MCPError as exc:
        if exc.code == types.REQUEST_TIMEOUT:
            return error_wire(timed_out(server_name, tool_name, timeout))
        if is_too_large(exc.error.data):
            return error_wire(too_long(server_name, tool_name, session.spec.max_message_bytes))
        if exc.code == types.CONNECTION_CLOSED:
            why = session.stopped_because()
            session.lose(why or "the server closed the connection")
            return error_wire(went_away(server_name, tool_name, remote=isinstance(session.spec.target, str), why=why))
        oauth = session.spec.oauth
        if oauth is not None and exc.code == types.INTERNAL_ERROR and (needs := step_up_needed(oauth)) is not None:
            return error_wire(needs)  # refused for want of a scope only a login can get
        # The downstream's own error, as it is (code, message, data): e.g. -32042 drives a flow.
        raise DownstreamRefusedError(
            refused(server_name, tool_name, exc.message, exc.code),
            code=exc.code,
            rpc_message=exc.message,
            data=exc.error.data,
        ) from None
    except Exception as exc:  # transport failures (HTTP): the connection is no longer trustworthy
        session.lose(f"{type(exc).__name__}: {exc}")
        return error_wire(f"server {server_name} failed during the call to {tool_name}: {type(exc).__name__}: {exc}")
    if tracked is not None:
        await tracked.drain()
    if result.get("resultType") == "input_required":
        return result  # the client's own round to answer (only a 2026-era client is handed one)
    if not isinstance(result.get("content"), list):
        return checked_wire(result, invalid=invalid_result(server_name, tool_name))
    return result
