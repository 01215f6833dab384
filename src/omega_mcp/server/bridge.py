"""Downstream requests for 2026-07-28 clients: a handshake-era server's requests, as input-required rounds.

A 2026-07-28 client has no back-channel. A 2026-era server that needs input answers with an
`InputRequiredResult` (its `inputRequests` under its own keys, its own `requestState`), which omega
hands the client as it is; the client's retry goes back to the server as it is. A handshake-era
server instead sends JSON-RPC requests (sampling, elicitation, roots) while the request runs. The
`Bridge` keeps such a request (`tools/call`, `prompts/get`, `resources/read`) running across the
client's rounds: the first round starts it in the background and waits; when the server asks, the
round is answered with an `InputRequiredResult` carrying those requests and a fresh `requestState`
(one per round, marked as omega's, so any other state is the server's own and passes through);
the retry hands each response to the server request waiting for it and waits again, for the
result or the next requests. Each bridged request runs as its own `Caller` (over HTTP a server's
request names the call it belongs to, so concurrent clients never wait on each other). A round the
client abandons (cancels) cancels the request, downstream included; one nobody comes back for
within `IDLE_SECONDS` is cancelled too. A request that never asks answers its first round with its
result, as without the bridge. A client that declares neither sampling, elicitation nor roots
cannot be asked anything: its requests skip the bridge (`asks_nothing`) and run with an
`Unreachable` caller, so that a server's request is declined (or answered by omega).

Behind a balancer a round's continuation must reach the replica holding the request (its state is a
running downstream request, which cannot travel). A request that arrives with `Omega-Replica: NAME`
(HAProxy's `http-send-name-header`, deploy/haproxy.cfg) gets states `omega-round:NAME:<token>`,
so the balancer can send the retry to server NAME by its body alone (`replica_of_request`).
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.abc
from mcp import types
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from omega_mcp.calling import Caller, InputRequest
from omega_mcp.loglevels import allows

__all__ = [
    "IDLE_SECONDS",
    "REPLICA_HEADER",
    "STATE_PREFIX",
    "Bridge",
    "ModernCaller",
    "Run",
    "Unreachable",
    "asks_nothing",
    "replica_of_request",
]

logger = logging.getLogger(__name__)

IDLE_SECONDS = 60.0
"""How long a bridged request waits for its client to come back with the input it asked for."""
STATE_PREFIX = "omega-round:"
"""How omega's own `requestState` values begin (any other is a downstream's, passed on)."""

REPLICA_HEADER = "omega-replica"
"""The request header a balancer names the replica with (deploy/haproxy.cfg: `http-send-name-header`)."""
_REPLICA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_R = TypeVar("_R", bound=types.Result)
_LEVELS: dict[str, types.LoggingLevel] = {
    name: name for name in ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
}
_keys = itertools.count(1)
Raw = dict[str, Any]
Run = Callable[[ProgressFnT, Caller], Awaitable[Raw]]
"""`run(progress, caller)`: a client's request, made with the progress to report and the caller its
downstream requests go to."""


class ModernCaller:
    """A 2026-era client's request as the `Caller` of what it causes downstream: its envelope, its logs."""

    def __init__(self, session: ServerSession, meta: dict[str, Any] | None) -> None:
        self.session = session
        self.capabilities = session.client_capabilities
        params = session.client_params
        self.client_info = params.client_info if params is not None else None
        self.name = self.client_info.name if self.client_info is not None else "unnamed"
        level = (meta or {}).get("io.modelcontextprotocol/logLevel")
        self.log_level: types.LoggingLevel | None = _LEVELS.get(level) if isinstance(level, str) else None

    @property
    def modern(self) -> bool:
        return True

    @property
    def client(self) -> object:
        return self  # a 2026-era HTTP request carries no identity: each request counts as its own client

    async def ask(
        self, request: InputRequest, result_type: type[_R], *, timeout_seconds: float, progress: ProgressFnT | None
    ) -> _R:
        raise MCPError(types.INVALID_REQUEST, f"omega's client {self.name} cannot be asked {request.method}")

    async def notify(self, notification: types.ServerNotification) -> None:
        logger.debug("%s dropped: a 2026-07-28 client has no channel for it", notification.method)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not allows(self.log_level, params.level):  # what this request's `_meta` log level asked for
            return
        try:  # on the request's own stream (any related id makes it request-scoped)
            await self.session.send_notification(types.LoggingMessageNotification(params=params), related_request_id=0)
        except Exception as exc:  # boundary: a client that went away just misses it
            logger.debug("a log message was not delivered: %s", exc)


class Unreachable(ModernCaller):
    """The `Caller` of a 2026-era request from a client that can be asked nothing."""


@dataclass(slots=True, eq=False)
class _Ask:
    """One downstream request waiting for the client's response."""

    request: InputRequest
    answered: anyio.Event = field(default_factory=anyio.Event)
    response: dict[str, Any] | None = None


class _Call(ModernCaller):
    """A request kept running across rounds; also the `Caller` of its downstream requests."""

    def __init__(
        self,
        session: ServerSession,
        meta: dict[str, Any] | None,
        report: ProgressFnT,
        client: object,
        replica: str | None = None,
    ) -> None:
        super().__init__(session, meta)
        self.state = ""
        self.state_prefix = f"{STATE_PREFIX}{replica}:" if replica else STATE_PREFIX
        self._client = client
        self.report = report
        self.asks: dict[str, _Ask] = {}
        self.result: Raw | None = None
        self.failure: BaseException | None = None
        self.done = False
        self.changed = anyio.Event()
        self.scope = anyio.CancelScope()
        self.waiting = 0
        self.idle = anyio.Event()

    def poke(self) -> None:
        event, self.changed = self.changed, anyio.Event()
        event.set()

    @property
    def client(self) -> object:
        return self._client if self._client is not None else self

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

    def answer(self, responses: types.InputResponses) -> None:
        for key, response in responses.items():
            ask = self.asks.get(key)
            if ask is not None and not ask.answered.is_set():
                ask.response = response.model_dump(by_alias=True, mode="json", exclude_none=True)
                ask.answered.set()

    def outcome(self) -> Raw | types.InputRequiredResult | None:
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


def ours(state: str | None) -> bool:
    """Whether a `requestState` is one of omega's rounds (not a downstream's own)."""
    return state is not None and state.startswith(STATE_PREFIX)


class Bridge:
    """The requests of 2026-era clients that are waiting for input, keyed by their current `requestState`."""

    def __init__(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        self._calls: dict[str, _Call] = {}

    async def run(
        self,
        session: ServerSession,
        meta: dict[str, Any] | None,
        request_state: str | None,
        input_responses: types.InputResponses | None,
        run: Run,
        *,
        report: ProgressFnT,
        client: object | None = None,
        replica: str | None = None,
    ) -> Raw | types.InputRequiredResult:
        """One round of a request: `run(progress, caller)` makes it (the first round starts it; the
        caller its downstream requests go to is the waiting call).

        `client` identifies the client when the transport does (a 2026-era stdio stream has one);
        a 2026-era HTTP request carries no identity, and each of its requests counts as its own client.
        `replica` (`replica_of_request`) is named in the round's states, for the balancer.

        Raises:
            MCPError: INVALID_PARAMS for one of omega's `requestState` values that names no waiting request.
        """
        if ours(request_state):
            assert request_state is not None
            call = self._calls.pop(request_state, None)
            if call is None:
                raise MCPError(types.INVALID_PARAMS, "Invalid or expired requestState")
            call.report = report  # progress rides the current round's request
            call.session = session  # and so do its log messages
            call.answer(input_responses or {})
        else:
            call = _Call(session, meta, report, client, replica)
            self._task_group.start_soon(self._run, call, run, name="omega bridged request")
        return await self._round(call)

    async def _run(self, call: _Call, run: Run) -> None:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            await call.report(progress, total, message)

        try:
            with call.scope:
                async with anyio.create_task_group() as watch:
                    watch.start_soon(self._expire, call)
                    try:
                        call.result = await run(progress, call)  # its downstream requests go to this call
                    except Exception as exc:  # handed to the round waiting for it
                        call.failure = exc
                    call.done = True
                    call.poke()
                    await call.idle.wait()  # until the result is collected (or the call expires)
                    watch.cancel_scope.cancel()
        finally:
            self._calls.pop(call.state, None)

    async def _expire(self, call: _Call) -> None:
        """Cancel the request when no round waits on it for IDLE_SECONDS."""
        while True:
            while call.waiting:
                await call.changed.wait()
            with anyio.move_on_after(IDLE_SECONDS) as idle:
                await call.changed.wait()
            if idle.cancelled_caught and not call.waiting:
                logger.info(
                    "a 2026-07-28 client did not come back for its request within %g s: cancelled", IDLE_SECONDS
                )
                call.scope.cancel()
                return

    async def _round(self, call: _Call) -> Raw | types.InputRequiredResult:
        call.waiting += 1
        call.poke()
        finished = False
        try:
            while True:
                call.state = f"{call.state_prefix}{secrets.token_urlsafe(24)}"  # a fresh state for every round
                outcome = call.outcome()
                if outcome is not None:
                    break
                await call.changed.wait()
            if isinstance(outcome, types.InputRequiredResult):
                self._calls[call.state] = call
            else:
                finished = True
            return outcome
        except anyio.get_cancelled_exc_class():
            call.scope.cancel()  # the client abandoned the request
            raise
        except Exception:
            finished = True  # the request failed (an unknown tool): that is its outcome
            raise
        finally:
            call.waiting -= 1
            call.poke()
            if finished:  # its outcome is delivered: let the request's task end
                call.idle.set()


def replica_of_request(http_request: object) -> str | None:
    """The replica name a balancer gave an HTTP request (`Omega-Replica`), when it is a plain name."""
    headers = getattr(http_request, "headers", None)
    getter = getattr(headers, "get", None)
    name = getter(REPLICA_HEADER) if callable(getter) else None
    return name if isinstance(name, str) and _REPLICA_NAME.fullmatch(name) else None
