"""Tasks of a `share = "session"` server (proxy/pool.py, server/tasks.py): a task-augmented call runs on
the calling session's own connection of the server, as its plain calls do, and belongs to that session;
when omega stops that connection (idle, the session ended) or it dies, its tasks end `failed` saying
why: `tasks/get`, `tasks/list`, `tasks/result` (a waiting one too), `tasks/cancel` and a status
notification, never a hang. In process with the fixture server over stdio (one process per session;
the session is the client's connection, as on the HTTP hub), and through a real HTTP hub with the
fixture and with the real `server-everything`."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import types
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from hub_support import hub_client, start_hub
from omega_mcp._sdk import connection_of
from omega_mcp.calling import SessionDirs
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.supervisor import Downstreams, DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.profiles import ClientProfile
from omega_mcp.server.server import OmegaServer, build_server
from omega_mcp.toolbox import Toolbox
from proxy_support import FIXTURES, client
from task_support import RELATED, everything, raw, task_call, text
from waits import deadline, until

TASK_SERVER = FIXTURES / "task_server.py"


def _per_session(ctx: Any, profile: ClientProfile | None) -> tuple[Hashable | None, SessionDirs | None]:
    """Each client connection is a session of its own, as each HTTP session is on the hub."""
    return connection_of(ctx.session), None


@asynccontextmanager
async def _session_hub(
    policy: SandboxPolicy, *, idle_seconds: float | None = None
) -> AsyncIterator[tuple[Downstreams, OmegaServer]]:
    stdio = StdioServerParameters(command=sys.executable, args=[str(TASK_SERVER)])
    # Handshake era: a 2026-era link would be a process of its own beside the tasks era's (`_own_tasks`).
    downstreams = Downstreams([DownstreamSpec("t", stdio, share="session", era="handshake")], backoff_seconds=60)
    if idle_seconds is not None:
        downstreams.pool.idle_seconds = idle_seconds
    async with downstreams, Toolbox(policy, downstreams) as toolbox:
        omega = build_server(toolbox, catalog=downstreams)
        assert omega.tasks is not None
        omega.tasks._session_of = _per_session  # pyright: ignore[reportPrivateUsage]
        await downstreams.wait_ready()
        yield downstreams, omega


class _Statuses(ClientExtension):
    """The SDK client's hook for `notifications/tasks/status` (its core types no task notification)."""

    identifier = "com.example/task-statuses"

    def __init__(self) -> None:
        self.seen: list[types.TaskStatusNotificationParams] = []
        self.changed = anyio.Event()

    async def _on_status(self, params: types.TaskStatusNotificationParams) -> None:
        self.seen.append(params)
        self.changed.set()

    def notifications(self) -> list[NotificationBinding[Any]]:
        binding = NotificationBinding(
            method="notifications/tasks/status", params_type=types.TaskStatusNotificationParams, handler=self._on_status
        )
        return [binding]


async def _own_tasks(session: DownstreamSession) -> list[str]:
    """The statuses of the tasks a connection's own process has (not through omega)."""
    return [t["status"] for t in (await session.request("tasks/list", {}, timeout_seconds=10))["tasks"]]


async def test_each_sessions_tasks_run_on_its_own_connection_and_are_its_own(rwx_policy: SandboxPolicy):
    async with _session_hub(rwx_policy) as (downstreams, omega):
        statuses = _Statuses()
        async with client(omega, extensions=[statuses]) as alice, client(omega) as bob:
            held = (await task_call(alice, "mcp__t__research", {"topic": "x", "hold": True}))["taskId"]
            done = (await task_call(bob, "mcp__t__research", {"topic": "tides"}))["taskId"]
            running = downstreams.pool.running("t")
            assert len(running) == 2  # one process each: alice's and bob's
            assert sorted([await _own_tasks(s) for _, s in running]) == [["completed"], ["working"]]
            listing = downstreams.connected("t")
            assert listing is not None and await _own_tasks(listing[0]) == []  # nothing on the shared one

            assert [t["taskId"] for t in (await raw(alice, "tasks/list", {}))["tasks"]] == [held]
            assert [t["taskId"] for t in (await raw(bob, "tasks/list", {}))["tasks"]] == [done]
            for method in ("tasks/get", "tasks/cancel", "tasks/result"):
                with pytest.raises(MCPError) as refused:
                    await raw(bob, method, {"taskId": held})
                assert refused.value.code == types.INVALID_PARAMS and refused.value.message == "Task not found"
            result = await raw(bob, "tasks/result", {"taskId": done})
            assert text(result) == "report on tides" and result["_meta"][RELATED] == {"taskId": done}

            assert (await raw(alice, "tasks/get", {"taskId": held}))["status"] == "working"
            cancelled = await raw(alice, "tasks/cancel", {"taskId": held})
            assert cancelled["taskId"] == held and cancelled["status"] == "cancelled"
            with deadline(10):
                await statuses.changed.wait()
            assert [(s.task_id, s.status) for s in statuses.seen] == [(held, "cancelled")]  # alice's own only
            plain = await alice.call_tool("mcp__t__research", {"topic": "reefs"})  # plain calls: the same process
            assert plain.content == [types.TextContent(type="text", text="report on reefs")]
            assert len(downstreams.pool.running("t")) == 2


async def test_a_task_whose_session_connection_went_idle_ends_failed_saying_why(rwx_policy: SandboxPolicy):
    async with _session_hub(rwx_policy, idle_seconds=0.5) as (downstreams, omega):
        statuses = _Statuses()
        async with client(omega, extensions=[statuses]) as alice:
            task = await task_call(alice, "mcp__t__research", {"topic": "x", "hold": True})
            task_id = task["taskId"]
            await until(lambda: not downstreams.pool.running("t"), "the idle connection to stop")
            with deadline(10):  # told first: a tasks/get before would have shown it the end already
                await statuses.changed.wait()
            assert [(s.task_id, s.status) for s in statuses.seen] == [(task_id, "failed")]
            assert statuses.seen[0].status_message is not None and "no call" in statuses.seen[0].status_message

            got = await raw(alice, "tasks/get", {"taskId": task_id})
            assert got["taskId"] == task_id and got["status"] == "failed"
            assert "server t stopped" in got["statusMessage"] and "no call for 0.5 s" in got["statusMessage"]
            assert got["createdAt"] == task["createdAt"] and got["ttl"] == task["ttl"]
            assert [(t["taskId"], t["status"]) for t in (await raw(alice, "tasks/list", {}))["tasks"]] == [
                (task_id, "failed")
            ]
            result = await raw(alice, "tasks/result", {"taskId": task_id})
            assert result["isError"] is True and "no call for 0.5 s" in text(result)
            assert result["_meta"][RELATED] == {"taskId": task_id}
            with pytest.raises(MCPError) as refused:
                await raw(alice, "tasks/cancel", {"taskId": task_id})
            assert refused.value.code == types.INVALID_PARAMS and "already ended" in refused.value.message
            assert len(statuses.seen) == 1

            again = await task_call(alice, "mcp__t__research", {"topic": "tides"})  # a new connection, a new task
            assert text(await raw(alice, "tasks/result", {"taskId": again["taskId"]})) == "report on tides"


async def test_a_waiting_task_result_ends_when_the_session_connection_stops_or_dies(rwx_policy: SandboxPolicy):
    async with _session_hub(rwx_policy) as (downstreams, omega):
        async with client(omega) as alice:
            for how in ("session ended", "server killed"):
                task_id = (await task_call(alice, "mcp__t__research", {"topic": "x", "hold": True}))["taskId"]
                answers: list[dict[str, Any]] = []

                async def wait_result(task_id: str = task_id, answers: list[dict[str, Any]] = answers) -> None:
                    answers.append(await raw(alice, "tasks/result", {"taskId": task_id}))

                with deadline(30):
                    async with anyio.create_task_group() as waiting:
                        waiting.start_soon(wait_result)
                        [(key, session)] = downstreams.pool.running("t")
                        instances = downstreams.pool._instances.values()  # pyright: ignore[reportPrivateUsage]
                        # The tasks/result request on its way: it keeps the connection in use while it waits.
                        await until(lambda i=instances: any(x.busy for x in i), "the tasks/result request to be sent")
                        if how == "session ended":
                            await downstreams.pool.end(key)
                        else:
                            assert session.stdio is not None and session.stdio.pid is not None
                            os.kill(session.stdio.pid, signal.SIGKILL)
                [result] = answers
                assert result["isError"] is True, (how, result)
                expected = "its client session ended" if how == "session ended" else "server t stopped"
                assert expected in text(result), (how, result)
                got = await raw(alice, "tasks/get", {"taskId": task_id})
                assert got["status"] == "failed", (how, got)
                await until(lambda: not downstreams.pool.running("t"), "the connection to be gone")


@pytest.mark.e2e
async def test_tasks_of_a_share_session_server_through_the_http_hub_belong_to_each_session(tmp_path: Path):
    config = tmp_path / "omega.toml"
    config.write_text(
        f'[servers.t]\ncommand = {sys.executable!r}\nargs = [{str(TASK_SERVER)!r}]\nshare = "session"\n'
        '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\n'
    )
    alice_token = "alice-token-0123456789abcdef"
    hub_process = start_hub(tmp_path, "--config", str(config), env={"ALICE_TOKEN": alice_token})
    try:
        async with hub_client(hub_process.url, alice_token) as one, hub_client(hub_process.url, alice_token) as two:
            held = (await task_call(one, "mcp__t__research", {"topic": "x", "hold": True}))["taskId"]
            done = (await task_call(two, "mcp__t__research", {"topic": "tides"}))["taskId"]
            assert [t["taskId"] for t in (await raw(one, "tasks/list", {}))["tasks"]] == [held]
            assert [t["taskId"] for t in (await raw(two, "tasks/list", {}))["tasks"]] == [done]
            with pytest.raises(MCPError) as refused:
                await raw(two, "tasks/cancel", {"taskId": held})
            assert refused.value.message == "Task not found"
            assert text(await raw(two, "tasks/result", {"taskId": done})) == "report on tides"
            assert (await raw(one, "tasks/cancel", {"taskId": held}))["status"] == "cancelled"
            plain = await one.call_tool("mcp__t__research", {"topic": "reefs"})  # a plain call: run as a task
            assert plain.content == [types.TextContent(type="text", text="report on reefs")]
    finally:
        hub_process.stop()


@pytest.mark.e2e
async def test_server_everythings_research_query_as_a_share_session_server_runs_per_session(tmp_path: Path):
    entry = everything()
    config = tmp_path / "omega.toml"
    config.write_text(
        f'[servers.everything]\ncommand = "node"\nargs = [{str(entry)!r}, "stdio"]\nshare = "session"\n'
        '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\n'
    )
    alice_token = "alice-token-0123456789abcdef"
    hub_process = start_hub(tmp_path, "--config", str(config), env={"ALICE_TOKEN": alice_token})
    name = "mcp__everything__simulate-research-query"
    try:
        async with hub_client(hub_process.url, alice_token) as one, hub_client(hub_process.url, alice_token) as two:
            ids: dict[str, str] = {}
            for c, topic in ((one, "tides"), (two, "reefs")):
                ids[topic] = (await task_call(c, name, {"topic": topic}))["taskId"]
            for c, topic in ((one, "tides"), (two, "reefs")):
                task_id = ids[topic]

                async def done(c: mcp.Client = c, task_id: str = task_id) -> bool:
                    got = await raw(c, "tasks/get", {"taskId": task_id})
                    assert got["taskId"] == task_id and got["status"] in ("working", "completed"), got
                    return got["status"] == "completed"

                await until(done, "the research task to complete", 60, interval=0.2)
                assert f"# Research Report: {topic}" in text(await raw(c, "tasks/result", {"taskId": task_id}))
                assert [t["taskId"] for t in (await raw(c, "tasks/list", {}))["tasks"]] == [task_id]
            with pytest.raises(MCPError) as refused:
                await raw(two, "tasks/get", {"taskId": ids["tides"]})
            assert refused.value.message == "Task not found"
    finally:
        hub_process.stop()
