"""The tools/call relay: calls from a stdio client to a stdio or streamable HTTP server, as plain JSON.

When omega serves stdio, the SDK machinery on both sides (dispatch tasks, request models, stream
hops, and for an HTTP server its HTTP client) is most of what the proxy hop costs. The relay takes
such a `tools/call` off the client's pipe (`PipeReader.take`: synchronously, in the loop iteration
that read it, with no task switch), checks it exactly as the Toolbox does (route from the namespace
dict, arguments against the compiled validator), writes it to the server's pipe under its own
request id and writes the server's answer back under the client's id (the same way, from the server
pipe's `take`), otherwise untouched. To a streamable HTTP server (one the relay can speak to:
`proxy/http_lane.py`) the call is a POST of its own, in a task, and the answer's messages (a JSON
body or an event stream) are handled as a pipe's are; what the relay does not take goes to the SDK
session, which answers a server's request as its own transport would have. Progress tokens and
`notifications/cancelled` are mapped both ways, the server's `timeout` cancels downstream and
answers isError, and a server that dies fails its pending calls; what the client gets for each
answer or failure is `proxy/outcome.py`'s decision, the rule `forward_call` applies too. A 2026-07-28 client's call (no
handshake: its `_meta` names the version, client info and capabilities) goes to a 2026-era server as
it is, envelope, input-required rounds and all, and comes back as it is; to a handshake-era server
it is relayed only when the client can be asked nothing and it is no round's retry (else the bridge
is needed: server/bridge.py), with the envelope's reserved `_meta` keys left out as the SDK path
leaves them, and its answer gets what the SDK's runner gives every 2026-era result: `resultType` and
the server's `serverInfo` stamp. A server's log message while relayed calls run there is its
client's (the one stdio client), at the level that client asked for. Anything else — a built-in, a
down server, invalid arguments, a half-built envelope, a call before the handshake, a handshake-era
call to a server whose handshake-era connection is not open yet — is left to the SDK path, which
answers the same.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import h11
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp.errors import InvalidArgumentsError
from omega_mcp.loglevels import allows
from omega_mcp.narrow import as_object, object_or_none
from omega_mcp.proxy.http_lane import Lane, Refusal
from omega_mcp.proxy.outcome import Answer, Broke, Called, Outcome, Oversized, TimedOut, WentAway, outcome
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.results import modern_complete
from omega_mcp.toolbox import Toolbox
from omega_mcp.wire.envelope import RESERVED_META, VERSION_KEY, askable, enveloped, log_level_of
from omega_mcp.wire.jsonline import encode_line
from omega_mcp.wire.pipes import PipeReader, PipeWriter
from omega_mcp.wire.sse import TooLong

__all__ = ["Relay"]

logger = logging.getLogger(__name__)

_PREFIX = "omega-relay-"
_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError)


@dataclass(slots=True)
class _Call:
    client_id: Any
    server_name: str
    tool_name: str
    session: DownstreamSession
    timeout: float
    pipes: tuple[PipeReader[Any], PipeWriter[Any]] | None
    """A stdio server's pipes; None: an HTTP server's `lane`, one POST per call."""
    lane: Lane | None = None
    scope: anyio.CancelScope | None = None
    """The POST's (an HTTP call), made with the call: cancelled, even before its task starts, the POST
    is not sent or its connection is closed (the 2026 era's cancel)."""
    client_token: Any = None
    modern: bool = False
    """A 2026-era client's call."""
    passed: bool = False
    """Passed on as it is, to a 2026-era server (no envelope of ours on the answer)."""
    log_level: str | None = None

    def decide(self, answer: Answer) -> Outcome:
        """What the client gets for `answer`: the SDK path's rule (`proxy/outcome.py`)."""
        called = Called(
            self.server_name,
            self.tool_name,
            self.session.spec.max_message_bytes,
            remote=self.lane is not None,
            rounds=self.passed,
        )
        return outcome(called, answer)

    @property
    def source(self) -> PipeReader[Any] | Lane | None:
        """Where its answer comes from (a server's log message there is this call's too)."""
        return self.pipes[0] if self.pipes is not None else self.lane


class Relay:
    """Relays tools/call between one stdio client and the stdio downstream servers."""

    def __init__(
        self,
        toolbox: Toolbox,
        downstreams: Downstreams,
        client: PipeWriter[Any],
        task_group: anyio.abc.TaskGroup,
        *,
        server_info: dict[str, Any] | None = None,
        accept: Callable[[str], bool] | None = None,
        log_level: Callable[[], str | None] = lambda: None,
    ) -> None:
        """`accept(name)`: whether the relay takes a call to `name` (one it declines goes the SDK way: in
        search mode, a tool the session has not listed yet). `log_level()`: the level the (handshake-era)
        client asked for with `logging/setLevel`, if any."""
        self._accept = accept
        self._server_info = json.dumps(server_info or {})  # stamped into each 2026-era answer, copied fresh
        self._log_level = log_level
        self._toolbox = toolbox
        self._downstreams = downstreams
        self._client = client
        self._task_group = task_group
        self._handshake = False
        self._ready = False
        self._calls: dict[str, _Call] = {}
        self._hooked: set[int] = set()  # the server pipes whose answers the relay looks at first
        self._writers: list[PipeWriter[Any]] = []  # the server pipes it writes to (a closed one is dropped)
        self._by_client: dict[Any, str] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._rearm = anyio.Event()
        self._ids = itertools.count(1)
        task_group.start_soon(self._expire, name="omega relay timeouts")

    # -- from the client ---------------------------------------------------------------------

    def from_client(self, message: dict[str, Any]) -> bool:
        """The client pipe's `take` hook: True when the relay took the message."""
        method = message.get("method")
        if method == "tools/call":
            if self._ready:
                return self._call(message)
            params = object_or_none(message.get("params"))
            return (
                not self._handshake
                and params is not None
                and enveloped(params, MODERN_PROTOCOL_VERSIONS)
                and self._call(message, True)
            )
        if method == "notifications/cancelled":
            return self._client_cancelled(message)
        if method == "initialize":
            self._handshake = True  # 2026-era clients never send it; they keep the SDK path
        elif method == "notifications/initialized":
            self._ready = self._handshake
        return False

    def _call(self, message: dict[str, Any], modern: bool = False) -> bool:
        client_id, params = message.get("id"), object_or_none(message.get("params"))
        if not isinstance(client_id, int | str) or isinstance(client_id, bool) or params is None:
            return False  # malformed: the SDK path answers with the proper error
        name, raw_arguments = params.get("name"), params.get("arguments")
        arguments = object_or_none(raw_arguments)
        if not isinstance(name, str) or (raw_arguments is not None and arguments is None):
            return False
        if self._accept is not None and not self._accept(name):
            return False
        route = self._toolbox.namespace().resolve(name)
        target = self._downstreams.connected(route.server_name) if route and route.server_name else None
        if route is None or target is None or client_id in self._by_client:
            return False
        if route.server_name is not None and self._downstreams.held(route.server_name, route.tool_name):
            return False  # a held tool (proxy/pins.py): the SDK path refuses it
        if "task" in params or route.tool_name in target[0].task_only:
            return False  # a task, or a tool that runs only as one: the SDK path's (proxy/tasks.py)
        session, timeout = target
        pipes = session.pipes_for(modern)
        lane = session.lane_for(modern) if pipes is None else None
        passed = modern and session.era == "modern"  # 2026 to 2026: everything passes as it is
        if (pipes is None and lane is None) or (modern and not passed and askable(params)):
            return False
        try:
            self._toolbox.check_arguments(route, arguments or {})
        except InvalidArgumentsError:
            return False  # the SDK path words the same error
        relay_id = f"{_PREFIX}{next(self._ids)}"
        forwarded = {**params, "name": route.tool_name}
        call = _Call(client_id, session.spec.server_name, route.tool_name, session, timeout, pipes, lane, modern=modern)
        call.passed, call.log_level = passed, log_level_of(params) if modern else None
        meta = object_or_none(params.get("_meta"))
        if modern and not passed and meta is not None:  # the envelope is for omega; the server speaks the handshake era
            meta = {k: v for k, v in meta.items() if not k.startswith(RESERVED_META)}
            forwarded["_meta"] = meta
        if meta is not None and "progressToken" in meta:
            call.client_token = meta["progressToken"]
            forwarded["_meta"] = {**meta, "progressToken": relay_id}  # our own id is a unique token downstream
        self._calls[relay_id] = call
        self._by_client[client_id] = relay_id
        request = {"jsonrpc": "2.0", "id": relay_id, "method": "tools/call", "params": forwarded}
        if lane is not None:
            self._watch(session, lane)
            version = meta.get(VERSION_KEY) if passed and meta is not None else None
            headers = lane.headers("tools/call", forwarded, version if isinstance(version, str) else None)
            call.scope = anyio.CancelScope()
            self._task_group.start_soon(self._post, relay_id, call, lane, encode_line(request), headers)
        else:
            assert pipes is not None  # one of the two, or the call was declined above
            self._send(relay_id, call, session, pipes, request)
        self._arm(relay_id, timeout)
        return True

    def _send(
        self,
        relay_id: str,
        call: _Call,
        session: DownstreamSession,
        pipes: tuple[PipeReader[Any], PipeWriter[Any]],
        request: dict[str, Any],
    ) -> None:
        self._hook(session, pipes)
        try:
            pipes[1].send_nowait(encode_line(request))
        except _GONE:
            decided = call.decide(WentAway(session.stopped_because()))
            if pipes is session.pipes and decided.lose is not None:
                session.lose(decided.lose)
            self._finish(relay_id, decided)

    def _arm(self, relay_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if not self._deadlines or deadline < self._deadlines[0][0]:
            self._rearm.set()
        heapq.heappush(self._deadlines, (deadline, relay_id))

    def _client_cancelled(self, message: dict[str, Any]) -> bool:
        params = object_or_none(message.get("params"))
        request_id = params.get("requestId") if params is not None else None
        relay_id = self._by_client.get(request_id) if isinstance(request_id, int | str) else None
        call = self._calls.pop(relay_id, None) if relay_id is not None else None
        if relay_id is None or call is None:
            return False
        del self._by_client[call.client_id]
        self._cancel_downstream(call, relay_id, "cancelled by the client")
        return True

    def downstream_congested(self) -> PipeWriter[Any] | None:
        """A server pipe with more than a bounded backlog (the client's calls wait for it), or None."""
        for writer in self._writers:
            if writer.congested:
                return writer
        return None

    def _client_congested(self) -> PipeWriter[Any] | None:
        return self._client if self._client.congested else None

    # -- from the servers --------------------------------------------------------------------

    def _hook(self, session: DownstreamSession, pipes: tuple[PipeReader[Any], PipeWriter[Any]]) -> None:
        """Install the answer hook on a server's pipe (once per link; restarts get new pipes)."""
        reader = pipes[0]
        if id(reader) in self._hooked:
            return

        def closed() -> None:
            self._fail_session(session)

        def from_server(message: dict[str, Any]) -> bool:
            return self._from_server(message, reader)

        self._hooked.add(id(reader))
        self._writers = [writer for writer in self._writers if not writer.closed]
        self._writers.append(pipes[1])
        reader.take = from_server
        reader.congested = self._client_congested
        session.on_close(closed)

    def _watch(self, session: DownstreamSession, lane: Lane) -> None:
        """Fail a lane's calls when its link closes (once per lane)."""
        if id(lane) not in self._hooked:
            self._hooked.add(id(lane))
            session.on_close(lambda: self._fail_session(session))

    async def _post(self, relay_id: str, call: _Call, lane: Lane, body: bytes, headers: list[tuple[str, str]]) -> None:
        """One relayed call to an HTTP server: its POST, and the messages of the answer as they come."""

        def deliver(message: dict[str, Any]) -> bool | None:
            if not self._from_server(message, lane):
                return None
            return message.get("id") == relay_id and "method" not in message

        assert call.scope is not None  # made with the call, so a cancel before this task starts holds
        with call.scope:
            try:
                if await lane.exchange(body, headers, deliver):
                    return
            except Refusal as refusal:  # as the SDK's transport: a JSON-RPC error
                self._finish(relay_id, call.decide({"jsonrpc": "2.0", "id": relay_id, "error": refusal.error}))
                return
            except TooLong:
                self._finish(relay_id, call.decide(Oversized()))
                return
            except (*_GONE, anyio.EndOfStream, OSError, TimeoutError, ValueError, h11.ProtocolError) as exc:
                # as forward_call: a transport failure, the connection is no longer trustworthy
                if relay_id in self._calls:
                    self._lost(relay_id, call, call.decide(Broke(f"{type(exc).__name__}: {exc}")))
                return
        if relay_id in self._calls:  # the stream ended with no answer: as the SDK path, the server went away
            self._lost(relay_id, call, call.decide(WentAway()))

    def _lost(self, relay_id: str, call: _Call, decided: Outcome) -> None:
        """Answer a call whose connection is no longer to be trusted, and mark its session lost."""
        if decided.lose is not None:
            call.session.lose(decided.lose)
        self._finish(relay_id, decided)

    def _from_server(self, message: dict[str, Any], reader: PipeReader[Any] | Lane) -> bool:
        request_id = message.get("id")
        if isinstance(request_id, str) and request_id.startswith(_PREFIX) and "method" not in message:
            call = self._calls.get(request_id)
            if call is None:
                return True  # the answer to a call that timed out or was cancelled
            self._finish(request_id, call.decide(message))  # as forward_call: the one outcome rule
            return True
        if message.get("method") == "notifications/message":
            return self._log(message, reader)
        if message.get("method") == "notifications/progress":
            params = object_or_none(message.get("params"))
            token = params.get("progressToken") if params is not None else None
            call = self._calls.get(token) if isinstance(token, str) else None
            if call is not None and params is not None:
                if call.client_token is not None:
                    update = {**params, "progressToken": call.client_token}
                    self._to_client({"jsonrpc": "2.0", "method": "notifications/progress", "params": update})
                return True
        return False

    def _log(self, message: dict[str, Any], reader: PipeReader[Any] | Lane) -> bool:
        """A server's log message while relayed calls run there: the client's, at the level it asked for."""
        params = as_object(message.get("params"))
        level = params.get("level")
        running = [c for c in self._calls.values() if c.source is reader]
        if not running or not isinstance(level, str):
            return False  # outside relayed calls: the SDK path routes it
        thresholds = [c.log_level if c.modern else self._log_level() for c in running]
        if any(allows(threshold, level) for threshold in thresholds):
            self._to_client({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
        return True

    def _fail_session(self, session: DownstreamSession) -> None:
        """A link of `session` closed: its calls in flight fail (those on a link still open carry on)."""
        for relay_id, call in list(self._calls.items()):
            if call.session is session and (
                session.closed.is_set()
                or (call.pipes is not None and session.pipes_for(call.modern) is not call.pipes)
                or (call.lane is not None and session.lane_for(call.modern) is not call.lane)
            ):
                why = session.stopped_because()
                if call.scope is not None:
                    call.scope.cancel()
                self._finish(relay_id, call.decide(WentAway(why)))

    # -- answers and timeouts ----------------------------------------------------------------

    def _finish(self, relay_id: str, decided: Outcome) -> None:
        """Answer the client's call as decided: with its result, or with the server's JSON-RPC error."""
        call = self._calls.pop(relay_id, None)
        if call is None:
            return
        self._by_client.pop(call.client_id, None)
        if decided.error is not None:
            self._to_client({"jsonrpc": "2.0", "id": call.client_id, "error": decided.error})
            return
        result = decided.result
        assert result is not None  # an outcome is a result or an error
        if call.modern:  # a server's own 2026 answer has both already; one omega wrote (a timeout) gets them
            result = self._envelope(result)
        self._to_client({"jsonrpc": "2.0", "id": call.client_id, "result": result})

    def _envelope(self, result: dict[str, Any]) -> dict[str, Any]:
        """What the SDK's runner adds to a 2026-era result: `resultType`, then the serverInfo stamp."""
        return modern_complete(result, json.loads(self._server_info))

    def _to_client(self, message: dict[str, Any]) -> None:
        try:
            self._client.send_nowait(encode_line(message))
        except _GONE:
            logger.debug("client gone; dropped %s", message.get("method") or "a result")

    def _cancel_downstream(self, call: _Call, relay_id: str, reason: str) -> None:
        """Tell the server a call is off: over a pipe or (handshake era) HTTP a cancel notification;
        over HTTP its POST's connection is closed as well, which is all the 2026 era's cancel is."""
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": relay_id, "reason": reason},
        }
        if call.scope is not None:
            call.scope.cancel()
        if call.lane is not None:
            if not call.lane.modern:
                self._task_group.start_soon(call.lane.notify, cancel, encode_line(cancel))
            return
        try:
            assert call.pipes is not None
            call.pipes[1].send_nowait(encode_line(cancel))
        except _GONE:
            pass

    async def _expire(self) -> None:
        """One timer for every relayed call: the earliest deadline first (finished calls are skipped)."""
        while True:
            now = time.monotonic()
            while self._deadlines and (self._deadlines[0][0] <= now or self._deadlines[0][1] not in self._calls):
                deadline, relay_id = heapq.heappop(self._deadlines)
                call = self._calls.get(relay_id)
                if call is not None and deadline <= now:
                    self._cancel_downstream(call, relay_id, f"timed out after {call.timeout:g} s")
                    self._finish(relay_id, call.decide(TimedOut(call.timeout)))
            if len(self._deadlines) > 4 * len(self._calls) + 1024:  # finished calls pile up: prune
                self._deadlines = [d for d in self._deadlines if d[1] in self._calls]
                heapq.heapify(self._deadlines)
            wait = self._deadlines[0][0] - now if self._deadlines else math.inf
            self._rearm = anyio.Event()
            with anyio.move_on_after(wait):
                await self._rearm.wait()
