"""`--model auto` / `[agent] route`: one tool-less classification on model_fast picks the model.

The scripted provider records every request, so the classification request (model, tools, system)
and the model the loop then runs on are checked directly; `run_agent_command` with a mock
transport shows what goes on the wire (no `tools` key) and into `--json`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import types

from omega_mcp.agent.command import AgentSettings, RunOptions, resolve_settings, run_agent_command, run_prompt
from omega_mcp.agent.routing import CLASSIFIER_SYSTEM, Route, parse_classification
from omega_mcp.config import AgentConfig, Config
from omega_mcp.errors import ConfigError
from omega_mcp.messages import UserMessage
from omega_mcp.providers.scripted import ScriptedProvider, ScriptedRequest, call, reply

ROUTE = Route(fast="small-model", complex="big-model")
SETTINGS = AgentSettings("scripted", "big-model", "http://127.0.0.1:1", None, None, 10, None, None, ROUTE)


class Host:
    async def list_tools(self) -> list[types.Tool]:
        return [types.Tool(name="echo", description="Echo", input_schema={"type": "object", "properties": {}})]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text="echoed")])


def classifying(verdict: str) -> ScriptedProvider:
    """Answers the classification with `verdict`, then calls echo once and answers with the model's name."""

    def script(request: ScriptedRequest) -> Any:
        if request.system == CLASSIFIER_SYSTEM:
            return verdict
        if len(request.messages) == 1:
            return reply("", call("echo"))
        return f"answered by {request.model}"

    return ScriptedProvider(script)


async def routed(provider: ScriptedProvider, *, json_output: bool = False) -> tuple[Any, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    outcome = await run_prompt(
        "rename the function everywhere",
        provider=provider,
        tools=Host(),
        settings=SETTINGS,
        options=RunOptions(system="sys", allowed_tools=None, stream=False, json_output=json_output),
        stdout=stdout,
        stderr=stderr,
    )
    return outcome, stdout.getvalue(), stderr.getvalue()


@pytest.mark.parametrize(("verdict", "model"), [("simple", "small-model"), ("Complex.", "big-model")])
async def test_the_classification_runs_on_model_fast_without_tools_and_picks_the_model(verdict, model) -> None:
    provider = classifying(verdict)
    outcome, out, err = await routed(provider)
    assert outcome.code == 0 and out == f"answered by {model}\n"
    first, *loop = provider.requests
    assert (first.model, first.tools, first.system) == ("small-model", (), CLASSIFIER_SYSTEM)
    assert first.messages == (UserMessage("rename the function everywhere"),)
    assert [r.model for r in loop] == [model, model] and all(r.tools for r in loop)
    tier, looks = ("fast", "simple") if model == "small-model" else ("complex", "complex")
    assert err.splitlines()[0] == f"omega-mcp agent: routed to model_{tier} ({model}): the request looks {looks}"


async def test_the_classification_usage_is_counted_but_is_not_a_turn() -> None:
    outcome, _out, err = await routed(classifying("simple"))
    assert outcome.result.turns == 2
    assert (outcome.result.usage.input_tokens, outcome.result.usage.output_tokens) == (30, 15)  # 3 requests
    assert "2 turns, 30 in / 15 out" in err.splitlines()[-1]


@pytest.mark.parametrize("answer", ["I am not sure", "simple or complex?", ""])
async def test_an_unreadable_classification_falls_back_to_model_complex_and_says_so(answer) -> None:
    outcome, out, err = await routed(classifying(answer))
    assert outcome.code == 0 and out == "answered by big-model\n"
    assert outcome.route.fallback and outcome.model == "big-model"
    first = err.splitlines()[0]
    assert "neither 'simple' nor 'complex'" in first and "using model_complex (big-model)" in first


async def test_json_records_the_model_and_the_route() -> None:
    _outcome, out, _err = await routed(classifying("simple"), json_output=True)
    data = json.loads(out)
    assert data["model"] == "small-model"
    assert data["route"] == {"tier": "fast", "fallback": False}
    assert data["usage"]["input_tokens"] == 30


def test_classification_answers_are_read_by_the_one_word_they_name() -> None:
    assert parse_classification("simple") == "simple"
    assert parse_classification("  COMPLEX\n") == "complex"
    assert parse_classification("The request is simple.") == "simple"
    assert parse_classification("simplex") is None
    assert parse_classification("simple, not complex") is None
    assert parse_classification("") is None


def settings(agent: AgentConfig, model: str | None) -> AgentSettings:
    return resolve_settings(
        Config(agent=agent),
        provider="openai",
        model=model,
        base_url=None,
        max_turns=None,
        environ={"OPENAI_API_KEY": "k"},
    )


def test_auto_and_route_true_route_but_an_explicit_model_does_not() -> None:
    both = AgentConfig(model="mid", model_fast="fast-m", model_complex="big-m")
    assert settings(both, "auto").route == Route("fast-m", "big-m")
    assert settings(both, None).route is None
    routing = both.model_copy(update={"route": True})
    assert settings(routing, None).route == Route("fast-m", "big-m")
    chosen = settings(routing, "explicit")
    assert chosen.route is None and chosen.model == "explicit"


def test_auto_without_both_models_is_a_config_error_naming_what_is_missing() -> None:
    with pytest.raises(ConfigError, match=r"--model: auto needs model_fast and model_complex .*model_complex not set"):
        settings(AgentConfig(model_fast="fast-m"), "auto")
    with pytest.raises(ConfigError, match=r"agent.route: routing needs .*model_fast and model_complex not set"):
        settings(AgentConfig(route=True), None)


def test_routing_models_of_another_providers_section_do_not_apply() -> None:
    other = AgentConfig(provider="anthropic", model_fast="haiku", model_complex="opus", route=True)
    assert settings(other, None).route is None
    with pytest.raises(ConfigError, match="auto needs"):
        settings(other, "auto")


def openai_reply(content: str) -> httpx2.Response:
    message = {"role": "assistant", "content": content}
    usage = {"prompt_tokens": 100, "completion_tokens": 1}
    return httpx2.Response(
        200, json={"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": usage}
    )


async def command(tmp_path: Path, agent: AgentConfig, model: str | None) -> tuple[int, str, str, list[dict[str, Any]]]:
    replies = [openai_reply("complex"), openai_reply("Done.")]
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return replies.pop(0)

    stdout, stderr = io.StringIO(), io.StringIO()
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handle)) as client:
        code = await run_agent_command(
            prompt="refactor the parser",
            config=Config(agent=agent, home=tmp_path),
            tools=Host(),
            provider="openai",
            model=model,
            base_url=None,
            max_turns=None,
            no_tools=False,
            allow_tools=None,
            system=None,
            json_output=True,
            stdout=stdout,
            stderr=stderr,
            environ={"OPENAI_API_KEY": "sk-test"},
            http_client=client,
        )
    return code, stdout.getvalue(), stderr.getvalue(), bodies


async def test_auto_on_the_wire_classifies_without_a_tools_key_then_runs_with_tools(tmp_path: Path) -> None:
    agent = AgentConfig(model_fast="gpt-mini", model_complex="gpt-big")
    code, out, err, bodies = await command(tmp_path, agent, "auto")
    assert code == 0, err
    assert bodies[0]["model"] == "gpt-mini" and "tools" not in bodies[0]
    assert bodies[1]["model"] == "gpt-big" and bodies[1]["tools"]
    data = json.loads(out)
    assert (data["model"], data["route"], data["turns"]) == ("gpt-big", {"tier": "complex", "fallback": False}, 1)
    assert data["usage"]["input_tokens"] == 200
    assert "routed to model_complex (gpt-big)" in err


async def test_auto_without_the_models_exits_2_with_one_line_and_sends_nothing(tmp_path: Path) -> None:
    code, out, err, bodies = await command(tmp_path, AgentConfig(model="gpt-x"), "auto")
    assert (code, out, bodies) == (2, "", [])
    assert err == (
        "omega-mcp agent: --model: auto needs model_fast and model_complex in [agent] "
        "(model_fast and model_complex not set)\n"
    )
