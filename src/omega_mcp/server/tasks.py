"""The hub's side of tasks (2025-11-25): task-augmented `tools/call` and the `tasks/*` methods.

One server middleware (`TaskHandlers.middleware`, ahead of the `tools/call` fast path) takes a
`tools/call` that carries `task` and the four task methods from a client that negotiated a version
whose core defines tasks; everything else, and every other era, goes on down the chain as before
(the SDK answers `tasks/*` there with "Method not found"). A task is created on the server that owns
the tool and handed to the client under an id omega mints (`proxy/tasks.py`'s `TaskTable`), owned by
the client's connection: its `tasks/*` requests reach that server with the server's own id, and what
comes back carries omega's. What a server asks while a client waits on `tasks/result` (an
elicitation for an `input_required` task) goes to that client, as during a call. A server's
`notifications/tasks/status` reach the task's owner (`relay_status`). A `share = "session"` server's
task runs on the creating client session's own connection (`proxy/pool.py`), as that session's plain
calls do, and its requests keep that connection from going idle. Once the connection a task runs on
has closed (omega stopped it: idle, session end, reload; or the server went away) the task is over:
`tasks/get` and `tasks/list` show it `failed` with the reason (unless its client already saw it end),
`tasks/result` is an isError result saying so, `tasks/cancel` is refused as for any ended task, and
its owner is sent that `failed` status when omega stopped a session's connection (`connection_ended`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import anyio
from mcp import types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from omega_mcp._sdk import connection_of
from omega_mcp.calling import Caller, SessionDirs
from omega_mcp.errors import DownstreamError, InvalidArgumentsError, UnknownToolError
from omega_mcp.narrow import object_or_none
from omega_mcp.proxy.modern import RESERVED_META
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.proxy.tasks import (
    TASK_METHODS,
    TASK_VERSIONS,
    TERMINAL,
    Held,
    TaskTable,
    ended_result,
    ended_task,
    runs_as_task,
    task_id_of,
    with_task_id,
)
from omega_mcp.server.profiles import ClientProfile
from omega_mcp.toolbox import Toolbox

__all__ = ["TASKS_CAPABILITY", "TaskHandlers"]

logger = logging.getLogger(__name__)

TASKS_CAPABILITY = types.ServerTasksCapability(
    list=types.TasksListCapability(),
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())),
)
"""What omega declares to a client of a tasks era: task-augmented `tools/call`, `tasks/list`, `tasks/cancel`."""

_PAGE = 100
_NOTIFY_SECONDS = 2.0
_NOT_FOUND = "Task not found"

CallerOf = Callable[[ServerSession, types.RequestId | None], Caller]
ClientOf = Callable[[Any], ClientProfile | None]
"""`client_of(ctx)`: the hub client a request comes from (`OmegaServer.client_of`)."""
SessionOf = Callable[[Any, ClientProfile | None], tuple[Hashable | None, SessionDirs | None]]
"""`session_of(ctx, profile)`: whose `share = "session"` connections a request uses, and where their
directories go (`OmegaServer.session_of`; None: the shared connection)."""


def _no_session(ctx: Any, profile: ClientProfile | None) -> tuple[Hashable | None, SessionDirs | None]:
    return None, None


class TaskHandlers:
    """Task-augmented calls and the task methods of the hub's clients, routed to the servers that own them."""

    def __init__(
        self,
        toolbox: Toolbox,
        downstreams: Downstreams,
        caller_of: CallerOf,
        client_of: ClientOf,
        session_of: SessionOf = _no_session,
    ) -> None:
        self._toolbox = toolbox
        self._downstreams = downstreams
        self._caller_of = caller_of
        self._client_of = client_of
        self._session_of = session_of
        self.table = TaskTable()
        self._watched: weakref.WeakSet[Connection] = weakref.WeakSet()

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method, params = ctx.method, ctx.params
        if method == "initialize":
            return self._declared(await call_next(ctx))
        if method not in TASK_METHODS and not (
            method == "tools/call" and isinstance(params, Mapping) and "task" in params
        ):
            return await call_next(ctx)
        session = ctx.session
        if ctx.protocol_version not in TASK_VERSIONS or session.client_params is None:
            return await call_next(ctx)  # an era without tasks, or not initialized: as before
        caller = self._caller_of(session, ctx.request_id)  # what the server asks meanwhile goes to it
        owner, args, profile = connection_of(session), params or {}, self._client_of(ctx)
        if method == "tools/call":
            return await self._create(owner, args, caller, profile, self._session_of(ctx, profile))
        if method == "tasks/list":
            return await self._list(owner, args, caller)
        return await self._ask(method, owner, args, caller)

    async def _ask(self, method: str, owner: Connection, args: Mapping[str, Any], caller: Caller) -> dict[str, Any]:
        """`tasks/get`, `tasks/result` or `tasks/cancel` of one of `owner`'s tasks, on its connection."""
        held = self.table.find(owner, args.get("taskId"))
        if held is None:
            raise MCPError(types.INVALID_PARAMS, _NOT_FOUND)
        task_id = str(args["taskId"])
        target = self._live(held)
        if target is None:
            return self._ended(method, task_id, held)
        try:
            with (
                self._downstreams.client_requests.calling(held.server_name, caller),
                self._downstreams.pool.in_use(target),
            ):
                timeout = target.spec.timeout_seconds
                raw = await target.request(method, {"taskId": held.remote_id}, timeout_seconds=timeout, caller=caller)
        except MCPError as exc:
            if target.closed.is_set():  # the connection closed under the request: the task is over
                return self._ended(method, task_id, held)
            if method == "tasks/result" and exc.code == types.REQUEST_TIMEOUT:
                seconds = target.spec.timeout_seconds
                raise MCPError(
                    types.REQUEST_TIMEOUT,
                    f"server {held.server_name} gave no result within {seconds:g} s; the task goes on "
                    "(tasks/get shows its status)",
                ) from None
            raise
        answer = with_task_id(raw, task_id)
        if method == "tasks/result":  # the task has ended: no later status may say otherwise
            self.table.seen(task_id, "failed" if answer.get("isError") else "completed")
        else:
            self.table.seen(task_id, answer.get("status"))
        return answer

    def _ended(self, method: str, task_id: str, held: Held) -> dict[str, Any]:
        """What `method` answers for a task whose connection has closed (see the module docstring)."""
        why = self._why(held)
        if method == "tasks/result":
            return ended_result(task_id, held, why)
        task = ended_task(task_id, held, self.table.status(task_id), why)
        if method == "tasks/cancel":
            raise MCPError(types.INVALID_PARAMS, f"Cannot cancel task: it has already ended ({task['status']})")
        self.table.seen(task_id, task["status"])
        return task

    @staticmethod
    def _why(held: Held) -> str:
        connection = held.connection
        reason = connection.close_reason if isinstance(connection, DownstreamSession) else None
        return reason or "the connection closed"

    @staticmethod
    def _declared(result: HandlerResult) -> HandlerResult:
        """The `initialize` answer without `tasks` for a version that defines none (the SDK sends every
        capability it is given to every handshake version)."""
        if not isinstance(result, Mapping) or result.get("protocolVersion") in TASK_VERSIONS:
            return result
        capabilities = object_or_none(result.get("capabilities"))
        if capabilities is None or "tasks" not in capabilities:
            return result
        return {**result, "capabilities": {k: v for k, v in capabilities.items() if k != "tasks"}}

    @staticmethod
    def _live(held: Held | None) -> DownstreamSession | None:
        """The connection a task runs on while it is open (the server's shared one, or a session's own)."""
        session = held.connection if held is not None else None
        if not isinstance(session, DownstreamSession) or session.closed.is_set():
            return None
        return session

    # -- tools/call with `task` --------------------------------------------------------------

    async def _create(
        self,
        owner: Connection,
        params: Mapping[str, Any],
        caller: Caller,
        profile: ClientProfile | None,
        own: tuple[Hashable | None, SessionDirs | None],
    ) -> dict[str, Any]:
        name, raw_arguments, task = params.get("name"), params.get("arguments"), params.get("task")
        arguments = object_or_none(raw_arguments) if raw_arguments is not None else {}
        if not isinstance(name, str) or arguments is None or object_or_none(task) is None:
            raise MCPError(types.INVALID_PARAMS, "Invalid request parameters")
        session, tool_name = await self._target(name, dict(arguments), caller, profile)
        sent: dict[str, Any] = {"name": tool_name, "arguments": arguments, "task": task}
        meta = object_or_none(params.get("_meta"))
        forwarded = {k: v for k, v in (meta or {}).items() if k != "progressToken" and not k.startswith(RESERVED_META)}
        if forwarded:
            sent["_meta"] = forwarded
        server_name = session.spec.server_name
        key, dirs = own
        if session.spec.share != "session" or key is None:  # stdio: one client, the shared connection is its own
            return await self._send_create(owner, session, sent, caller)
        spec = self._downstreams.specs().get(server_name, session.spec)
        try:
            async with self._downstreams.pool.connection(spec, key, dirs) as mine:
                return await self._send_create(owner, mine, sent, caller)
        except DownstreamError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None

    async def _send_create(
        self, owner: Connection, session: DownstreamSession, sent: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        server_name = session.spec.server_name
        with self._downstreams.client_requests.calling(server_name, caller):
            timeout = session.spec.timeout_seconds
            raw = await session.request("tools/call", sent, timeout_seconds=timeout, caller=caller)
        remote_id = task_id_of(raw)
        if remote_id is None:
            raise MCPError(types.INTERNAL_ERROR, f"server {server_name} answered a task-augmented call without a task")
        self._watch(owner)
        created = object_or_none(raw.get("task"))
        return with_task_id(raw, self.table.add(owner, server_name, session, remote_id, created))

    async def _target(
        self, name: str, arguments: dict[str, Any], caller: Caller, profile: ClientProfile | None
    ) -> tuple[DownstreamSession, str]:
        """The server's live (shared) session and the tool name a task-augmented call of `name` goes to (a
        `share = "session"` server's task then goes to the client session's own connection: `_create`).

        Raises:
            MCPError: an unknown name, a tool that does not run as a task (METHOD_NOT_FOUND, as the
                spec has a server answer), invalid arguments, or its server is down.
        """
        downstreams = self._downstreams
        if self._toolbox.namespace().resolve(name) is None and (starting := downstreams.starting(name)):
            await downstreams.wait_settled(starting)
        try:
            route = self._toolbox.resolve(name, profile)  # what it may not call is unknown to it, down or not
            server_name = route.server_name
            if server_name is None:
                raise MCPError(types.METHOD_NOT_FOUND, f"tool {name} does not support task-augmented execution")
            self._toolbox.check_arguments(route, arguments)
        except (UnknownToolError, InvalidArgumentsError) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        except MCPError:
            raise
        except Exception as exc:  # DownstreamError: the server is down or disabled
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        connected = downstreams.connected(server_name)
        if connected is None:
            raise MCPError(types.INTERNAL_ERROR, downstreams.down_message(server_name))
        session = connected[0]
        if downstreams.held(server_name, route.tool_name):
            raise MCPError(types.INTERNAL_ERROR, f"tool {name} cannot run: its definition changed since first seen")
        if not runs_as_task(
            await session.capabilities_for_caller(caller), downstreams.get_tool(server_name, route.tool_name)
        ):
            raise MCPError(types.METHOD_NOT_FOUND, f"tool {name} does not support task-augmented execution")
        return session, route.tool_name

    def _watch(self, owner: Connection) -> None:
        """Forget a connection's tasks when it closes (they run on downstream until their ttl)."""
        if owner not in self._watched:
            self._watched.add(owner)

            async def forget() -> None:
                self.table.forget_owner(owner)

            owner.exit_stack.push_async_callback(forget)

    # -- tasks/list --------------------------------------------------------------------------

    async def _list(self, owner: Connection, params: Mapping[str, Any], caller: Caller) -> dict[str, Any]:
        """The client's own tasks, each as its server has it now (a gone or expired one is dropped)."""
        cursor = params.get("cursor")
        start = 0
        if cursor is not None:
            if not isinstance(cursor, str) or not cursor.isdigit():
                raise MCPError(types.INVALID_PARAMS, "Invalid cursor")
            start = int(cursor)
        owned = self.table.owned(owner)
        tasks: list[dict[str, Any]] = []
        for task_id, held in owned[start : start + _PAGE]:
            target = self._live(held)
            if target is None:
                tasks.append(self._ended("tasks/get", task_id, held))
                continue
            try:
                timeout = target.spec.timeout_seconds
                with self._downstreams.pool.in_use(target):
                    raw = await target.request(
                        "tasks/get", {"taskId": held.remote_id}, timeout_seconds=timeout, caller=caller
                    )
            except MCPError as exc:
                if target.closed.is_set():
                    tasks.append(self._ended("tasks/get", task_id, held))
                elif exc.code == types.INVALID_PARAMS:  # expired on the server
                    self.table.forget(task_id)
                continue
            task = with_task_id(raw, task_id)
            self.table.seen(task_id, task.get("status"))
            tasks.append(task)
        result: dict[str, Any] = {"tasks": tasks}
        if start + _PAGE < len(owned):
            result["nextCursor"] = str(start + _PAGE)
        return result

    # -- notifications/tasks/status -----------------------------------------------------------

    def _running_on(self, server_name: str, remote_id: str, connection: object) -> list[tuple[str, Held]]:
        """omega's ids for a server's task on `connection` while it is open (a server's ids may repeat
        across its restarts, and across the processes of a `share = "session"` server)."""
        found = self.table.local_id(server_name, remote_id)
        return [(k, h) for k, h in found if h.connection is connection and self._live(h) is not None]

    def label(self, server_name: str, remote_id: str, connection: object) -> str | None:
        """The id the client knows a server's live task by (for what the server asks on its behalf)."""
        return next((k for k, _ in self._running_on(server_name, remote_id, connection)), None)

    async def relay_status(self, server_name: str, params: Mapping[str, Any], connection: object) -> None:
        """A server's status notification for one of its tasks, to the client that owns it (bounded)."""
        remote_id = params.get("taskId")
        if not isinstance(remote_id, str):
            return
        for task_id, held in self._running_on(server_name, remote_id, connection):
            self.table.seen(task_id, params.get("status"))
            await self._notify(held, with_task_id(params, task_id))

    async def connection_ended(self, server_name: str, connection: DownstreamSession) -> None:
        """A session's own connection has closed: each of its tasks its owner did not see end is now
        `failed` (why), and its owner is told so."""
        for task_id, held in self.table.on_connection(connection):
            if self.table.status(task_id) in TERMINAL:
                continue
            task = self._ended("tasks/get", task_id, held)
            await self._notify(held, task)

    async def _notify(self, held: Held, params: Mapping[str, Any]) -> None:
        owner = held.owner
        if not isinstance(owner, Connection):
            return
        with anyio.move_on_after(_NOTIFY_SECONDS):
            try:
                await owner.notify("notifications/tasks/status", dict(params))
            except Exception as exc:  # boundary: a gone client is no failure of the server's
                logger.debug("notifications/tasks/status not delivered: %s", exc)
