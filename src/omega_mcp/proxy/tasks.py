"""Tasks (the 2025-11-25 era's, SEP-1686) through the aggregator: who owns which task, and how a tool
that runs only as a task serves a client that never sends one.

A task-augmented `tools/call` reaches the server that owns the tool as it is; the `CreateTaskResult`
comes back with a task id omega mints (`TaskTable`), which maps to that server's connection and its
own id, and belongs to the client session that created it: `tasks/get`, `tasks/result`,
`tasks/cancel` and `tasks/list` of one client never see another's tasks (an id it does not own is
"not found", as an unknown one). A task lives on the connection that created it (for a `share =
"session"` server, the client session's own): once that connection has closed, the task has ended
with it (`ended_task`, `ended_result`), in the status the client last saw when that was terminal,
else `failed`, saying why. A plain call of a task-only tool (`taskSupport: "required"`) is run
as a task on the client's behalf (`run_as_task`): created, then its result awaited with
`tasks/result`, bounded by the server's `timeout`; cancelled downstream when the wait ends first.
The 2026-07-28 era has no tasks in its core (they continue as an extension omega does not speak).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
from mcp import types
from mcp.shared.exceptions import MCPError

from omega_mcp.narrow import object_or_none

__all__ = [
    "RELATED_TASK",
    "TASK_METHODS",
    "TASK_VERSIONS",
    "TERMINAL",
    "Held",
    "TaskTable",
    "ended_result",
    "ended_task",
    "run_as_task",
    "runs_as_task",
    "task_id_of",
    "task_only",
    "task_support",
    "with_task_id",
]

logger = logging.getLogger(__name__)

RELATED_TASK = "io.modelcontextprotocol/related-task"
"""The `_meta` key naming the task a message belongs to."""
TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
TASK_VERSIONS = frozenset({"2025-11-25"})
"""The protocol versions whose core defines tasks."""
TERMINAL = frozenset({"completed", "failed", "cancelled"})
"""The statuses a task never leaves."""

_CANCEL_SECONDS = 5.0
_TTL_MARGIN_MS = 60_000
"""How much longer than omega waits a task it runs for a plain call is asked to be kept."""
_PER_OWNER = 1000
"""The most tasks one client session keeps mapped; its oldest is forgotten past this."""

Support = Literal["forbidden", "optional", "required"]
Send = Callable[[str, Mapping[str, Any], float], Awaitable[dict[str, Any]]]
"""`send(method, params, timeout_seconds)`: one request to the server, its raw result (raises MCPError)."""


def task_support(tool: types.Tool | None) -> Support:
    """A tool's `execution.taskSupport` ("forbidden" when absent)."""
    execution = tool.execution if tool is not None else None
    support = execution.task_support if execution is not None else None
    return support or "forbidden"


def runs_as_task(capabilities: types.ServerCapabilities, tool: types.Tool | None) -> bool:
    """Whether a task-augmented call of `tool` may go to its server: the tool allows tasks and the
    server declares task-augmented `tools/call` (the spec asks for both)."""
    tasks = capabilities.tasks
    requests = tasks.requests if tasks is not None else None
    tools = requests.tools if requests is not None else None
    return task_support(tool) != "forbidden" and tools is not None and tools.call is not None


def task_only(tools: tuple[types.Tool, ...] | list[types.Tool]) -> frozenset[str]:
    """The names of the tools among `tools` that run only as tasks."""
    return frozenset(t.name for t in tools if task_support(t) == "required")


def task_id_of(raw: Mapping[str, Any]) -> str | None:
    """The task id of a `CreateTaskResult`, or None when `raw` is none."""
    task = object_or_none(raw.get("task"))
    task_id = task.get("taskId") if task is not None else None
    return task_id if isinstance(task_id, str) else None


def with_task_id(raw: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    """`raw` with the task id it names replaced by `task_id`: a `CreateTaskResult`'s `task`, a task
    (`tasks/get`, `tasks/cancel`, a status notification) and the related-task `_meta` of a payload."""
    out = dict(raw)
    task = object_or_none(out.get("task"))
    if task is not None:
        out["task"] = {**task, "taskId": task_id}
    elif "taskId" in out:
        out["taskId"] = task_id
    meta = object_or_none(out.get("_meta"))
    related = object_or_none(meta.get(RELATED_TASK)) if meta is not None else None
    if meta is not None and related is not None:
        out["_meta"] = {**meta, RELATED_TASK: {**related, "taskId": task_id}}
    return out


def _without_related(raw: dict[str, Any]) -> dict[str, Any]:
    """A task's payload for a client that made no task: without the `_meta` naming it."""
    meta = object_or_none(raw.get("_meta"))
    if meta is None or RELATED_TASK not in meta:
        return raw
    rest = {k: v for k, v in meta.items() if k != RELATED_TASK}
    out = {k: v for k, v in raw.items() if k != "_meta"}
    if rest:
        out["_meta"] = rest
    return out


async def run_as_task(send: Send, params: Mapping[str, Any], timeout_seconds: float) -> dict[str, Any]:
    """A plain `tools/call` of a task-only tool, run as a task: its result as a direct call's would be.

    The task is created, then its result awaited (`tasks/result`), both within `timeout_seconds`;
    when the wait ends first (the timeout, or the caller cancelled) the task is cancelled downstream
    (best effort, bounded).

    Raises:
        MCPError: the server's error, `REQUEST_TIMEOUT`, a closed connection, or an answer that
            is no task.
    """
    started = time.monotonic()
    ttl = int(timeout_seconds * 1000) + _TTL_MARGIN_MS
    created = await send("tools/call", {**params, "task": {"ttl": ttl}}, timeout_seconds)
    task_id = task_id_of(created)
    if task_id is None:
        raise MCPError(types.INTERNAL_ERROR, "the server answered a task-augmented call without a task")
    left = max(timeout_seconds - (time.monotonic() - started), 0.001)
    try:
        result = await send("tasks/result", {"taskId": task_id}, left)
    except MCPError as exc:
        if exc.code == types.REQUEST_TIMEOUT:
            await _cancel(send, task_id)
        raise
    except anyio.get_cancelled_exc_class():
        await _cancel(send, task_id)
        raise
    return _without_related(result)


async def _cancel(send: Send, task_id: str) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_SECONDS):
        try:
            await send("tasks/cancel", {"taskId": task_id}, _CANCEL_SECONDS)
        except Exception as exc:  # boundary: already finished, or the server is gone: nothing left to stop
            logger.debug("task %s not cancelled: %s", task_id, exc)


@dataclass(frozen=True, slots=True)
class Held:
    """One task omega handed out: its owner, the server and connection that run it, their id for it."""

    owner: object
    server_name: str
    connection: object
    """The downstream session the task was created on (a task does not outlive its connection)."""
    remote_id: str
    created: Mapping[str, Any] | None = None
    """The task as the server created it (its `createdAt`, `ttl`, `pollInterval`)."""


class TaskTable:
    """The tasks handed out through omega, by the id omega minted, each owned by one client session."""

    def __init__(self, per_owner: int = _PER_OWNER) -> None:
        self._held: dict[str, Held] = {}
        self._status: dict[str, str] = {}
        self._per_owner = per_owner

    def add(
        self,
        owner: object,
        server_name: str,
        connection: object,
        remote_id: str,
        created: Mapping[str, Any] | None = None,
    ) -> str:
        """Map a new task; returns the id its owner knows it by."""
        mine = self.owned(owner)
        for task_id, _ in mine[: max(len(mine) - self._per_owner + 1, 0)]:
            self.forget(task_id)
        task_id = secrets.token_urlsafe(18)
        self._held[task_id] = Held(owner, server_name, connection, remote_id, created)
        status = created.get("status") if created is not None else None
        if isinstance(status, str):
            self._status[task_id] = status
        return task_id

    def seen(self, task_id: str, status: object) -> None:
        """The client was told `status` for its task (a terminal one is kept once seen)."""
        if isinstance(status, str) and task_id in self._held and self._status.get(task_id) not in TERMINAL:
            self._status[task_id] = status

    def status(self, task_id: str) -> str | None:
        """The status the client was last told for its task."""
        return self._status.get(task_id)

    def on_connection(self, connection: object) -> list[tuple[str, Held]]:
        """The tasks that run on `connection`."""
        return [(k, h) for k, h in self._held.items() if h.connection is connection]

    def find(self, owner: object, task_id: object) -> Held | None:
        """The task `owner` knows as `task_id`; None for an unknown id and for another client's task."""
        held = self._held.get(task_id) if isinstance(task_id, str) else None
        return held if held is not None and held.owner is owner else None

    def local_id(self, server_name: str, remote_id: str) -> list[tuple[str, Held]]:
        """The ids omega handed out for a server's own task id, with their entries (its ids may repeat
        across its restarts: the caller keeps the one on the live connection)."""
        return [(k, h) for k, h in self._held.items() if h.server_name == server_name and h.remote_id == remote_id]

    def owned(self, owner: object) -> list[tuple[str, Held]]:
        """`owner`'s tasks, oldest first."""
        return [(k, h) for k, h in self._held.items() if h.owner is owner]

    def forget(self, task_id: str) -> None:
        self._held.pop(task_id, None)
        self._status.pop(task_id, None)

    def forget_owner(self, owner: object) -> None:
        """Drop every task of a client session that ended (they run on; only omega's mapping goes)."""
        for task_id, _ in self.owned(owner):
            self.forget(task_id)

    def __len__(self) -> int:
        return len(self._held)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ended_message(held: Held, why: str) -> str:
    """Why a task whose connection closed (`why`: the connection's `close_reason`) is over."""
    return (
        f"server {held.server_name} stopped before this task was done ({why}); "
        "the task ended with it, and its result is gone"
    )


def ended_task(task_id: str, held: Held, last_status: str | None, why: str) -> dict[str, Any]:
    """The task, as `tasks/get` and `tasks/list` give it, once its connection has closed: in the terminal
    status its client last saw, else `failed` with `ended_message` as its `statusMessage`."""
    created = dict(held.created or {})
    task: dict[str, Any] = {
        "createdAt": created.get("createdAt", _now()),
        "ttl": created.get("ttl"),
        **{k: v for k, v in created.items() if k == "pollInterval"},
        "taskId": task_id,
        "lastUpdatedAt": _now(),
    }
    if last_status in TERMINAL and last_status != "failed":  # a failed one says why it is over now
        return {**task, "status": last_status}
    return {**task, "status": "failed", "statusMessage": _ended_message(held, why)}


def ended_result(task_id: str, held: Held, why: str) -> dict[str, Any]:
    """`tasks/result` of a task whose connection has closed: an isError result saying so."""
    text = _ended_message(held, why)
    return {"content": [{"type": "text", "text": text}], "isError": True, "_meta": {RELATED_TASK: {"taskId": task_id}}}
