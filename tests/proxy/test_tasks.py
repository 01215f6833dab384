"""Tasks through the aggregator (SPEC "Transparency", Tasks): a task-only tool is exported with its
`execution`; a 2025-11-25 client's task-augmented call gets a task through omega as it would directly
(`tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`, `notifications/tasks/status`), under an id
only its own session can use; a client that sends no task still runs a task-only tool (omega runs it
as a task and waits, bounded). Downstreams: the fixture server (tests/fixtures/task_server.py)
in-process, over stdio and streamable HTTP, and the real `@modelcontextprotocol/server-everything`."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cli_support import cli_env
from hub_support import hub_client, start_hub
from omega_mcp.proxy.eras import EraChoice
from omega_mcp.proxy.supervisor import Downstreams, DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.server import OmegaServer, build_server
from omega_mcp.server.tool_search import SessionTools
from omega_mcp.toolbox import Toolbox
from proxy_support import FIXTURES, client, downstream_spec, http_fixture, hub
from relay_support import pipe_client
from task_support import RELATED, everything, raw, task_call, text
from waits import deadline, until

TASK_SERVER = FIXTURES / "task_server.py"
_spec = importlib.util.spec_from_file_location("task_server_fixture", TASK_SERVER)
assert _spec is not None and _spec.loader is not None
_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixture)
task_server = _fixture.task_server


def _in_process(name: str = "t") -> DownstreamSpec:
    return downstream_spec(name, task_server()._lowlevel_server, era="handshake")  # pyright: ignore[reportPrivateUsage]


async def _downstream_tasks(downstreams: Downstreams, server_name: str) -> list[dict[str, Any]]:
    """The server's own view of its tasks (not through omega)."""
    connected = downstreams.connected(server_name)
    assert connected is not None
    return (await connected[0].request("tasks/list", {}, timeout_seconds=10))["tasks"]


# -- the namespace and the capability ---------------------------------------------------------


async def test_task_only_and_task_optional_tools_are_exported_with_their_execution(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
    research, quick = tools["mcp__t__research"], tools["mcp__t__quick"]
    assert research.execution is not None and research.execution.task_support == "required"
    assert quick.execution is not None and quick.execution.task_support == "optional"
    assert tools["mcp__t__plain"].execution is None


async def test_tasks_are_declared_to_a_tasks_era_client_only(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, "legacy") as c:
            assert c.protocol_version == "2025-11-25"
            tasks = c.server_capabilities.tasks
            assert tasks is not None and tasks.list is not None and tasks.cancel is not None
            assert tasks.requests is not None and tasks.requests.tools is not None
        async with client(omega, "auto") as modern:  # 2026-07-28: no tasks in its core
            assert modern.protocol_version == "2026-07-28"
            assert modern.server_capabilities.tasks is None
            with pytest.raises(MCPError) as refused:
                await raw(modern, "tasks/list", {})
            assert refused.value.code == types.METHOD_NOT_FOUND


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25"])
@pytest.mark.e2e
def test_serve_declares_tasks_only_to_a_client_of_the_version_that_defines_them(tmp_path: Path, version: str):
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    (tmp_path / "ws").mkdir()
    serve = [sys.executable, "-m", "omega_mcp", "serve", "--mode", "rwx", "--workspace", str(tmp_path / "ws")]
    done = subprocess.run(
        serve, input=json.dumps(initialize) + "\n", capture_output=True, text=True, env=cli_env(tmp_path), timeout=60
    )
    result = json.loads(done.stdout.splitlines()[0])["result"]
    assert result["protocolVersion"] == version
    assert ("tasks" in result["capabilities"]) == (version == "2025-11-25")


# -- a task through omega ---------------------------------------------------------------------


async def _a_task_passes_through(omega: OmegaServer, server_name: str) -> None:
    async with client(omega) as c:
        task = await task_call(c, f"mcp__{server_name}__research", {"topic": "tides"})
        task_id = task["taskId"]
        assert task_id != "t-1"  # omega's own id, not the server's
        got = await raw(c, "tasks/get", {"taskId": task_id})
        assert got["taskId"] == task_id and got["status"] == "completed"
        result = await raw(c, "tasks/result", {"taskId": task_id})
        assert text(result) == "report on tides" and result["isError"] is False
        assert result["_meta"][RELATED] == {"taskId": task_id}
        listed = await raw(c, "tasks/list", {})
        assert [t["taskId"] for t in listed["tasks"]] == [task_id]
        optional = await task_call(c, f"mcp__{server_name}__quick", {"topic": "reefs"})
        assert text(await raw(c, "tasks/result", {"taskId": optional["taskId"]})) == "report on reefs"


async def test_a_task_augmented_call_gets_a_task_through_omega(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        await _a_task_passes_through(omega, "t")


async def test_a_working_task_is_cancelled_through_omega(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega) as c:
            task = await task_call(c, "mcp__t__research", {"topic": "storms", "hold": True})
            assert task["status"] == "working"
            assert (await raw(c, "tasks/get", {"taskId": task["taskId"]}))["status"] == "working"
            cancelled = await raw(c, "tasks/cancel", {"taskId": task["taskId"]})
            assert cancelled["taskId"] == task["taskId"] and cancelled["status"] == "cancelled"
            with pytest.raises(MCPError) as again:  # the server's own error for a finished task, as it is
                await raw(c, "tasks/cancel", {"taskId": task["taskId"]})
            assert again.value.code == types.INVALID_PARAMS and "already cancelled" in again.value.message
        assert [t["status"] for t in await _downstream_tasks(downstreams, "t")] == ["cancelled"]


async def test_one_client_can_neither_see_nor_cancel_another_clients_task(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega) as alice, client(omega) as bob:
            task_id = (await task_call(alice, "mcp__t__research", {"topic": "x", "hold": True}))["taskId"]
            assert (await raw(bob, "tasks/list", {}))["tasks"] == []
            for method in ("tasks/get", "tasks/cancel", "tasks/result"):
                with pytest.raises(MCPError) as refused:
                    await raw(bob, method, {"taskId": task_id})
                assert refused.value.code == types.INVALID_PARAMS and refused.value.message == "Task not found"
            with pytest.raises(MCPError):  # the server's own id means nothing through omega either
                await raw(alice, "tasks/get", {"taskId": "t-1"})
            assert (await raw(alice, "tasks/get", {"taskId": task_id}))["status"] == "working"
            assert [t["taskId"] for t in (await raw(alice, "tasks/list", {}))["tasks"]] == [task_id]


async def test_status_notifications_reach_the_client_that_owns_the_task(rwx_policy: SandboxPolicy):
    seen: list[types.TaskStatusNotificationParams] = []
    changed = anyio.Event()

    async def on_status(params: types.TaskStatusNotificationParams) -> None:
        seen.append(params)
        changed.set()

    from mcp.client.extension import ClientExtension, NotificationBinding

    class Statuses(ClientExtension):  # the SDK client's hook for a notification its core does not type
        identifier = "com.example/task-statuses"

        def notifications(self) -> list[NotificationBinding[Any]]:
            return [
                NotificationBinding(
                    method="notifications/tasks/status",
                    params_type=types.TaskStatusNotificationParams,
                    handler=on_status,
                )
            ]

    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, extensions=[Statuses()]) as alice, client(omega) as bob:
            task_id = (await task_call(alice, "mcp__t__research", {"topic": "x", "hold": True}))["taskId"]
            await raw(alice, "tasks/cancel", {"taskId": task_id})
            with deadline(10):
                await changed.wait()
            assert [(s.task_id, s.status) for s in seen] == [(task_id, "cancelled")]
            del bob


async def test_a_task_call_of_a_tool_that_runs_no_tasks_is_method_not_found(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega) as c:
            for name in ("mcp__t__plain", "read"):
                with pytest.raises(MCPError) as refused:
                    await task_call(c, name, {"topic": "x"} if name != "read" else {"path": "a"})
                assert refused.value.code == types.METHOD_NOT_FOUND
                assert "does not support task-augmented execution" in refused.value.message
            with pytest.raises(MCPError) as unknown:
                await task_call(c, "mcp__t__nothing", {})
            assert unknown.value.code == types.INVALID_PARAMS and "Unknown tool" in unknown.value.message
            with pytest.raises(MCPError) as invalid:
                await task_call(c, "mcp__t__research", {"topic": 3})
            assert invalid.value.code == types.INVALID_PARAMS and "topic" in invalid.value.message
            assert (await raw(c, "tasks/list", {}))["tasks"] == []


# -- a client that sends no task --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_plain_call_of_a_task_only_tool_runs_as_a_task(rwx_policy: SandboxPolicy, mode: str):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, mode) as c:
            result = await c.call_tool("mcp__t__research", {"topic": "moons"})
            assert not result.is_error
            assert result.content == [types.TextContent(type="text", text="report on moons")]
            assert result.meta is None or RELATED not in result.meta  # no task the client knows of
            quick = await c.call_tool("mcp__t__quick", {"topic": "moons"})  # optional: a plain call as it is
            assert not quick.is_error
        assert [t["status"] for t in await _downstream_tasks(downstreams, "t")] == ["completed"]


async def test_in_search_mode_call_tool_runs_a_task_only_tool_too(rwx_policy: SandboxPolicy):
    async with (
        Downstreams([_in_process()], backoff_seconds=0.05) as downstreams,
        Toolbox(rwx_policy, downstreams) as toolbox,
    ):
        omega = build_server(toolbox, catalog=downstreams, tool_search=SessionTools(toolbox, mode="on"))
        await downstreams.wait_ready()
        async with client(omega) as c:
            found = await c.call_tool("search_tools", {"query": "select:mcp__t__research"})
            assert found.structured_content is not None
            assert [t["name"] for t in found.structured_content["tools"]] == ["mcp__t__research"]
            result = await c.call_tool("call_tool", {"name": "mcp__t__research", "arguments": {"topic": "x"}})
            assert not result.is_error and "report on x" in str(result.content)


async def test_a_plain_call_whose_task_outlasts_the_timeout_cancels_the_task(rwx_policy: SandboxPolicy):
    spec = downstream_spec("t", task_server()._lowlevel_server, era="handshake", timeout_seconds=0.5)  # pyright: ignore[reportPrivateUsage]
    async with hub(rwx_policy, spec) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega) as c:
            result = await c.call_tool("mcp__t__research", {"topic": "x", "hold": True})
        assert result.is_error
        block = result.content[0]
        assert isinstance(block, types.TextContent) and "timed out" in block.text
        assert [t["status"] for t in await _downstream_tasks(downstreams, "t")] == ["cancelled"]


async def test_a_client_that_cancels_its_plain_call_cancels_the_task_it_ran_as(rwx_policy: SandboxPolicy):
    async with hub(rwx_policy, _in_process()) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega) as c, anyio.create_task_group() as task_group:
            task_group.start_soon(c.call_tool, "mcp__t__research", {"topic": "x", "hold": True})

            async def statuses() -> list[str]:
                return [t["status"] for t in await _downstream_tasks(downstreams, "t")]

            async def working() -> bool:
                return await statuses() == ["working"]

            await until(working, "the task omega runs for the call")
            task_group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled

        async def cancelled() -> bool:
            return await statuses() == ["cancelled"]

        await until(cancelled, "the task to be cancelled on the server")


# -- over stdio and streamable HTTP -----------------------------------------------------------


async def test_tasks_pass_through_stdio_and_http_downstreams(rwx_policy: SandboxPolicy):
    stdio = StdioServerParameters(command=sys.executable, args=[str(TASK_SERVER)])
    async with http_fixture(str(TASK_SERVER)) as url:
        specs = (DownstreamSpec("local", stdio), DownstreamSpec("remote", url))
        async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, _, omega):
            await downstreams.wait_ready()
            for name in ("local", "remote"):
                await _a_task_passes_through(omega, name)
                async with client(omega, "auto") as modern:  # a 2026-era client: run as a task for it
                    result = await modern.call_tool(f"mcp__{name}__research", {"topic": "x"})
                    assert result.content == [types.TextContent(type="text", text="report on x")]


# -- the real server-everything ---------------------------------------------------------------


@pytest.mark.e2e
async def test_server_everythings_task_only_research_query_runs_through_omega(rwx_policy: SandboxPolicy):
    entry = everything()
    spec = DownstreamSpec("everything", StdioServerParameters(command="node", args=[str(entry), "stdio"]))
    name = "mcp__everything__simulate-research-query"
    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            execution = tools[name].execution
            assert execution is not None and execution.task_support == "required"
            task_id = (await task_call(c, name, {"topic": "tides"}))["taskId"]

            async def done() -> bool:
                got = await raw(c, "tasks/get", {"taskId": task_id})
                assert got["taskId"] == task_id and got["status"] in ("working", "completed")
                return got["status"] == "completed"

            await until(done, "the research task to complete", 60, interval=0.2)
            result = await raw(c, "tasks/result", {"taskId": task_id})
            assert "# Research Report: tides" in text(result)
            assert [t["taskId"] for t in (await raw(c, "tasks/list", {}))["tasks"]] == [task_id]
            plain = await c.call_tool(name, {"topic": "reefs"})  # no task: omega runs it as one
            assert not plain.is_error
            block = plain.content[0]
            assert isinstance(block, types.TextContent) and "# Research Report: reefs" in block.text


@pytest.mark.parametrize("era", ["handshake", "auto"])
async def test_tasks_pass_through_omegas_stdio_relay(rwx_policy: SandboxPolicy, era: EraChoice):
    stdio = StdioServerParameters(command=sys.executable, args=[str(TASK_SERVER)])
    async with hub(rwx_policy, DownstreamSpec("local", stdio, era=era), backoff_seconds=60) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with pipe_client(omega, relay=True) as c:  # the relay takes stdio-to-stdio calls it can
            task = await task_call(c, "mcp__local__research", {"topic": "tides"})
            assert task["taskId"] != "t-1"
            assert text(await raw(c, "tasks/result", {"taskId": task["taskId"]})) == "report on tides"
            plain = await c.call_tool("mcp__local__research", {"topic": "reefs"})
            assert plain.content == [types.TextContent(type="text", text="report on reefs")]
            assert (await c.call_tool("mcp__local__plain", {"topic": "x"})).content == [
                types.TextContent(type="text", text="plain x")
            ]


@pytest.mark.e2e
async def test_server_everythings_research_query_asks_its_client_through_omega(rwx_policy: SandboxPolicy):
    entry = everything()
    spec = DownstreamSpec("everything", StdioServerParameters(command="node", args=[str(entry), "stdio"]))
    asked: list[types.ElicitRequestParams] = []

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"interpretation": "historical"})

    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, elicitation_callback=elicit) as c:
            name = "mcp__everything__simulate-research-query"
            task_id = (await task_call(c, name, {"topic": "tides", "ambiguous": True}))["taskId"]

            async def waiting() -> bool:
                return (await raw(c, "tasks/get", {"taskId": task_id}))["status"] in ("input_required", "completed")

            await until(waiting, "the research task to ask for input", 60, interval=0.2)
            result = await raw(c, "tasks/result", {"taskId": task_id})  # the question rides this request
            assert len(asked) == 1 and "tides" in asked[0].message
            assert asked[0].meta is not None and asked[0].meta[RELATED] == {"taskId": task_id}  # omega's id
            assert "historical" in text(result)


@pytest.mark.e2e
async def test_tasks_through_the_http_hub_belong_to_the_session_that_made_them(tmp_path: Path):
    config = tmp_path / "omega.toml"
    config.write_text(f"[servers.t]\ncommand = {sys.executable!r}\nargs = [{str(TASK_SERVER)!r}]\n")
    hub_process = start_hub(tmp_path, "--config", str(config))
    try:
        async with (
            hub_client(hub_process.url, hub_process.token) as alice,
            hub_client(hub_process.url, hub_process.token) as bob,
        ):
            task_id = (await task_call(alice, "mcp__t__research", {"topic": "x", "hold": True}))["taskId"]
            assert (await raw(alice, "tasks/get", {"taskId": task_id}))["status"] == "working"
            assert (await raw(bob, "tasks/list", {}))["tasks"] == []
            with pytest.raises(MCPError) as refused:
                await raw(bob, "tasks/cancel", {"taskId": task_id})
            assert refused.value.message == "Task not found"
            assert (await raw(alice, "tasks/cancel", {"taskId": task_id}))["status"] == "cancelled"
            done = await task_call(alice, "mcp__t__research", {"topic": "tides"})
            assert text(await raw(alice, "tasks/result", {"taskId": done["taskId"]})) == "report on tides"
            plain = await bob.call_tool("mcp__t__research", {"topic": "reefs"})
            assert plain.content == [types.TextContent(type="text", text="report on reefs")]
    finally:
        hub_process.stop()
