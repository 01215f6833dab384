"""The hub's side of tasks (2025-11-25): task-augmented `tools/call` and the `tasks/*` methods.

One server middleware (`TaskHandlers.middleware`, ahead of the `tools/call` fast path) takes a
`tools/call` that carries `task` and the four task methods from a client that negotiated a version
whose core defines tasks; everything else, and every other era, goes on down the chain as before
(the SDK answers `tasks/*` there with "Method not found"). A task is created on the server that owns
the tool and handed to the client under an id omega mints (`proxy/tasks.py`'s `TaskTable`), owned by
the client's connection: its `tasks/*` requests reach that server with the server's own id, and what
comes back carries omega's. What a server asks while a client waits on `tasks/result` (an
elicitation for an `input_required` task) goes to that client, as during a call. A server's
`notifications/tasks/status` reach the task's owner (`relay_status`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from mcp import types
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from omega_mcp._sdk import connection_of
from omega_mcp.calling import Caller
from omega_mcp.errors import InvalidArgumentsError, UnknownToolError
from omega_mcp.narrow import object_or_none
from omega_mcp.proxy.modern import RESERVED_META
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.proxy.tasks import TASK_METHODS, TASK_VERSIONS, Held, TaskTable, runs_as_task, task_id_of, with_task_id
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


class TaskHandlers:
    """Task-augmented calls and the task methods of the hub's clients, routed to the servers that own them."""

    def __init__(self, toolbox: Toolbox, downstreams: Downstreams, caller_of: CallerOf, client_of: ClientOf) -> None:
        self._toolbox = toolbox
        self._downstreams = downstreams
        self._caller_of = caller_of
        self._client_of = client_of
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
        return await self._handle(method, connection_of(session), params or {}, caller, self._client_of(ctx))

    async def _handle(
        self, method: str, owner: Connection, args: Mapping[str, Any], caller: Caller, profile: ClientProfile | None
    ) -> dict[str, Any]:
        if method == "tools/call":
            return await self._create(owner, args, caller, profile)
        if method == "tasks/list":
            return await self._list(owner, args, caller)
        held = self.table.find(owner, args.get("taskId"))
        target = self._live(held)
        if held is None or target is None:
            raise MCPError(types.INVALID_PARAMS, _NOT_FOUND)
        try:
            with self._downstreams.client_requests.calling(held.server_name, caller):
                timeout = target.spec.timeout_seconds
                raw = await target.request(method, {"taskId": held.remote_id}, timeout_seconds=timeout, caller=caller)
        except MCPError as exc:
            if method == "tasks/result" and exc.code == types.REQUEST_TIMEOUT:
                seconds = target.spec.timeout_seconds
                raise MCPError(
                    types.REQUEST_TIMEOUT,
                    f"server {held.server_name} gave no result within {seconds:g} s; the task goes on "
                    "(tasks/get shows its status)",
                ) from None
            raise
        return with_task_id(raw, str(args["taskId"]))

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

    def _live(self, held: Held | None) -> DownstreamSession | None:
        """The connection a task runs on while it is still the server's current one."""
        if held is None:
            return None
        connected = self._downstreams.connected(held.server_name)
        session = connected[0] if connected is not None else None
        if session is None or session is not held.connection or session.closed.is_set():
            return None
        return session

    # -- tools/call with `task` --------------------------------------------------------------

    async def _create(
        self, owner: Connection, params: Mapping[str, Any], caller: Caller, profile: ClientProfile | None
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
        with self._downstreams.client_requests.calling(session.spec.server_name, caller):
            timeout = session.spec.timeout_seconds
            raw = await session.request("tools/call", sent, timeout_seconds=timeout, caller=caller)
        remote_id = task_id_of(raw)
        if remote_id is None:
            raise MCPError(
                types.INTERNAL_ERROR, f"server {session.spec.server_name} answered a task-augmented call without a task"
            )
        self._watch(owner)
        return with_task_id(raw, self.table.add(owner, session.spec.server_name, session, remote_id))

    async def _target(
        self, name: str, arguments: dict[str, Any], caller: Caller, profile: ClientProfile | None
    ) -> tuple[DownstreamSession, str]:
        """The live session and tool name a task-augmented call of `name` goes to.

        Raises:
            MCPError: an unknown name, a tool that does not run as a task (METHOD_NOT_FOUND, as the
                spec has a server answer), invalid arguments, or its server is down.
        """
        downstreams = self._downstreams
        if self._toolbox.namespace().resolve(name) is None and (starting := downstreams.starting(name)):
            await downstreams.wait_settled(starting)
        try:
            route = self._toolbox.resolve(name)
            if profile is not None and not profile.permits(route):
                raise UnknownToolError(name)
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
        if session.spec.share == "session":
            raise MCPError(types.METHOD_NOT_FOUND, f'tool {name} runs in a share = "session" server: no tasks for it')
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
                self.table.forget(task_id)
                continue
            try:
                timeout = target.spec.timeout_seconds
                raw = await target.request(
                    "tasks/get", {"taskId": held.remote_id}, timeout_seconds=timeout, caller=caller
                )
            except MCPError as exc:
                if exc.code == types.INVALID_PARAMS:  # expired on the server
                    self.table.forget(task_id)
                continue
            tasks.append(with_task_id(raw, task_id))
        result: dict[str, Any] = {"tasks": tasks}
        if start + _PAGE < len(owned):
            result["nextCursor"] = str(start + _PAGE)
        return result

    # -- notifications/tasks/status -----------------------------------------------------------

    def label(self, server_name: str, remote_id: str) -> str | None:
        """The id the client knows a server's live task by (for what the server asks on its behalf)."""
        return next((k for k, h in self.table.local_id(server_name, remote_id) if self._live(h) is not None), None)

    async def relay_status(self, server_name: str, params: Mapping[str, Any]) -> None:
        """A server's status notification for one of its tasks, to the client that owns it (bounded)."""
        remote_id = params.get("taskId")
        if not isinstance(remote_id, str):
            return
        for task_id, held in self.table.local_id(server_name, remote_id):
            owner = held.owner
            if self._live(held) is None or not isinstance(owner, Connection):
                continue
            with anyio.move_on_after(_NOTIFY_SECONDS):
                try:
                    await owner.notify("notifications/tasks/status", with_task_id(params, task_id))
                except Exception as exc:  # boundary: a gone client is no failure of the server's
                    logger.debug("notifications/tasks/status not delivered: %s", exc)
