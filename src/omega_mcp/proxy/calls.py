"""Forwarding one tools/call to a downstream session over the SDK: the reference path.

The downstream's answer comes back as wire JSON and what the client gets is `proxy/outcome.py`'s
decision, the one rule the relays (fastpath/relay.py) apply too: the result handed on untouched but
for its `ui://` URIs (only one without a `content` list is checked against the SDK model), an isError result a model can
act on (a timeout, the request cancelled downstream; a server that went away; a transport failure;
an answer over `max_message_mb`), or the server's JSON-RPC error, raised here
(`DownstreamRefusedError`): an MCP client gets that very error (code, message, data), the agent loop
and `call` its sentence. What the SDK reports as its own (its timeout, a closed connection) is
turned into the event it stands for before the rule is applied. The SDK hands each
progress notification to its callback in a task of its own, so the result can overtake the last
one; a call waits (bounded) for the progress it forwards before handing its result on, or an HTTP
client whose response stream closes with the result would never see that progress.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
from mcp import types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from omega_mcp.calling import PROCESS, CallContext
from omega_mcp.errors import DownstreamRefusedError
from omega_mcp.proxy.modern import RESERVED_META
from omega_mcp.proxy.oauth import step_up_needed
from omega_mcp.proxy.outcome import Broke, Called, Outcome, TimedOut, WentAway, outcome
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.results import Wire, error_wire
from omega_mcp.wire.oversize import is_too_large

__all__ = ["forward_call"]

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


async def forward_call(
    session: DownstreamSession,
    tool_name: str,
    arguments: dict[str, Any],
    context: CallContext = PROCESS,
) -> Wire:
    """Send one tools/call and return the result as wire JSON; failures are isError results.

    From `context`: the caller's `_meta` and progress, and its `extra` (the client's other call fields:
    a 2026-era retry's `inputResponses` and `requestState`), passed on as they are; its `caller`, as
    whose client the request is sent: for a 2026-era client an input-required round of a 2026-era
    server comes back as it is (`resultType: "input_required"`).

    Traced (server/tracing.py), the call is a CLIENT span, child of the client's request span; the
    SDK's own send span under it carries the trace context downstream in `_meta` (its
    `traceparent` replaces the client's). Untraced, no span is made (the current one is not recording).

    Raises:
        DownstreamRefusedError: the server answered with a JSON-RPC error (not a timeout or a lost
            connection); an MCP client gets that error as it is.
    """
    if not trace.get_current_span().is_recording():
        return await _forward(session, tool_name, arguments, context)
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
            result = await _forward(session, tool_name, arguments, context)
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
    context: CallContext,
) -> Wire:
    server_name, timeout = session.spec.server_name, session.spec.timeout_seconds
    meta, progress = context.meta, context.progress
    params: dict[str, Any] = {**(context.extra or {}), "name": tool_name, "arguments": arguments}
    if meta:
        # The progress token and the 2026 envelope keys belong to one hop (the dispatcher mints
        # our own); everything else (a client's tracing or tool-use ids) passes on.
        forwarded = {k: v for k, v in meta.items() if k != "progressToken" and not k.startswith(RESERVED_META)}
        if forwarded:
            params["_meta"] = forwarded
    tracked = _Progress(progress) if progress is not None else None
    call = Called(server_name, tool_name, session.spec.max_message_bytes, remote=isinstance(session.spec.target, str))
    try:
        result = await session.request(
            "tools/call", params, timeout_seconds=timeout, progress=tracked, caller=context.caller
        )
    except MCPError as exc:
        if exc.code == types.REQUEST_TIMEOUT:
            return _decided(session, outcome(call, TimedOut(timeout)))
        error = {"code": exc.code, "message": exc.message, "data": exc.error.data}
        if exc.code == types.CONNECTION_CLOSED and not is_too_large(exc.error.data):
            return _decided(session, outcome(call, WentAway(session.stopped_because())))
        decided = outcome(call, {"jsonrpc": "2.0", "id": None, "error": error})
        oauth = session.spec.oauth
        if (
            decided.error is not None
            and oauth is not None
            and exc.code == types.INTERNAL_ERROR
            and (needs := step_up_needed(oauth)) is not None
        ):
            return error_wire(needs)  # refused for want of a scope only a login can get
        return _decided(session, decided)
    except Exception as exc:  # transport failures (HTTP): the connection is no longer trustworthy
        return _decided(session, outcome(call, Broke(f"{type(exc).__name__}: {exc}")))
    if tracked is not None:
        await tracked.drain()
    return _decided(session, outcome(call, {"jsonrpc": "2.0", "id": None, "result": result}))


def _decided(session: DownstreamSession, decided: Outcome) -> Wire:
    """Act on the outcome: mark the session lost when it says so, raise the server's own error."""
    if decided.lose is not None:
        session.lose(decided.lose)
    if decided.error is not None:
        error = decided.error
        raise DownstreamRefusedError(
            decided.refusal, code=error["code"], rpc_message=str(error.get("message")), data=error.get("data")
        )
    assert decided.result is not None  # an outcome is a result or an error
    return decided.result
