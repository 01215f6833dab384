"""Sampling answered by omega's own provider (`[sampling]`): the wire request each of the five
providers gets (model, max tokens, system, temperature, stop sequences, images, tools), `allow`,
`mode = "always"`, the settings' resolution, and the whole path through the hub."""

from __future__ import annotations

import base64
import importlib
import json
import logging
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import httpx2
import mcp
import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from cli_support import cli_env
from omega_mcp.cli.toolbox import sampler_for
from omega_mcp.config import load_config
from omega_mcp.messages import ImagePart, RequestSettings, TextPart, ToolSpec, UserMessage
from omega_mcp.providers import RetryPolicy
from omega_mcp.proxy.client_requests import ClientRequests
from omega_mcp.proxy.sampling import REFUSED, ProviderSampler, SamplingSettings
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import FIXTURES, client, downstream, downstream_spec, hub

PNG = base64.b64encode(b"\x89PNG fake").decode()
WAV = base64.b64encode(b"RIFF fake").decode()
BASES = {
    "anthropic": "http://llm.test",
    "openai": "http://llm.test/v1",
    "openrouter": "http://llm.test/api/v1",
    "ollama": "http://llm.test",
    "gemini": "http://llm.test",
}


def reply(provider: str, text: str = "the answer", tool: tuple[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Each wire format's answer: `text`, or one call of `tool`."""
    if provider == "anthropic":
        block = {"type": "tool_use", "id": "toolu_9", "name": tool[0], "input": tool[1]} if tool else None
        content = [block] if block else [{"type": "text", "text": text}]
        usage = {"input_tokens": 12, "output_tokens": 3}
        return {"content": content, "stop_reason": "tool_use" if tool else "end_turn", "usage": usage}
    if provider in ("openai", "openrouter"):
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool:
            call = {"id": "c9", "type": "function", "function": {"name": tool[0], "arguments": json.dumps(tool[1])}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"choices": [{"message": message, "finish_reason": "tool_calls" if tool else "stop"}]}
    if provider == "ollama":
        return {"message": {"role": "assistant", "content": text}, "done": True, "done_reason": "stop"}
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}]}


class FakeLLM:
    """An `httpx2.MockTransport` recording each request and answering with the next reply."""

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.transport = httpx2.MockTransport(self.handle)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append((str(request.url), json.loads(request.content)))
        body = self.replies[min(len(self.requests), len(self.replies)) - 1]
        return httpx2.Response(200, json=body)

    @property
    def body(self) -> dict[str, Any]:
        return self.requests[-1][1]


def plain(value: Any) -> Any:
    """`value` without Anthropic's cache breakpoints (the provider's own business, not sampling's)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def system_text(body: dict[str, Any]) -> str:
    system = plain(body["system"])
    return system if isinstance(system, str) else "".join(block["text"] for block in system)


def settings(provider: str = "anthropic", **overrides: Any) -> SamplingSettings:
    values: dict[str, Any] = {
        "provider": provider,
        "model": "model-main",
        "model_fast": "model-fast",
        "model_complex": "model-big",
        "base_url": BASES[provider],
        "api_key": "sk-test",
        "allow": frozenset({"d"}),
    }
    return SamplingSettings(**(values | overrides))


def sampler(fake: FakeLLM, **overrides: Any) -> ProviderSampler:
    return ProviderSampler(settings(**overrides), transport=fake.transport, retry=RetryPolicy(max_retries=0))


def request(*messages: types.SamplingMessage, **options: Any) -> types.CreateMessageRequestParams:
    return types.CreateMessageRequestParams(
        messages=list(messages), max_tokens=options.pop("max_tokens", 300), **options
    )


def user(*content: Any) -> types.SamplingMessage:
    return types.SamplingMessage(role="user", content=list(content))


RICH = request(
    user(types.TextContent(text="what is in it?"), types.ImageContent(data=PNG, mime_type="image/png")),
    system_prompt="You describe images.",
    temperature=0.2,
    stop_sequences=["END"],
    model_preferences=types.ModelPreferences(speed_priority=0.9, intelligence_priority=0.1),
)


async def test_anthropic_gets_model_by_priority_max_tokens_system_temperature_stops_and_the_image():
    fake = FakeLLM(reply("anthropic"))
    async with sampler(fake, max_tokens=200) as s:
        result = await s.sample("d", RICH)
    url, body = fake.requests[0]
    assert url == "http://llm.test/v1/messages"
    assert body["model"] == "model-fast"  # speedPriority high
    assert body["max_tokens"] == 200  # the request's 300, capped by [sampling] max_tokens
    assert system_text(body) == "You describe images."
    assert body["temperature"] == 0.2 and body["stop_sequences"] == ["END"]
    assert plain(body["messages"]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in it?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            ],
        }
    ]
    assert isinstance(result, types.CreateMessageResult)
    assert result.content == types.TextContent(text="the answer")
    assert result.model == "model-fast" and result.stop_reason == "endTurn"


@pytest.mark.parametrize("provider", ["openai", "openrouter", "ollama", "gemini"])
async def test_every_provider_gets_the_same_request_in_its_own_format(provider: str):
    fake = FakeLLM(reply(provider))
    async with sampler(fake, provider=provider, base_url=BASES[provider]) as s:
        result = await s.sample("d", RICH)
    url, body = fake.requests[0]
    assert isinstance(result, types.CreateMessageResult) and result.content == types.TextContent(text="the answer")
    if provider in ("openai", "openrouter"):
        assert url.endswith("/chat/completions") and body["model"] == "model-fast"
        assert body["max_tokens" if provider == "openrouter" else "max_completion_tokens"] == 300
        assert body["temperature"] == 0.2 and body["stop"] == ["END"]
        assert body["messages"][0] == {"role": "system", "content": "You describe images."}
        assert body["messages"][1]["content"] == [
            {"type": "text", "text": "what is in it?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ]
    elif provider == "ollama":
        assert url == "http://llm.test/api/chat" and body["model"] == "model-fast"
        assert body["options"] == {"num_predict": 300, "temperature": 0.2, "stop": ["END"]}
        assert body["messages"][-1] == {"role": "user", "content": "what is in it?", "images": [PNG]}
    else:
        assert url == "http://llm.test/v1beta/models/model-fast:generateContent"
        assert body["generationConfig"] == {"maxOutputTokens": 300, "temperature": 0.2, "stopSequences": ["END"]}
        assert body["systemInstruction"] == {"parts": [{"text": "You describe images."}]}
        assert body["contents"][0]["parts"] == [
            {"text": "what is in it?"},
            {"inlineData": {"mimeType": "image/png", "data": PNG}},
        ]


@pytest.mark.parametrize(
    ("preferences", "model"),
    [
        (types.ModelPreferences(intelligence_priority=0.9, speed_priority=0.2), "model-big"),
        (types.ModelPreferences(speed_priority=0.3, intelligence_priority=0.3), "model-main"),
        (
            types.ModelPreferences(hints=[types.ModelHint(name="nothing-like-it"), types.ModelHint(name="BIG")]),
            "model-big",
        ),
        (None, "model-main"),
    ],
)
async def test_the_model_follows_hints_that_name_a_configured_model_then_the_priorities(
    preferences: types.ModelPreferences | None, model: str
):
    fake = FakeLLM(reply("anthropic"))
    async with sampler(fake) as s:
        await s.sample("d", request(user(types.TextContent(text="hi")), model_preferences=preferences))
    assert fake.body["model"] == model


async def test_tools_tool_use_and_tool_results_map_both_ways():
    fake = FakeLLM(reply("anthropic", tool=("weather", {"city": "Oslo"})))
    weather = types.Tool(name="weather", description="Weather.", input_schema={"type": "object"})
    first = request(
        user(types.TextContent(text="weather?")), tools=[weather], tool_choice=types.ToolChoice(mode="required")
    )
    async with sampler(fake) as s:
        result = await s.sample("d", first)
        assert isinstance(result, types.CreateMessageResultWithTools) and result.stop_reason == "toolUse"
        use = result.content_as_list[0]
        assert isinstance(use, types.ToolUseContent) and use.name == "weather" and use.input == {"city": "Oslo"}
        assert plain(fake.body["tools"])[0]["name"] == "weather" and fake.body["tool_choice"] == {"type": "any"}
        follow_up = request(
            user(types.TextContent(text="weather?")),
            types.SamplingMessage(role="assistant", content=[use]),
            user(types.ToolResultContent(tool_use_id=use.id, content=[types.TextContent(text="12 C")])),
            tools=[weather],
        )
        fake.replies = [reply("anthropic", "It is 12 C.")]
        answer = await s.sample("d", follow_up)
    assert isinstance(answer, types.CreateMessageResultWithTools)
    assert answer.content_as_list == [types.TextContent(text="It is 12 C.")]
    assistant, results = plain(fake.body["messages"][1:])
    assert assistant["content"] == [{"type": "tool_use", "id": use.id, "name": "weather", "input": {"city": "Oslo"}}]
    assert results["content"] == [{"type": "tool_result", "tool_use_id": use.id, "content": "12 C"}]


async def test_a_server_not_in_allow_is_refused_naming_the_setting_and_nothing_is_sent(
    caplog: pytest.LogCaptureFixture,
):
    fake = FakeLLM(reply("anthropic"))
    async with sampler(fake, allow=frozenset({"other"})) as s:
        with caplog.at_level(logging.INFO, logger="omega_mcp"):
            result = await s.sample("d", RICH)
    assert isinstance(result, types.ErrorData) and result.code == REFUSED
    assert "allow" in result.message and "[sampling]" in result.message and '"d"' in result.message
    assert fake.requests == []
    assert any("server d" in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)


async def test_audio_goes_where_the_format_takes_it_and_is_refused_elsewhere():
    audio = request(user(types.AudioContent(data=WAV, mime_type="audio/wav")))
    fake = FakeLLM(reply("openai"))
    async with sampler(fake, provider="openai", base_url=BASES["openai"]) as s:
        await s.sample("d", audio)
    assert fake.body["messages"][0]["content"] == [
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
    ]
    async with sampler(fake) as s:
        refused = await s.sample("d", audio)
    assert isinstance(refused, types.ErrorData) and "takes no audio" in refused.message


async def test_every_answered_request_is_logged_with_the_server_name(caplog: pytest.LogCaptureFixture):
    fake = FakeLLM(reply("anthropic"))
    async with sampler(fake) as s:
        with caplog.at_level(logging.INFO, logger="omega_mcp"):
            await s.sample("d", RICH)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("server d" in line and "anthropic model-fast" in line and "12 tokens in" in line for line in lines)


async def test_a_provider_failure_is_a_json_rpc_error_naming_the_server():
    fake = FakeLLM({"type": "error", "error": {"type": "invalid_request_error", "message": "bad model"}})
    fake.transport = httpx2.MockTransport(lambda r: httpx2.Response(400, json=fake.replies[0]))
    async with sampler(fake) as s:
        result = await s.sample("d", RICH)
    assert isinstance(result, types.ErrorData) and result.code == types.INTERNAL_ERROR
    assert "server d" in result.message and "bad model" in result.message


async def test_a_model_refusing_temperature_is_asked_again_without_it():
    refusal = {"error": {"message": "Unsupported value: 'temperature' does not support 0.2 with this model."}}
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return httpx2.Response(400, json=refusal) if len(bodies) == 1 else httpx2.Response(200, json=reply("openai"))

    fake = FakeLLM()
    fake.transport = httpx2.MockTransport(handle)
    async with sampler(fake, provider="openai", base_url=BASES["openai"]) as s:
        result = await s.sample("d", RICH)
    assert isinstance(result, types.CreateMessageResult) and result.content == types.TextContent(text="the answer")
    assert bodies[0]["temperature"] == 0.2 and bodies[0]["stop"] == ["END"]
    assert "temperature" not in bodies[1] and "stop" not in bodies[1]


async def test_anthropic_api_version_2026_10_21_is_sent_no_temperature():
    fake = FakeLLM(reply("anthropic"))
    async with sampler(fake, anthropic_version="2026-10-21") as s:
        await s.sample("d", RICH)
    assert "temperature" not in fake.body and fake.body["stop_sequences"] == ["END"]


def _body(provider: str, messages: list[UserMessage], settings: RequestSettings | None = None) -> dict[str, Any]:
    """The request body `provider`'s own module builds, with one tool offered."""
    module = importlib.import_module(f"omega_mcp.providers.{provider}")
    tools = module.wire_tools([ToolSpec("t", "a tool", {"type": "object", "properties": {}})])
    return module.build_request(model="m", system=None, messages=messages, tools=tools, settings=settings)


@pytest.mark.parametrize(
    ("provider", "required", "none"),
    [
        ("anthropic", {"tool_choice": {"type": "any"}}, {"tool_choice": {"type": "none"}}),
        ("openai", {"tool_choice": "required"}, {"tool_choice": "none"}),
        (
            "gemini",
            {"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}},
            {"toolConfig": {"functionCallingConfig": {"mode": "NONE"}}},
        ),
        ("ollama", {}, {"tools": None}),  # no tool_choice in its format: "none" offers no tools
    ],
)
def test_tool_choice_in_each_format(provider: str, required: dict[str, Any], none: dict[str, Any]):
    choices: list[tuple[Literal["required", "none"], dict[str, Any]]] = [("required", required), ("none", none)]
    for choice, expected in choices:
        out = _body(provider, [UserMessage("hi")], RequestSettings(tool_choice=choice))
        for key, value in expected.items():
            assert out.get(key) == value
    plain = _body(provider, [UserMessage("hi")])
    assert "tool_choice" not in plain and "toolConfig" not in plain and plain["tools"]


@pytest.mark.parametrize("provider", ["anthropic", "openai", "gemini", "ollama"])
def test_media_parts_keep_their_place_in_each_format(provider: str):
    message = UserMessage.of((TextPart("look at"), ImagePart("image/png", PNG), TextPart("and say")))
    assert message.text == "look at\n\nand say"
    body = _body(provider, [message])
    if provider == "ollama":  # text in `content`, images beside it
        assert body["messages"][-1] == {"role": "user", "content": "look at\n\nand say", "images": [PNG]}
        return
    content = body["contents"][-1]["parts"] if provider == "gemini" else body["messages"][-1]["content"]
    kinds = [next(iter(block)) if provider == "gemini" else block["type"] for block in content]
    image = {"anthropic": "image", "openai": "image_url", "gemini": "inlineData"}[provider]
    assert kinds == ["text", image, "text"]
    if provider == "anthropic":  # the cache breakpoint stays on the message's last block
        assert content[-1]["cache_control"] == {"type": "ephemeral"} and "cache_control" not in content[1]


def test_a_plain_text_user_message_stays_a_string():
    assert UserMessage.of((TextPart("a"), TextPart("b"))) == UserMessage("a\n\nb")


# -- through the hub ---------------------------------------------------------------------------


def sampling_server() -> Any:
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        message = types.SamplingMessage(role="user", content=types.TextContent(text="summarize"))
        params_ = types.CreateMessageRequestParams(messages=[message], max_tokens=50, temperature=0.5)
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        try:
            result = await ctx.session.send_request(
                types.CreateMessageRequest(params=params_), types.CreateMessageResult, metadata=metadata
            )
        except MCPError as exc:
            return types.CallToolResult(content=[types.TextContent(text=f"error {exc.code}: {exc.message}")])
        assert isinstance(result.content, types.TextContent)
        return types.CallToolResult(content=[types.TextContent(text=f"{result.model}: {result.content.text}")])

    return downstream("d", call=call)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def client_sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(text="from the client"), model="c")


@pytest.mark.parametrize(
    ("mode", "client_can_sample", "expected"),
    [
        ("fallback", False, "model-main: the answer"),
        ("fallback", True, "c: from the client"),
        ("always", True, "model-main: the answer"),
    ],
)
async def test_through_the_hub_the_provider_answers_when_the_client_cannot_or_always(
    rwx_policy: SandboxPolicy, mode: str, client_can_sample: bool, expected: str
):
    fake = FakeLLM(reply("anthropic"))
    async with sampler(fake, mode=mode) as s:
        requests = ClientRequests(sampler=s)
        async with hub(rwx_policy, downstream_spec("d", sampling_server()), client_requests=requests) as (_, _, omega):
            callbacks: dict[str, Any] = {"sampling_callback": client_sampling} if client_can_sample else {}
            async with client(omega, **callbacks) as c:
                result = await c.call_tool("mcp__d__echo", {"text": "x"})
    assert text_of(result) == expected
    assert len(fake.requests) == (0 if expected.startswith("c:") else 1)
    if fake.requests:
        assert fake.body["temperature"] == 0.5 and fake.body["max_tokens"] == 50


async def test_through_the_hub_a_server_outside_allow_gets_the_refusal(rwx_policy: SandboxPolicy):
    fake = FakeLLM(reply("anthropic"))
    async with sampler(fake, allow=frozenset()) as s:
        requests = ClientRequests(sampler=s)
        async with hub(rwx_policy, downstream_spec("d", sampling_server()), client_requests=requests) as (_, _, omega):
            async with client(omega) as c:
                result = await c.call_tool("mcp__d__echo", {"text": "x"})
    assert text_of(result).startswith(f"error {REFUSED}: server d may not use omega's [sampling] provider")


# -- [sampling] in servers.toml --------------------------------------------------------------


def config_with(tmp_path: Path, sampling: str) -> Any:
    path = tmp_path / "servers.toml"
    path.write_text(f"[sampling]\n{sampling}\n")
    return load_config(path)


async def test_sampling_settings_resolve_like_the_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    config = config_with(tmp_path, 'provider = "anthropic"\nmodel_fast = "quick"\nallow = ["d"]\nmode = "always"')
    found = sampler_for(config)
    assert found is not None and found.settings is not None
    async with found:
        resolved = found.settings
        assert (resolved.provider, resolved.api_key, resolved.base_url) == (
            "anthropic",
            "sk-env",
            "http://127.0.0.1:9/",
        )
        assert (resolved.model, resolved.model_fast, resolved.model_complex) == (
            "claude-sonnet-4-6",
            "quick",
            "claude-sonnet-4-6",
        )
        assert resolved.allow == {"d"} and found.always
    assert sampler_for(config_with(tmp_path, 'allow = ["d"]')) is None  # no provider: nothing answers


async def test_an_unusable_sampling_config_refuses_every_request_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("MY_KEY", raising=False)
    found = sampler_for(config_with(tmp_path, 'provider = "openai"\napi_key_env = "MY_KEY"\nallow = ["d"]'))
    assert found is not None and found.settings is None
    async with found:
        result = await found.sample("d", RICH)
    assert isinstance(result, types.ErrorData) and result.code == REFUSED
    assert "MY_KEY is not set" in result.message and "sampling.api_key_env" in result.message


# -- through the real CLI ----------------------------------------------------------------------


@pytest.fixture
def fake_openai() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI-format provider on 127.0.0.1: its base URL, and the bodies it received."""
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers.get("content-length", "0")))))
            payload = json.dumps(reply("openai", "summary from the provider")).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.e2e
async def test_through_the_cli_a_client_that_cannot_sample_gets_the_providers_answer(
    tmp_path: Path, fake_openai: tuple[str, list[dict[str, Any]]]
):
    url, bodies = fake_openai
    ws, markers = tmp_path / "ws", tmp_path / "markers"
    ws.mkdir()
    markers.mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n\n'
        f'[servers.s]\ncommand = "{sys.executable}"\nargs = ["{FIXTURES / "asking_server.py"}", "{markers}"]\n\n'
        f'[sampling]\nprovider = "openai"\nbase_url = "{url}"\nmodel = "gpt-test"\nallow = ["s"]\n'
    )
    env = cli_env(tmp_path) | {"OPENAI_API_KEY": "sk-test", "NO_PROXY": "127.0.0.1"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "omega_mcp", "serve", "--config", str(config)], env=env, cwd=tmp_path
    )
    async with mcp.Client(params, mode="legacy") as c:
        await c.list_tools()
        result = await c.call_tool("mcp__s__ask", {"text": "summarize this"})
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    answer, roots, _ = block.text.split(" | ")
    assert answer == "summary from the provider"
    assert roots == ""  # the client has no roots: nor has the downstream (omega never substitutes its workspace)
    (body,) = bodies
    assert body["model"] == "gpt-test" and body["max_completion_tokens"] == 20 and body["temperature"] == 0.3
    assert body["messages"] == [{"role": "user", "content": "summarize this"}]
