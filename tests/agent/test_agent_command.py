"""`omega-mcp agent` in process: settings precedence, output streams, JSON, exit codes."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import types

from omega_mcp.agent.command import resolve_model, resolve_settings, run_agent_command
from omega_mcp.config import AgentConfig, Config
from omega_mcp.errors import ConfigError


class Host:
    async def list_tools(self) -> list[types.Tool]:
        return [types.Tool(name="echo", description="Echo", input_schema={"type": "object", "properties": {}})]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"echoed {arguments}")])


def openai_reply(content: str | None, calls: list[dict[str, Any]] | None = None) -> httpx2.Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    return httpx2.Response(
        200, json={"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": usage}
    )


class Server:
    def __init__(self, *replies: httpx2.Response | Callable[[httpx2.Request], httpx2.Response]) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []
        self.client = httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply(request) if callable(reply) else reply


async def run(
    server: Server | None,
    tmp_path: Path,
    *,
    agent: AgentConfig | None = None,
    environ: dict[str, str] | None = None,
    **flags: Any,
) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    options: dict[str, Any] = {
        "provider": "openai",
        "model": None,
        "base_url": None,
        "max_turns": None,
        "no_tools": False,
        "allow_tools": None,
        "system": None,
        "json_output": False,
    }
    options.update(flags)
    code = await run_agent_command(
        prompt="do it",
        config=Config(agent=agent or AgentConfig(), home=tmp_path),
        tools=Host(),
        stdout=stdout,
        stderr=stderr,
        environ={"OPENAI_API_KEY": "sk-test"} if environ is None else environ,
        http_client=server.client if server else None,
        **options,
    )
    return code, stdout.getvalue(), stderr.getvalue()


CALL = [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"x": 1}'}}]
USAGE_LINE = re.compile(r"omega-mcp agent: \d+ turns?, [\d,]+ in( \(.*\))? / [\d,]+ out(, \$[\d.]+)?, \d+\.\d s")


def before_usage(err: str) -> list[str]:
    """The stderr lines before the usage line that ends every run (which must be there)."""
    lines = err.splitlines()
    assert lines and USAGE_LINE.fullmatch(lines[-1]), err
    return lines[:-1]


async def test_answer_goes_to_stdout_and_tool_activity_to_stderr_in_order(tmp_path) -> None:
    server = Server(openai_reply("Let me echo.", CALL), openai_reply("All done."))
    code, out, err = await run(server, tmp_path)
    assert code == 0
    assert out == "All done.\n"
    assert before_usage(err) == ["Let me echo.", '[tool] echo {"x": 1}', "[result] echo: echoed {'x': 1}"]
    assert str(server.requests[0].url) == "https://api.openai.com/v1/chat/completions"
    assert json.loads(server.requests[0].content)["model"] == "gpt-5.4"


async def test_json_output_is_one_object_with_summed_usage(tmp_path) -> None:
    server = Server(openai_reply(None, CALL), openai_reply("Done."))
    code, out, _err = await run(server, tmp_path, json_output=True)
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"output", "turns", "usage", "messages", "model", "route"}
    assert data["model"] == "gpt-5.4" and data["route"] is None
    assert data["output"] == "Done." and data["turns"] == 2
    assert data["usage"]["input_tokens"] == 200 and data["usage"]["output_tokens"] == 20
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]


async def test_missing_api_key_is_a_config_error_naming_the_variable(tmp_path) -> None:
    server = Server(openai_reply("never"))
    code, out, err = await run(server, tmp_path, provider="anthropic", environ={})
    assert code == 2 and out == ""
    assert err == "omega-mcp agent: ANTHROPIC_API_KEY is not set: the anthropic provider needs an API key\n"
    assert server.requests == []


async def test_no_provider_anywhere_is_a_config_error(tmp_path) -> None:
    code, _out, err = await run(None, tmp_path, provider=None)
    assert code == 2 and "no provider" in err and "--provider" in err and "\n" == err[-1] and err.count("\n") == 1


async def test_unknown_provider_is_a_config_error(tmp_path) -> None:
    code, _out, err = await run(None, tmp_path, provider="mistral")
    assert code == 2 and "unknown provider 'mistral'" in err


async def test_auth_failure_exits_1_with_the_providers_message_and_the_key_variable(tmp_path) -> None:
    server = Server(
        httpx2.Response(401, json={"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    )
    code, out, err = await run(server, tmp_path)
    assert code == 1 and out == ""
    assert "Incorrect API key provided" in err and "(check OPENAI_API_KEY)" in err
    assert "Traceback" not in err and len(server.requests) == 1


async def test_turn_limit_exits_1_and_json_keeps_the_partial_run(tmp_path) -> None:
    server = Server(openai_reply("again", CALL))
    code, out, err = await run(server, tmp_path, max_turns=2, json_output=True)
    assert code == 1
    assert "stopped after 2 turns" in err
    data = json.loads(out)
    assert data["turns"] == 2 and "stopped after 2 turns" in data["error"]


async def test_no_tools_flag_sends_no_tools(tmp_path) -> None:
    server = Server(openai_reply("plain"))
    code, _out, _err = await run(server, tmp_path, no_tools=True)
    assert code == 0 and "tools" not in json.loads(server.requests[0].content)


async def test_config_supplies_provider_model_version_and_turns(tmp_path) -> None:
    server = Server(
        httpx2.Response(200, json={"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "usage": {}})
    )
    agent = AgentConfig(provider="anthropic", model="claude-opus-4-6", anthropic_version="2026-10-21", max_tokens=2048)
    code, out, _err = await run(server, tmp_path, provider=None, agent=agent, environ={"ANTHROPIC_API_KEY": "sk-ant"})
    assert code == 0 and out == "hi\n"
    request = server.requests[0]
    assert request.headers["anthropic-version"] == "2026-10-21" and request.headers["x-api-key"] == "sk-ant"
    body = json.loads(request.content)
    assert body["model"] == "claude-opus-4-6" and body["max_tokens"] == 2048


def settings(agent: AgentConfig | None = None, environ: dict[str, str] | None = None, **flags: Any):
    options: dict[str, Any] = {"provider": None, "model": None, "base_url": None, "max_turns": None}
    options.update(flags)
    return resolve_settings(Config(agent=agent or AgentConfig()), environ=environ or {}, **options)


def test_base_url_precedence_is_flag_then_config_then_environment_then_default() -> None:
    env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://env:1/v1"}
    configured = AgentConfig(provider="openai", base_url="http://config:1/v1")
    assert settings(configured, env, base_url="http://flag:1/v1").base_url == "http://flag:1/v1"
    assert settings(configured, env).base_url == "http://config:1/v1"
    assert settings(None, env, provider="openai").base_url == "http://env:1/v1"
    assert settings(None, {"OPENAI_API_KEY": "k"}, provider="openai").base_url == "https://api.openai.com/v1"


def test_agent_section_for_another_provider_does_not_leak() -> None:
    configured = AgentConfig(provider="anthropic", model="claude-x", base_url="http://proxy:1", max_turns=7)
    chosen = settings(configured, {"GEMINI_API_KEY": "g"}, provider="gemini")
    assert chosen.model == "gemini-2.5-flash"
    assert chosen.base_url == "https://generativelanguage.googleapis.com"
    assert chosen.max_turns == 7  # not provider-specific


def test_keys_come_from_api_key_env_or_the_standard_variables() -> None:
    assert settings(None, {"GOOGLE_API_KEY": "g2"}, provider="gemini").api_key == "g2"
    custom = AgentConfig(api_key_env="MY_KEY")
    assert settings(custom, {"MY_KEY": "mine", "OPENAI_API_KEY": "std"}, provider="openai").api_key == "mine"
    with pytest.raises(ConfigError, match="MY_KEY is not set"):
        settings(custom, {"OPENAI_API_KEY": "std"}, provider="openai")


def test_ollama_needs_no_key_and_accepts_ollama_host_forms() -> None:
    assert settings(None, {}, provider="ollama").base_url == "http://127.0.0.1:11434"
    assert settings(None, {"OLLAMA_HOST": "0.0.0.0"}, provider="ollama").base_url == "http://0.0.0.0:11434"
    assert settings(None, {"OLLAMA_HOST": "gpu-box:8080"}, provider="ollama").base_url == "http://gpu-box:8080"
    assert settings(None, {"OLLAMA_HOST": "https://o.example"}, provider="ollama").base_url == "https://o.example"
    assert settings(None, {}, provider="ollama").api_key is None


def test_bad_base_url_and_turns_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"--base-url.*http://"):
        settings(None, {"OPENAI_API_KEY": "k"}, provider="openai", base_url="ftp://x")
    with pytest.raises(ConfigError, match="--max-turns"):
        settings(None, {"OPENAI_API_KEY": "k"}, provider="openai", max_turns=0)


def test_resolve_model_routes_tiers_with_fallbacks() -> None:
    agent = AgentConfig(provider="openai", model="gpt-5.4", model_fast="gpt-5.4-mini", model_complex="gpt-5.5")
    assert [resolve_model(agent, tier) for tier in ("default", "fast", "complex")] == [
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.5",
    ]
    bare = AgentConfig(provider="anthropic")
    assert resolve_model(bare, "fast") == "claude-sonnet-4-6"
    assert resolve_model(Config(agent=AgentConfig(model="m1")), "complex") == "m1"
    with pytest.raises(ConfigError, match="no model"):
        resolve_model(AgentConfig())


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:99999/v1", "port"),
        ("http://[::1/v1", "not a valid URL"),
        ("http:// proxy x/v1", "host"),
        ("https:///v1", "host"),
    ],
)
def test_a_base_url_with_a_bad_port_or_host_is_a_config_error(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"--base-url.*{problem}"):
        settings(None, {"OPENAI_API_KEY": "k"}, provider="openai", base_url=url)


async def test_a_base_url_with_a_bad_port_exits_2_with_one_line(tmp_path) -> None:
    code, out, err = await run(None, tmp_path, base_url="http://127.0.0.1:99999/v1")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "port" in err and "internal error" not in err


@pytest.mark.parametrize("key", ["sk-abc\nsk-def", "sk-“abc”", "sk-a\x00b"])
def test_an_api_key_with_control_or_non_ascii_characters_is_a_config_error_that_hides_the_key(key: str) -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY") as caught:
        settings(None, {"OPENAI_API_KEY": key}, provider="openai")
    assert "abc" not in str(caught.value)


def test_surrounding_whitespace_of_an_api_key_is_ignored() -> None:
    assert settings(None, {"OPENAI_API_KEY": " sk-abc\n"}, provider="openai").api_key == "sk-abc"


async def test_the_calls_of_the_last_allowed_turn_are_shown_as_not_run(tmp_path) -> None:
    server = Server(openai_reply("again", CALL))
    code, _out, err = await run(server, tmp_path, max_turns=1)
    assert code == 1
    lines = err.splitlines()
    assert lines[:2] == ["again", '[tool] echo {"x": 1} (not run: turn limit reached)']
    assert lines[-1].startswith("omega-mcp agent: stopped after 1 turn:")


async def test_an_allow_tool_glob_that_matches_nothing_is_warned_about(tmp_path) -> None:
    server = Server(openai_reply("plain"))
    code, out, err = await run(server, tmp_path, allow_tools=["ecko*", "echo"])
    assert (code, out) == (0, "plain\n")
    assert before_usage(err) == ["omega-mcp agent: warning: --allow-tool 'ecko*' matches no tool (available: echo)"]


@pytest.mark.parametrize(
    ("reply", "warning"),
    [
        (openai_reply(None), "the model returned an empty answer (finish reason: stop)"),
        (
            httpx2.Response(
                200,
                json={
                    "choices": [{"index": 0, "finish_reason": "length", "message": {"content": "The answer is"}}],
                    "usage": {},
                },
            ),
            "the answer was cut off at the output token limit (finish reason: length)",
        ),
        (
            httpx2.Response(
                200,
                json={
                    "choices": [{"index": 0, "finish_reason": "content_filter", "message": {"content": "I can"}}],
                    "usage": {},
                },
            ),
            "the model stopped early (finish reason: content_filter)",
        ),
    ],
)
async def test_an_empty_or_cut_off_final_answer_is_pointed_out_on_stderr(tmp_path, reply, warning) -> None:
    code, _out, err = await run(Server(reply), tmp_path)
    assert code == 0
    assert before_usage(err) == [f"omega-mcp agent: warning: {warning}"]


class AsciiStream(io.TextIOWrapper):
    """A stdout/stderr whose encoding cannot represent most of Unicode (LANG=C, old consoles)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="ascii", errors="strict")

    def text(self) -> str:
        self.flush()
        buffer = self.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue().decode("ascii")


@pytest.mark.parametrize("json_output", [False, True])
async def test_unicode_output_on_an_ascii_terminal_is_escaped_not_a_crash(tmp_path, json_output) -> None:
    server = Server(openai_reply("Schritt ü 🎉", CALL), openai_reply("日本 ✓ 🎉"))
    stdout, stderr = AsciiStream(), AsciiStream()
    code = await run_agent_command(
        prompt="do it",
        config=Config(home=tmp_path),
        tools=Host(),
        provider="openai",
        model=None,
        base_url=None,
        max_turns=None,
        no_tools=False,
        allow_tools=None,
        system=None,
        json_output=json_output,
        stdout=stdout,
        stderr=stderr,
        environ={"OPENAI_API_KEY": "sk-test"},
        http_client=server.client,
    )
    assert code == 0
    if json_output:
        assert json.loads(stdout.text())["output"] == "日本 ✓ 🎉"
    else:
        assert stdout.text() == "\\u65e5\\u672c \\u2713 \\U0001f389\n"
    assert stderr.text().splitlines()[0] == "Schritt \\xfc \\U0001f389"


async def test_json_of_a_run_failing_midway_keeps_usage_and_conversation_so_far(tmp_path) -> None:
    failure = httpx2.Response(400, json={"error": {"message": "context too long", "type": "invalid_request_error"}})
    server = Server(openai_reply("Let me echo.", CALL), failure)
    code, out, err = await run(server, tmp_path, json_output=True)
    assert code == 1 and "context too long" in err
    data = json.loads(out)
    assert data["output"] is None and "context too long" in data["error"]
    assert data["turns"] == 1 and data["usage"]["input_tokens"] == 100
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool"]
