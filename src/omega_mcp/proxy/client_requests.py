"""Server→client requests of downstream servers, routed to the omega client whose call caused them.

A downstream server may ask its client, omega, to sample an LLM (`sampling/createMessage`, tools
included), to ask the user (`elicitation/create`, form or URL mode) or for its roots (`roots/list`).
`ClientRequests` answers them for every downstream session (`for_server` gives the SDK callbacks):

- Routing. Each call names the client request behind it (`CallContext.caller`); `calling()` keeps
  the calls in flight per server, and the session's send puts it in `CALLER` for the SDK's callbacks.
  Over streamable HTTP a downstream's request (or log message) rides the response stream of the
  call that caused it, and the SDK hands it on in that call's context: `CALLER` says exactly whose
  it is. Over stdio nothing on the wire says so: it goes to
  the client whose calls are running on that server, not counting calls parked on a request of
  their own to their client (their handler is waiting, so it is not the one asking); with none
  running, to the client that connected first; with calls of several clients running there at
  once it is declined, because handing one user another's request would be worse. A log message
  outside any call goes to no client (omega's own log has it).
- Capabilities, decided: downstreams connect at startup, before any client exists, and one hub
  serves several clients with different capabilities; reconnecting servers whenever a client
  connects would restart them under running calls. So omega declares what it can route: `roots`
  always (a client's roots, else none), `sampling` (with `tools`) and `elicitation` (form
  and URL) when it serves MCP clients, `sampling` also when `[sampling]` configures a provider.
  A client that did not declare a capability is never asked: the downstream gets a JSON-RPC error
  saying why (sampling goes to omega's provider instead when `[sampling]` allows that server).
- Roots: the routed client's when it declared roots, else `roots` (none from the CLI: an empty
  list leaves a server such as `server-filesystem` with the directories its command line names,
  as a client without roots would).
  Downstreams get `notifications/roots/list_changed` when a client's roots change, and when the
  first client (whose roots they see outside calls) arrives or leaves.
- Progress and cancellation: a progress token on the downstream's request is honoured (the client's
  progress goes back to it under that token); a downstream that cancels its request cancels the one
  sent on; a client that cancels its call cancels the downstream call, which cancels its requests.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from mcp import types
from mcp.client.extension import NotificationBinding
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from omega_mcp.calling import Caller, InputRequest
from omega_mcp.narrow import as_object
from omega_mcp.proxy.tasks import RELATED_TASK

__all__ = ["CALLER", "Caller", "ClientRequests", "InputRequest", "Sampler", "SamplingAnswer", "ServerRequests"]

logger = logging.getLogger(__name__)

SamplingAnswer = types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData
_R = TypeVar("_R", bound=types.Result)
_AMBIGUOUS: Literal["ambiguous"] = "ambiguous"
_ELICITATIONS_KEPT = 256  # URL elicitations whose completion may still be announced


CALLER: ContextVar[Caller | None] = ContextVar("omega_mcp_caller", default=None)
"""The client request on whose behalf the current task calls a downstream. The call's `caller` travels
explicitly (`CallContext.caller`) down to `DownstreamSession.request`, which sets this around its send:
the SDK calls the session's callbacks (sampling, elicitation, roots, log messages) with its own context
only (`ClientRequestContext`), so over streamable HTTP, where such a request rides the response of the
call that caused it and runs in that call's context, this is the one way it can say whose it is."""


class Sampler(Protocol):
    """Answers sampling with omega's own provider (`proxy/sampling.py`)."""

    @property
    def always(self) -> bool:
        """`[sampling] mode = "always"`: never ask the client."""
        ...

    async def sample(self, server_name: str, params: types.CreateMessageRequestParams) -> SamplingAnswer: ...


def _can_sample(caps: types.ClientCapabilities | None, params: types.CreateMessageRequestParams) -> bool:
    if caps is None or caps.sampling is None:
        return False
    return caps.sampling.tools is not None or not (params.tools or params.tool_choice)


def _can_elicit(caps: types.ClientCapabilities | None, mode: str) -> bool:
    if caps is None or caps.elicitation is None:
        return False
    if mode == "url":
        return caps.elicitation.url is not None
    # `elicitation: {}` (the pre-2025-11-25 shape) means form mode.
    return caps.elicitation.form is not None or caps.elicitation.url is None


class ClientRequests:
    """The routing table for server→client requests: omega's clients and the calls in flight.

    `serving`: omega serves MCP clients (`serve`, tests); the one-shot commands and the agent do not,
    so they declare no elicitation, and sampling only with a `sampler`. `roots` are reported when no
    client's roots apply (the CLI gives none).
    """

    def __init__(self, *, serving: bool = True, sampler: Sampler | None = None, roots: Sequence[Path] = ()) -> None:
        self.serving = serving
        self.sampler = sampler
        self.roots = [
            types.Root.model_validate({"uri": path.as_uri(), "name": path.name or str(path)}) for path in roots
        ]
        self._clients: dict[object, Caller] = {}  # in connection order
        self._calls: dict[str, list[Caller]] = {}
        self._parked: dict[int, int] = {}  # id(caller) -> its requests waiting on its client
        self._elicitations: dict[tuple[str, str], Caller] = {}
        self.roots_listener: Callable[[], Awaitable[None]] | None = None
        """Tells every downstream that the roots changed (set by `Downstreams`)."""
        self.task_status: Callable[[str, Mapping[str, Any], object], Awaitable[None]] | None = None
        """Takes a server's `notifications/tasks/status` (server name, params, the connection it came on) to the
        task's owner (server/tasks.py)."""
        self.task_label: Callable[[str, str, object], str | None] | None = None
        """The id a client knows a server's task by (server name, the server's id, the connection that asks), or
        None (server/tasks.py). The connection tells two sessions' own processes of one server apart (pool.py),
        whose ids for their tasks may be the same."""

    # -- clients -----------------------------------------------------------------------------

    async def add_client(self, caller: Caller) -> None:
        """A client finished its handshake: `caller` reaches it outside any call (its standalone channel)."""
        first = not self._clients
        self._clients[caller.client] = caller
        if first and caller.capabilities is not None and caller.capabilities.roots is not None:
            await self.roots_changed()  # downstreams saw the workspace until now

    async def remove_client(self, client: object) -> None:
        """A client went away."""
        first = next(iter(self._clients), None)
        gone = self._clients.pop(client, None)
        self._elicitations = {k: v for k, v in self._elicitations.items() if v.client is not client}
        if gone is not None and first is client:
            await self.roots_changed()

    async def client_roots_changed(self, client: object) -> None:
        """A client said its roots changed (`notifications/roots/list_changed`)."""
        if client in self._clients:
            await self.roots_changed()

    async def roots_changed(self) -> None:
        listener = self.roots_listener
        if listener is not None:
            await listener()

    # -- calls -------------------------------------------------------------------------------

    @contextmanager
    def calling(self, server_name: str, caller: Caller | None) -> Generator[None]:
        """While entered, `caller` (if any) has a call in flight on `server_name`."""
        if caller is None:
            yield
            return
        running = self._calls.setdefault(server_name, [])
        running.append(caller)
        try:
            yield
        finally:
            running.remove(caller)
            if not running:
                del self._calls[server_name]

    @contextmanager
    def parked(self, caller: Caller) -> Generator[None]:
        """While entered, `caller`'s call waits on a request to its client: it is not the one asking next."""
        key = id(caller)
        self._parked[key] = self._parked.get(key, 0) + 1
        try:
            yield
        finally:
            self._parked[key] -= 1
            if not self._parked[key]:
                del self._parked[key]

    def _running(self, server_name: str) -> Caller | Literal["ambiguous"] | None:
        running = self._calls.get(server_name)
        if not running:
            return None
        awake = [c for c in running if id(c) not in self._parked] or running
        latest = awake[-1]
        if any(c.client is not latest.client for c in awake):
            return _AMBIGUOUS
        return latest

    def route(self, server_name: str) -> Caller | Literal["ambiguous"] | None:
        """Who gets a request `server_name` makes now: the call it came with (`CALLER`, exact over HTTP),
        else its running calls' client, else the first client."""
        caller = CALLER.get()
        if caller is not None:
            return caller
        running = self._running(server_name)
        return running if running is not None else next(iter(self._clients.values()), None)

    def log_route(self, server_name: str) -> Caller | None:
        """Whose a log message `server_name` sends now is: the call it came with, else the only client
        with calls running there; None outside calls or when that is ambiguous."""
        caller = CALLER.get()
        if caller is not None:
            return caller
        running = self._running(server_name)
        return running if running is not None and not isinstance(running, str) else None

    def for_server(self, server_name: str, timeout: float) -> ServerRequests:
        """The handlers of one downstream session (`timeout` bounds each request sent on)."""
        return ServerRequests(self, server_name, timeout)

    def remember_elicitation(self, server_name: str, elicitation_id: str, caller: Caller) -> None:
        if len(self._elicitations) >= _ELICITATIONS_KEPT:
            del self._elicitations[next(iter(self._elicitations))]
        self._elicitations[server_name, elicitation_id] = caller

    def elicitation_caller(self, server_name: str, elicitation_id: str) -> Caller | None:
        return self._elicitations.pop((server_name, elicitation_id), None)


class ServerRequests:
    """The SDK client callbacks of one downstream session, routed through `ClientRequests`."""

    def __init__(self, router: ClientRequests, server_name: str, timeout: float) -> None:
        self.router = router
        self.server_name = server_name
        self.timeout = timeout
        self.connection: object = None
        """The downstream session these callbacks serve (set by it): what its tasks' notifications name."""

    def session_options(self) -> dict[str, Any]:
        """`ClientSession` keyword arguments: the callbacks, whose presence declares the capabilities."""
        options: dict[str, Any] = {"list_roots_callback": self.list_roots}
        if self.router.serving or self.router.sampler is not None:
            options["sampling_callback"] = self.sampling
            options["sampling_capabilities"] = types.SamplingCapability(tools=types.SamplingToolsCapability())
        if self.router.serving:
            options["elicitation_callback"] = self.elicitation
            options["notification_bindings"] = [
                NotificationBinding(
                    method="notifications/tasks/status",
                    params_type=types.TaskStatusNotificationParams,
                    handler=self.task_status,
                )
            ]
        return options

    async def task_status(self, params: types.TaskStatusNotificationParams) -> None:
        relay = self.router.task_status
        if relay is not None:
            await relay(
                self.server_name, params.model_dump(by_alias=True, mode="json", exclude_unset=True), self.connection
            )

    # -- the three requests ------------------------------------------------------------------

    async def sampling(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> SamplingAnswer:
        sampler = self.router.sampler
        if sampler is not None and sampler.always:
            return await sampler.sample(self.server_name, params)
        route = self.router.route(self.server_name)
        if not isinstance(route, str) and route is not None and _can_sample(route.capabilities, params):
            sampling = route.capabilities.sampling if route.capabilities else None
            if params.include_context not in (None, "none") and (sampling is None or sampling.context is None):
                params = params.model_copy(update={"include_context": None})  # the client cannot include context
            request = types.CreateMessageRequest(params=self._relabelled(_without_token(params)))
            if params.tools or params.tool_choice:
                return await self._ask(ctx, route, request, types.CreateMessageResultWithTools)
            return await self._ask(ctx, route, request, types.CreateMessageResult)
        if sampler is not None:
            return await sampler.sample(self.server_name, params)
        what = "sampling with tools" if params.tools or params.tool_choice else "sampling"
        hint = "; set [sampling] in servers.toml to let omega answer with its own provider"
        return self._decline("sampling/createMessage", route, what, hint)

    async def elicitation(
        self, ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        route = self.router.route(self.server_name)
        if isinstance(route, str) or route is None or not _can_elicit(route.capabilities, params.mode):
            return self._decline("elicitation/create", route, f"{params.mode} elicitation", "")
        if isinstance(params, types.ElicitRequestURLParams) and params.elicitation_id:
            self.router.remember_elicitation(self.server_name, params.elicitation_id, route)
        request = types.ElicitRequest(params=self._relabelled(_without_token(params)))
        return await self._ask(ctx, route, request, types.ElicitResult)

    async def list_roots(self, ctx: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        route = self.router.route(self.server_name)
        if isinstance(route, str) or route is None or route.capabilities is None or route.capabilities.roots is None:
            return types.ListRootsResult(roots=list(self.router.roots))
        params = types.RequestParams(_meta=ctx.meta) if ctx.meta else None
        request = types.ListRootsRequest(params=_without_token(params) if params is not None else None)
        return await self._ask(ctx, route, request, types.ListRootsResult)

    async def on_notification(self, message: IncomingMessage) -> None:
        """Notifications that belong to a client: a URL elicitation's completion."""
        if isinstance(message, types.ElicitCompleteNotification):
            caller = self.router.elicitation_caller(self.server_name, message.params.elicitation_id)
            if caller is not None:
                await caller.notify(message)

    # -- sending on --------------------------------------------------------------------------

    def _relabelled(self, params: _P) -> _P:
        """`params` naming the task they belong to by the id omega gave the client, not the server's own."""
        meta, label = params.meta, self.router.task_label
        related = as_object(meta.get(RELATED_TASK)) if meta and label is not None else {}
        remote_id = related.get("taskId")
        if label is None or not isinstance(remote_id, str):
            return params
        local_id = label(self.server_name, remote_id, self.connection)
        if not meta or local_id is None:
            return params
        return params.model_copy(update={"meta": {**meta, RELATED_TASK: {**related, "taskId": local_id}}})

    async def _ask(
        self, ctx: ClientRequestContext, caller: Caller, request: InputRequest, result_type: type[_R]
    ) -> _R | types.ErrorData:
        token = ctx.meta.get("progress_token") if ctx.meta else None
        progress = _progress_to(ctx, token) if token is not None else None
        logger.debug("[%s] %s goes to client %s", self.server_name, request.method, caller.name)
        try:
            with self.router.parked(caller):
                return await caller.ask(request, result_type, timeout_seconds=self.timeout, progress=progress)
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                text = f"omega's client {caller.name} did not answer {request.method} within {self.timeout:g} s"
                return types.ErrorData(code=types.REQUEST_TIMEOUT, message=text)
            return exc.error  # the client's own answer, or why it cannot be asked
        except ValidationError:
            text = f"omega's client {caller.name} answered {request.method} with an invalid result"
            return types.ErrorData(code=types.INTERNAL_ERROR, message=text)

    def _decline(self, method: str, route: Caller | str | None, what: str, hint: str) -> types.ErrorData:
        if route is None:
            why = "no client of omega can be asked (none is connected, or it has no channel for requests)"
        elif isinstance(route, str):
            why = (
                f"calls of several clients are running on server {self.server_name} at once, and omega "
                "cannot tell which one it belongs to"
            )
        else:
            why = f"omega's client {route.name} does not support {what}"
        message = f"omega cannot pass on {method} from server {self.server_name}: {why}{hint}"
        logger.info("%s", message)
        return types.ErrorData(code=types.INVALID_REQUEST, message=message)


_P = TypeVar("_P", bound=types.RequestParams)


def _progress_to(ctx: ClientRequestContext, token: types.ProgressToken) -> ProgressFnT:
    """Progress the client reports, passed to the downstream under the token of its request."""
    session = ctx.session

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        update = types.ProgressNotificationParams(progress_token=token, progress=progress, total=total, message=message)
        await session.send_notification(types.ProgressNotification(params=update))

    return forward


def _without_token(params: _P) -> _P:
    """`params` without the downstream's progress token: the token sent on is omega's own."""
    if not params.meta or "progress_token" not in params.meta:
        return params
    meta = {k: v for k, v in params.meta.items() if k != "progress_token"}
    return params.model_copy(update={"meta": meta or None})
