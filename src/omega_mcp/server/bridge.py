"""Downstream requests for 2026-07-28 clients: the input-required round trips, bridged.

A 2026-07-28 client has no back-channel. A server that needs input during a call answers the call
with an `InputRequiredResult` (`inputRequests` plus an opaque `requestState`) and the client
retries the call with `inputResponses`. omega's downstreams speak the handshake era, so their
sampling, elicitation and roots requests arrive as JSON-RPC requests while the call runs. The
`Bridge` keeps such a call running across the client's round trips: the first tools/call starts
it in the background and waits; when the downstream asks, the call is answered with an
`InputRequiredResult` carrying those requests and a random `requestState`; the retry hands each
response to the downstream request waiting for it and waits again, for the result or the next
requests. A round the client abandons (cancels) cancels the call, downstream included; a call
nobody comes back for within `IDLE_SECONDS` is cancelled too. A call that never asks answers the
first round with its result, as without the bridge. A client that declares neither sampling,
elicitation nor roots cannot be asked anything: its calls skip the bridge (`asks_nothing`) and run
with an `Unreachable` caller, so that a downstream's request is declined (or answered by omega).
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.abc
from mcp import types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from omega_mcp.proxy.client_requests import CALLER, InputRequest

__all__ = ["IDLE_SECONDS", "Bridge", "Unreachable", "asks_nothing"]

logger = logging.getLogger(__name__)

IDLE_SECONDS = 120.0
"""How long a call waits for the client to come back with the input it asked for."""

_R = TypeVar("_R", bound=types.Result)
_keys = itertools.count(1)


@dataclass(slots=True, eq=False)
class _Ask:
    """One downstream request waiting for the client's response."""

    request: InputRequest
    answered: anyio.Event = field(default_factory=anyio.Event)
    response: dict[str, Any] | None = None


class _Call:
    """A call kept running across round trips; also the `Caller` of its downstream requests."""

    def __init__(
        self, capabilities: types.ClientCapabilities | None, name: str, report: ProgressFnT, client: object | None
    ) -> None:
        self.state = secrets.token_urlsafe(24)
        self._client = client
        self.capabilities = capabilities
        self.name = name
        self.report = report
        self.asks: dict[str, _Ask] = {}
        self.result: types.CallToolResult | None = None
        self.failure: BaseException | None = None
        self.done = False
        self.changed = anyio.Event()
        self.scope = anyio.CancelScope()
        self.waiting = 0
        self.idle = anyio.Event()

    def poke(self) -> None:
        event, self.changed = self.changed, anyio.Event()
        event.set()

    # -- the Caller protocol (proxy/client_requests.py) --------------------------------------

    @property
    def client(self) -> object:
        return self._client if self._client is not None else self  # unknown: each call is its own client

    async def ask(
        self, request: InputRequest, result_type: type[_R], *, timeout_seconds: float, progress: ProgressFnT | None
    ) -> _R:
        key = f"omega-{next(_keys)}"
        ask = self.asks[key] = _Ask(request)
        self.poke()
        try:
            with anyio.fail_after(timeout_seconds):
                await ask.answered.wait()
        except TimeoutError:
            raise MCPError(
                types.REQUEST_TIMEOUT, f"no answer to {request.method} within {timeout_seconds:g} s"
            ) from None
        finally:
            del self.asks[key]
        return result_type.model_validate(ask.response, by_name=False)

    async def notify(self, notification: types.ServerNotification) -> None:
        logger.debug("%s dropped: a 2026-07-28 client has no channel for it", notification.method)

    # -- rounds ------------------------------------------------------------------------------

    def answer(self, responses: types.InputResponses) -> None:
        for key, response in responses.items():
            ask = self.asks.get(key)
            if ask is not None and not ask.answered.is_set():
                ask.response = response.model_dump(by_alias=True, mode="json", exclude_none=True)
                ask.answered.set()

    def outcome(self) -> types.CallToolResult | types.InputRequiredResult | None:
        # Requests first: one of the same client's other calls may have put its downstream's here.
        unanswered = {key: ask.request for key, ask in self.asks.items() if not ask.answered.is_set()}
        if unanswered:
            return types.InputRequiredResult(input_requests=unanswered, request_state=self.state)
        if self.failure is not None:
            raise self.failure
        return self.result


def asks_nothing(capabilities: types.ClientCapabilities | None) -> bool:
    """Whether a client declared nothing a downstream could ask of it."""
    return capabilities is None or (
        capabilities.sampling is None and capabilities.elicitation is None and capabilities.roots is None
    )


class Unreachable:
    """The `Caller` of a 2026-era call from a client that can be asked nothing."""

    def __init__(self, capabilities: types.ClientCapabilities | None, name: str) -> None:
        self.capabilities = capabilities
        self.name = name

    @property
    def client(self) -> object:
        return self

    async def ask(
        self, request: InputRequest, result_type: type[_R], *, timeout_seconds: float, progress: ProgressFnT | None
    ) -> _R:
        raise MCPError(types.INVALID_REQUEST, f"omega's client {self.name} cannot be asked {request.method}")

    async def notify(self, notification: types.ServerNotification) -> None:
        logger.debug("%s dropped: a 2026-07-28 client has no channel for it", notification.method)


class Bridge:
    """The calls of 2026-era clients that are waiting for input, keyed by their `requestState`."""

    def __init__(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        self._calls: dict[str, _Call] = {}

    async def call_tool(
        self,
        params: types.CallToolRequestParams,
        run: Callable[[ProgressFnT], Awaitable[types.CallToolResult]],
        *,
        capabilities: types.ClientCapabilities | None,
        name: str,
        report: ProgressFnT,
        client: object | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One round of a call: `run(progress)` makes the call (the first round starts it).

        `client` identifies the client when the transport does (a 2026-era stdio stream has one);
        a 2026-era HTTP request carries no identity, and each of its calls counts as its own client.

        Raises:
            MCPError: INVALID_PARAMS for a `requestState` that names no waiting call.
        """
        if params.request_state is not None:
            call = self._calls.get(params.request_state)
            if call is None:
                raise MCPError(types.INVALID_PARAMS, "Invalid or expired requestState")
            call.report = report  # progress rides the current round's request
            call.answer(params.input_responses or {})
        else:
            call = _Call(capabilities, name, report, client)
            self._calls[call.state] = call
            self._task_group.start_soon(self._run, call, run, name="omega bridged call")
        return await self._round(call)

    async def _run(self, call: _Call, run: Callable[[ProgressFnT], Awaitable[types.CallToolResult]]) -> None:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            await call.report(progress, total, message)

        CALLER.set(call)  # this task's downstream requests go to this call
        try:
            with call.scope:
                async with anyio.create_task_group() as watch:
                    watch.start_soon(self._expire, call, watch.cancel_scope)
                    try:
                        call.result = await run(progress)
                    except Exception as exc:  # handed to the round waiting for it
                        call.failure = exc
                    call.done = True
                    call.poke()
                    await call.idle.wait()  # until the result is collected (or the call expires)
                    watch.cancel_scope.cancel()
        finally:
            self._calls.pop(call.state, None)

    async def _expire(self, call: _Call, scope: anyio.CancelScope) -> None:
        """Cancel the call when no round waits on it for IDLE_SECONDS."""
        while True:
            while call.waiting:
                await call.changed.wait()
            with anyio.move_on_after(IDLE_SECONDS) as idle:
                await call.changed.wait()
            if idle.cancelled_caught and not call.waiting:
                logger.info("a 2026-07-28 client did not come back for its call within %g s: cancelled", IDLE_SECONDS)
                call.scope.cancel()
                return

    async def _round(self, call: _Call) -> types.CallToolResult | types.InputRequiredResult:
        call.waiting += 1
        call.poke()
        finished = False
        try:
            while (outcome := call.outcome()) is None:
                await call.changed.wait()
            finished = not isinstance(outcome, types.InputRequiredResult)
            return outcome
        except anyio.get_cancelled_exc_class():
            call.scope.cancel()  # the client abandoned the call
            raise
        except Exception:
            finished = True  # the call failed (an unknown tool): that is its outcome
            raise
        finally:
            call.waiting -= 1
            call.poke()
            if finished:  # its outcome is delivered: let the call's task end
                call.idle.set()
                self._calls.pop(call.state, None)
