"""Anthropic Messages adapter: wire JSON both ways, thinking echo, tool_result shape, errors."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from omega_mcp.errors import ProviderAuthError, ProviderHTTPError
from omega_mcp.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    UserMessage,
)
from omega_mcp.providers import RetryPolicy
from omega_mcp.providers.anthropic import AnthropicProvider

NO_WAIT = RetryPolicy(initial_backoff_seconds=0, jitter=0)
WRITE_TOOL = ToolSpec(
    "write",
    "Write a file",
    {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
        "additionalProperties": False,
    },
)


def message(
    content: list[dict[str, Any]], stop: str = "end_turn", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 4},
    }


async def test_first_request_has_max_tokens_version_header_and_top_level_system(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=message([{"type": "text", "text": "hi", "citations": None}])))
    provider = AnthropicProvider(api_key="sk-ant", client=fake.client, retry=NO_WAIT)
    response = await provider.request(
        model="claude-sonnet-4-6", system="Be brief.", messages=[UserMessage("hello")], tools=[WRITE_TOOL]
    )
    assert response.message.text == "hi"
    request = fake.requests[0]
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant"
    assert request.headers["anthropic-version"] == "2023-06-01"
    body = fake.bodies[0]
    cache = {"type": "ephemeral"}
    assert body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 8192,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": cache}]}],
        "system": [{"type": "text", "text": "Be brief.", "cache_control": cache}],
        "tools": [
            {
                "name": "write",
                "description": "Write a file",
                "input_schema": dict(WRITE_TOOL.input_schema),
                "cache_control": cache,
            }
        ],
    }
    for sampling in ("temperature", "top_p", "top_k", "tool_choice"):
        assert sampling not in body
    check_request("anthropic", body)


async def test_anthropic_version_and_max_tokens_are_configurable(fake_http) -> None:
    fake = fake_http(httpx2.Response(200, json=message([{"type": "text", "text": "ok"}])))
    provider = AnthropicProvider(
        api_key="k", anthropic_version="2026-10-21", max_tokens=1000, base_url="http://127.0.0.1:9/", client=fake.client
    )
    await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert fake.requests[0].headers["anthropic-version"] == "2026-10-21"
    assert str(fake.requests[0].url) == "http://127.0.0.1:9/v1/messages"
    assert fake.bodies[0]["max_tokens"] == 1000
    assert "tools" not in fake.bodies[0] and "system" not in fake.bodies[0]


async def test_thinking_blocks_are_echoed_verbatim_and_results_come_first_in_one_user_message(
    fake_http, check_request
) -> None:
    content = [
        {"type": "thinking", "thinking": "Two files.", "signature": "EqQBCkgIARABGAIiQL2sig=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
        {"type": "text", "text": "Writing both.", "citations": None},
        {"type": "tool_use", "id": "toolu_01A", "name": "write", "input": {"file_path": "a", "content": "1"}},
        {"type": "tool_use", "id": "toolu_01B", "name": "write", "input": {"file_path": "b", "content": "2"}},
    ]
    fake = fake_http(
        httpx2.Response(200, json=message(content, stop="tool_use")),
        httpx2.Response(200, json=message([{"type": "text", "text": "done"}])),
    )
    provider = AnthropicProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    first = await provider.request(model="m", system="s", messages=[UserMessage("go")], tools=[WRITE_TOOL])
    assert first.message.parts[:2] == (
        ThinkingPart("Two files.", signature="EqQBCkgIARABGAIiQL2sig=="),
        ThinkingPart("", redacted_data="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"),
    )
    assert [c.id for c in first.message.tool_calls] == ["toolu_01A", "toolu_01B"]
    results = ToolResultsMessage(
        (
            ToolResult("toolu_01A", "write", (TextPart("wrote 1 byte"), ImagePart("image/png", "iVBORw0KGgo="))),
            ToolResult("toolu_01B", "write", (TextPart("denied: b"),), is_error=True),
        )
    )
    await provider.request(
        model="m", system="s", messages=[UserMessage("go"), first.message, results], tools=[WRITE_TOOL]
    )
    body = fake.bodies[1]
    assert body["messages"][1] == {"role": "assistant", "content": content}
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A",
                "content": [
                    {"type": "text", "text": "wrote 1 byte"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ],
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01B",
                "content": "denied: b",
                "is_error": True,
                "cache_control": {"type": "ephemeral"},
            },
        ],
    }
    check_request("anthropic", body)


async def test_foreign_history_is_rebuilt_without_unsigned_thinking_and_with_safe_ids(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=message([{"type": "text", "text": "ok"}])))
    provider = AnthropicProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    foreign = AssistantMessage((ThinkingPart("plan"), TextPart(""), ToolCallPart("call.1:x", "write", None, "bad")))
    results = ToolResultsMessage((ToolResult("call.1:x", "write", (TextPart(""),), is_error=True),))
    await provider.request(model="m", system=None, messages=[UserMessage("x"), foreign, results], tools=[WRITE_TOOL])
    messages = fake.bodies[0]["messages"]
    assert messages[1]["content"] == [{"type": "tool_use", "id": "call_1_x", "name": "write", "input": {}}]
    assert messages[2]["content"][0]["tool_use_id"] == "call_1_x"
    assert messages[2]["content"][0]["content"] == "(no output)"
    check_request("anthropic", fake.bodies[0])


async def test_a_tool_call_cut_off_by_max_tokens_is_an_error_not_a_call(fake_http) -> None:
    cut = [{"type": "tool_use", "id": "toolu_1", "name": "write", "input": {"file_path": "a"}}]
    fake = fake_http(httpx2.Response(200, json=message(cut, stop="max_tokens")))
    provider = AnthropicProvider(api_key="k", max_tokens=100, client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match=r"max_tokens \(100\)"):
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[WRITE_TOOL])


async def test_usage_adds_cache_reads_and_writes_to_input(fake_http) -> None:
    usage = {"input_tokens": 10, "output_tokens": 7, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 50}
    fake = fake_http(httpx2.Response(200, json=message([{"type": "text", "text": "ok"}], usage=usage)))
    provider = AnthropicProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert response.usage.input_tokens == 160
    assert (response.usage.cache_write_tokens, response.usage.cache_read_tokens, response.usage.output_tokens) == (
        100,
        50,
        7,
    )


async def test_overloaded_529_is_retried(fake_http) -> None:
    overloaded = {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_1",
    }
    fake = fake_http(
        httpx2.Response(529, json=overloaded), httpx2.Response(200, json=message([{"type": "text", "text": "ok"}]))
    )
    provider = AnthropicProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert response.message.text == "ok"
    assert len(fake.requests) == 2


async def test_spend_limit_429_is_not_retried(fake_http) -> None:
    body = {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "Spend limit reached",
            "details": {"error_code": "enforced_spend_limit_reached"},
        },
    }
    fake = fake_http(httpx2.Response(429, json=body))
    provider = AnthropicProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderAuthError, match="Spend limit reached"):
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert len(fake.requests) == 1


async def test_validation_error_shows_the_providers_message_without_retry(fake_http) -> None:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.1: `tool_use` ids were found without `tool_result` blocks",
        },
    }
    fake = fake_http(httpx2.Response(400, json=body))
    provider = AnthropicProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match=r"HTTP 400.*invalid_request_error: messages.1: `tool_use` ids") as info:
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert not isinstance(info.value, ProviderAuthError)
    assert len(fake.requests) == 1
