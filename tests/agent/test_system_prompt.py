"""The default system prompt: what it tells the model, what replaces or extends it, and that it never
changes within a run (prompt caching needs the same bytes in every request)."""

from __future__ import annotations

import datetime
import io
import json
from pathlib import Path
from typing import Any

import httpx2
from mcp import types

from omega_mcp.agent.command import AgentSettings, run_agent_command, run_options, run_prompt
from omega_mcp.agent.prompt import default_system_prompt, system_prompt
from omega_mcp.config import AgentConfig, Config, SandboxConfig, SandboxMode
from omega_mcp.providers.scripted import ScriptedProvider, call, reply, turns
from omega_mcp.sandbox.policy import SandboxPolicy

DAY = datetime.date(2026, 3, 14)


class Host:
    async def list_tools(self) -> list[types.Tool]:
        return [types.Tool(name="echo", description="Echo", input_schema={"type": "object", "properties": {}})]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text="echoed")])


def policy(tmp_path: Path, mode: SandboxMode = "sandbox") -> SandboxPolicy:
    sandbox = SandboxConfig(workspace=tmp_path / "ws", write_roots=(tmp_path / "extra",))
    config = Config(sandbox=sandbox, home=tmp_path / "home")
    return SandboxPolicy.from_settings(config.sandbox, config.place, mode=mode)


def test_the_default_prompt_names_workspace_mode_write_roots_network_date_and_tool_names(tmp_path: Path) -> None:
    text = default_system_prompt(policy(tmp_path), today=DAY)
    assert f"Workspace: {tmp_path / 'ws'}. Relative paths in tool arguments resolve against it" in text
    assert "Sandbox mode: sandbox." in text
    tree = tmp_path / "home" / "clients" / "@hub"  # the client's own tree, not all of $OMEGA_HOME
    assert f"may write only beneath {tmp_path / 'ws'}, {tree}, /tmp, {tmp_path / 'extra'};" in text
    assert f"bash may write only beneath {tmp_path / 'ws'}, {tree / 'scratch'}, /tmp" in text
    assert "bash has no network access" in text
    assert "Today's date: 2026-03-14." in text
    assert "mcp__<server>__<tool>" in text


def test_rx_and_rwx_say_what_they_allow(tmp_path: Path) -> None:
    rx = default_system_prompt(policy(tmp_path, "rx"), today=DAY)
    assert "Sandbox mode: rx." in rx and "bash has network access." in rx and "may write only beneath" in rx
    rwx = default_system_prompt(policy(tmp_path, "rwx"), today=DAY)
    assert "Sandbox mode: rwx." in rwx and "may write anywhere except system directories (/etc," in rwx
    assert "bash may write anywhere" in rwx and "bash has network access." in rwx


def test_without_tools_the_prompt_does_not_describe_them(tmp_path: Path) -> None:
    text = default_system_prompt(policy(tmp_path), tools=False, today=DAY)
    assert "No tools are available" in text and "Today's date: 2026-03-14." in text
    assert "Workspace" not in text and "mcp__" not in text


def test_system_replaces_the_default_an_empty_one_sends_none_and_system_append_extends_it(tmp_path: Path) -> None:
    sandbox = policy(tmp_path)
    assert system_prompt("Be terse.", append="House rules.", policy=sandbox, tools=True) == "Be terse."
    assert system_prompt("", append="House rules.", policy=sandbox, tools=True) is None
    extended = system_prompt(None, append="  House rules.\n", policy=sandbox, tools=True, today=DAY)
    assert extended == default_system_prompt(sandbox, today=DAY) + "\n\nHouse rules."


def test_the_date_has_day_precision_and_defaults_to_today(tmp_path: Path) -> None:
    before = datetime.date.today()
    text = default_system_prompt(policy(tmp_path))
    after = datetime.date.today()
    assert any(f"Today's date: {day.isoformat()}." in text for day in {before, after})
    assert ":" not in text.split("Today's date:", 1)[1]  # no clock time: it would break prompt caching


async def test_every_request_of_a_run_carries_the_same_prompt(tmp_path: Path) -> None:
    config = Config(agent=AgentConfig(system_append="Answer in French."), home=tmp_path / "home")
    stdout = io.StringIO()
    options = run_options(
        config,
        system=None,
        no_tools=False,
        allow_tools=None,
        json_output=False,
        stream=None,
        stdout=stdout,
        sandbox=policy(tmp_path),
    )
    provider = ScriptedProvider(turns([reply("", call("echo")), reply("", call("echo")), "fini"]))
    settings = AgentSettings("scripted", "m", "http://127.0.0.1:1", None, None, 10, None, None)
    outcome = await run_prompt(
        "go",
        provider=provider,
        tools=Host(),
        settings=settings,
        options=options,
        stdout=stdout,
        stderr=io.StringIO(),
    )
    assert outcome.code == 0 and len(provider.requests) == 3
    systems = {request.system for request in provider.requests}
    assert len(systems) == 1
    (system,) = systems
    assert system is not None and system.endswith("\n\nAnswer in French.")
    assert f"Workspace: {tmp_path / 'ws'}." in system


async def test_the_command_sends_the_default_prompt_for_the_policy_it_is_given(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        message = {"role": "assistant", "content": "ok"}
        return httpx2.Response(200, json={"choices": [{"index": 0, "finish_reason": "stop", "message": message}]})

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handle)) as client:
        code = await run_agent_command(
            prompt="hi",
            config=Config(home=tmp_path / "home"),
            tools=Host(),
            provider="openai",
            model=None,
            base_url=None,
            max_turns=None,
            no_tools=False,
            allow_tools=None,
            system=None,
            json_output=False,
            stdout=io.StringIO(),
            stderr=io.StringIO(),
            environ={"OPENAI_API_KEY": "sk-test"},
            http_client=client,
            sandbox=policy(tmp_path, "rx"),
        )
    assert code == 0
    first = bodies[0]["messages"][0]
    assert first["role"] in ("system", "developer")
    assert "Sandbox mode: rx." in first["content"] and str(tmp_path / "ws") in first["content"]
