"""Hub features beyond tools: logging/setLevel with log notifications, completion passthrough,
server instructions, and change delivery that survives the first client leaving."""

from __future__ import annotations

from typing import Any

import anyio
import mcp
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import Notifications, client, downstream, downstream_spec, echo_tool, hub
from waits import deadline


class _Logs:
    def __init__(self) -> None:
        self.messages: list[types.LoggingMessageNotificationParams] = []
        self.arrived = anyio.Event()

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append(params)
        self.arrived.set()


def _logging_server() -> Any:
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        await ctx.session.send_log_message("warning", "disk almost full", logger="storage")
        await ctx.session.send_log_message("debug", "chatter")
        return types.CallToolResult(content=[types.TextContent(text="ok")])

    return downstream("loud", call=call)


# Logging is deprecated in the 2026 era; handshake-era clients (Claude Code, the Inspector) still use it.
DEPRECATED_LOGGING = pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")


@DEPRECATED_LOGGING
async def test_set_level_is_answered_and_downstream_logs_reach_the_client(rwx_policy: SandboxPolicy):
    logs = _Logs()
    async with hub(rwx_policy, downstream_spec("loud", _logging_server())) as (_, _, server):
        async with mcp.Client(server, mode="legacy", logging_callback=logs) as c:
            assert c.server_capabilities.logging is not None
            await c.set_logging_level("warning")
            result = await c.call_tool("mcp__loud__echo", {"text": "x"})
            assert not result.is_error
            with deadline(5):
                await logs.arrived.wait()
    # As the server sent it (a direct client sees its logger and data, not omega's)
    assert [(m.level, m.logger, m.data) for m in logs.messages] == [("warning", "storage", "disk almost full")]


@DEPRECATED_LOGGING
async def test_no_logs_are_sent_before_the_client_asks_for_them(rwx_policy: SandboxPolicy):
    logs = _Logs()
    async with hub(rwx_policy, downstream_spec("loud", _logging_server())) as (_, _, server):
        async with mcp.Client(server, mode="legacy", logging_callback=logs) as c:
            await c.call_tool("mcp__loud__echo", {"text": "x"})
            await c.send_ping()  # a round trip after the call: any notification would be here by now
    assert logs.messages == []


def _completing_server() -> Any:
    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[types.Prompt(name="greet", arguments=[types.PromptArgument(name="who")])]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return types.GetPromptResult(messages=[])

    async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        assert isinstance(ref, types.PromptReference) and ref.name == "greet"  # the server's own name
        values = [n for n in ("ana", "andy", "bob") if n.startswith(params.argument.value)]
        return types.CompleteResult(completion=types.Completion(values=values))

    return downstream("names", on_list_prompts=list_prompts, on_get_prompt=get_prompt, on_completion=complete)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_completion_is_passed_through_to_the_prompt_owner(rwx_policy: SandboxPolicy, mode: str):
    async with hub(rwx_policy, downstream_spec("names", _completing_server())) as (_, _, server):
        async with client(server, mode) as c:
            done = await c.complete(types.PromptReference(name="names__greet"), {"name": "who", "value": "an"})
            with pytest.raises(MCPError, match="Unknown prompt"):
                await c.complete(types.PromptReference(name="nobody__greet"), {"name": "who", "value": ""})
    assert done.completion.values == ["ana", "andy"]


async def test_completion_of_a_server_without_completions_is_empty(rwx_policy: SandboxPolicy):
    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[types.Prompt(name="p")])

    async def get_prompt(ctx: Any, params: Any) -> types.GetPromptResult:
        return types.GetPromptResult(messages=[])

    plain = downstream("plain", on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    async with hub(rwx_policy, downstream_spec("plain", plain)) as (_, _, server):
        async with client(server) as c:
            done = await c.complete(types.PromptReference(name="plain__p"), {"name": "x", "value": ""})
    assert done.completion.values == []


async def test_list_changes_still_reach_a_client_after_the_first_client_left(rwx_policy: SandboxPolicy):
    tools = [echo_tool("one")]
    sessions: list[Any] = []
    notes = Notifications()
    spec = downstream_spec("d", downstream("d", tools, sessions=sessions), era="handshake")  # notifies the session
    async with hub(rwx_policy, spec) as (ds, _, server):
        await ds.wait_ready()
        leader_listed, leader_done = anyio.Event(), anyio.Event()

        async def leader() -> None:
            async with client(server) as first:  # connects first: its lifespan leads
                await first.list_tools()
                leader_listed.set()
                await leader_done.wait()

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(leader)
            with deadline(10):
                await leader_listed.wait()
            async with client(server, message_handler=notes) as second:
                await second.list_tools()
                leader_done.set()  # the leader's connection ends; the second must take over
                tools.append(echo_tool("two"))
                await sessions[0].send_tool_list_changed()
                await notes.next()
                assert "mcp__d__two" in [t.name for t in (await second.list_tools()).tools]


def test_the_syslog_levels_python_lacks_are_named_in_omegas_log():
    import logging

    from omega_mcp.loglevels import name_levels, python_level

    name_levels()
    record = logging.LogRecord("omega_mcp.downstream.x", python_level("notice"), __file__, 1, "hello", None, None)
    names = [logging.getLevelName(python_level(level)) for level in ("notice", "alert", "emergency")]
    assert logging.Formatter("%(levelname)s %(message)s").format(record) == "NOTICE hello"
    assert names == ["NOTICE", "ALERT", "EMERGENCY"]
