"""OpenAI Chat Completions and OpenRouter adapter: wire JSON both ways, traps, errors."""

from __future__ import annotations

import json
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
from omega_mcp.providers.openai import OpenAIProvider

NO_WAIT = RetryPolicy(initial_backoff_seconds=0, jitter=0)

READ_TOOL = ToolSpec(
    "read",
    "Read a file",
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"file_path": {"type": "string"}},
        "required": ["file_path"],
    },
)
LIST_TOOL = ToolSpec("mcp__fs__list", "List", {"type": "object"})


def completion(message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-5.4",
        "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **message}}],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


async def test_first_request_matches_the_wire_format_and_the_spec(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=completion({"content": "hi", "refusal": None})))
    provider = OpenAIProvider(api_key="sk-test", client=fake.client, retry=NO_WAIT)
    response = await provider.request(
        model="gpt-5.4", system="Be brief.", messages=[UserMessage("hello")], tools=[READ_TOOL, LIST_TOOL]
    )
    assert response.message.text == "hi"
    request = fake.requests[0]
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = fake.bodies[0]
    assert body == {
        "model": "gpt-5.4",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read a file",
                    "parameters": {
                        "type": "object",
                        "properties": {"file_path": {"type": "string"}},
                        "required": ["file_path"],
                    },
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "mcp__fs__list",
                    "description": "List",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
    }
    check_request("openai", body)


async def test_no_tools_means_no_tools_key_and_no_sampling_parameters(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=completion({"content": "ok"})))
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    await provider.request(model="o3", system=None, messages=[UserMessage("x")], tools=[])
    body = fake.bodies[0]
    assert set(body) == {"model", "messages"}
    check_request("openai", body)


async def test_tool_calls_are_found_even_when_finish_reason_says_stop(fake_http) -> None:
    calls = [{"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"file_path": "/x"}'}}]
    fake = fake_http(httpx2.Response(200, json=completion({"content": None, "tool_calls": calls}, finish="stop")))
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[READ_TOOL])
    assert response.message.tool_calls == (ToolCallPart("call_a", "read", {"file_path": "/x"}),)
    assert response.finish_reason == "stop"


async def test_unparsable_string_arguments_are_kept_as_an_error_not_raised(fake_http) -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"file_path": '}},
        {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "[1, 2]"}},
        {"id": "c3", "type": "function", "function": {"name": "mcp__fs__list", "arguments": ""}},
    ]
    fake = fake_http(httpx2.Response(200, json=completion({"content": None, "tool_calls": calls}, "tool_calls")))
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[READ_TOOL])
    first, second, third = response.message.tool_calls
    assert first.arguments is None and "not valid JSON" in (first.arguments_error or "")
    assert second.arguments is None and "must be a JSON object" in (second.arguments_error or "")
    assert third.arguments == {} and third.arguments_error is None


async def test_history_echoes_the_assistant_message_verbatim_and_one_tool_message_per_call(
    fake_http, check_request
) -> None:
    # Odd spacing in the argument string must survive the round trip untouched.
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{ "file_path":"/a" }'}},
        {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": '{"file_path": "/b"}'}},
    ]
    first = completion({"content": "Reading both.", "tool_calls": calls, "refusal": None}, "tool_calls")
    fake = fake_http(httpx2.Response(200, json=first), httpx2.Response(200, json=completion({"content": "done"})))
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    history: list[Any] = [UserMessage("read /a and /b")]
    response = await provider.request(model="m", system=None, messages=history, tools=[READ_TOOL])
    history.append(response.message)
    history.append(
        ToolResultsMessage(
            (
                ToolResult("call_1", "read", (TextPart("alpha"), ImagePart("image/png", "aGVsbG8="))),
                ToolResult("call_2", "read", (TextPart("ENOENT: /b"),), is_error=True),
            )
        )
    )
    await provider.request(model="m", system=None, messages=history, tools=[READ_TOOL])
    body = fake.bodies[1]
    assert body["messages"][1] == {"role": "assistant", "content": "Reading both.", "tool_calls": calls}
    assert body["messages"][2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "alpha\n[image: image/png, 5 bytes]"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: ENOENT: /b"},
        {  # a tool message takes text only: the image follows the tool messages as user content
            "role": "user",
            "content": [
                {"type": "text", "text": "The image returned by read (call_1):"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}},
            ],
        },
    ]
    check_request("openai", body)


async def test_history_from_another_provider_is_rebuilt_with_string_arguments_and_matching_ids(
    fake_http, check_request
) -> None:
    fake = fake_http(httpx2.Response(200, json=completion({"content": "ok"})))
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    foreign = AssistantMessage(
        (ThinkingPart("hmm"), ToolCallPart(None, "read", {"file_path": "/a"})), raw={"parts": []}, raw_format="gemini"
    )
    results = ToolResultsMessage((ToolResult(None, "read", (TextPart("alpha"),)),))
    await provider.request(model="m", system=None, messages=[UserMessage("x"), foreign, results], tools=[READ_TOOL])
    messages = fake.bodies[0]["messages"]
    call = messages[1]["tool_calls"][0]
    assert call["function"] == {"name": "read", "arguments": '{"file_path": "/a"}'}
    assert messages[2]["tool_call_id"] == call["id"]
    check_request("openai", fake.bodies[0])


async def test_usage_counts_cached_prompt_tokens_once(fake_http) -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 40},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    fake = fake_http(httpx2.Response(200, json=completion({"content": "ok"}, usage=usage)))
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.cache_read_tokens) == (
        100,
        20,
        40,
    )
    assert response.usage.cost is None


async def test_openrouter_uses_its_base_url_attribution_header_and_reports_cost(fake_http) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "cost": 0.0012}
    fake = fake_http(httpx2.Response(200, json=completion({"content": "ok"}, usage=usage)))
    provider = OpenAIProvider(
        api_key="sk-or", base_url="https://openrouter.ai/api/v1/", flavor="openrouter", max_tokens=50,
        client=fake.client, retry=NO_WAIT,
    )  # fmt: skip
    response = await provider.request(
        model="anthropic/claude-sonnet-4.5", system=None, messages=[UserMessage("x")], tools=[]
    )
    request = fake.requests[0]
    assert str(request.url) == "https://openrouter.ai/api/v1/chat/completions"
    assert request.headers["x-title"] == "omega-mcp"
    assert fake.bodies[0]["max_tokens"] == 50
    assert response.usage.cost == pytest.approx(0.0012)


async def test_openai_sends_max_completion_tokens_only_when_configured(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=completion({"content": "ok"})))
    provider = OpenAIProvider(api_key="k", max_tokens=64, client=fake.client, retry=NO_WAIT)
    await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert fake.bodies[0]["max_completion_tokens"] == 64
    assert "max_tokens" not in fake.bodies[0]
    check_request("openai", fake.bodies[0])


async def test_openrouter_reasoning_details_are_echoed_unchanged(fake_http) -> None:
    details = [{"type": "reasoning.encrypted", "data": "opaque==", "id": "r1", "format": "anthropic-claude-v1"}]
    calls = [{"id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]
    message = {"content": "", "reasoning": "thinking...", "reasoning_details": details, "tool_calls": calls}
    fake = fake_http(
        httpx2.Response(200, json=completion(message, "tool_calls")),
        httpx2.Response(200, json=completion({"content": "ok"})),
    )
    provider = OpenAIProvider(api_key="k", flavor="openrouter", client=fake.client, retry=NO_WAIT)
    first = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[READ_TOOL])
    assert first.message.parts[0] == ThinkingPart("thinking...")
    results = ToolResultsMessage((ToolResult("toolu_1", "read", (TextPart("a"),)),))
    await provider.request(
        model="m", system=None, messages=[UserMessage("x"), first.message, results], tools=[READ_TOOL]
    )
    echoed = fake.bodies[1]["messages"][1]
    assert echoed["reasoning_details"] == details
    assert echoed["tool_calls"] == calls


async def test_openrouter_error_inside_a_200_is_an_error_with_its_message(fake_http) -> None:
    body = {"error": {"code": 400, "message": "Provider returned error", "metadata": {"raw": "bad tool"}}}
    fake = fake_http(httpx2.Response(200, json=body))
    provider = OpenAIProvider(api_key="k", flavor="openrouter", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match="Provider returned error"):
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert len(fake.requests) == 1


async def test_openrouter_transient_error_inside_a_200_is_retried(fake_http) -> None:
    busy = {"error": {"code": 502, "message": "upstream down"}}
    fake = fake_http(httpx2.Response(200, json=busy), httpx2.Response(200, json=completion({"content": "ok"})))
    provider = OpenAIProvider(api_key="k", flavor="openrouter", client=fake.client, retry=NO_WAIT)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert response.message.text == "ok"
    assert len(fake.requests) == 2


async def test_finish_reason_error_is_reported(fake_http) -> None:
    data = completion({"content": ""}, finish="error")
    data["choices"][0]["error"] = {"message": "stream interrupted", "code": 500}
    fake = fake_http(httpx2.Response(200, json=data))
    provider = OpenAIProvider(api_key="k", flavor="openrouter", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match="stream interrupted"):
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])


async def test_invalid_key_is_an_auth_error_with_the_providers_message_and_no_retry(fake_http) -> None:
    error = {
        "error": {
            "message": "Incorrect API key provided: sk-bad.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    fake = fake_http(httpx2.Response(401, json=error))
    provider = OpenAIProvider(api_key="sk-bad", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderAuthError, match="Incorrect API key provided") as info:
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert info.value.status_code == 401
    assert len(fake.requests) == 1


async def test_insufficient_quota_429_is_not_retried(fake_http) -> None:
    error = {
        "error": {
            "message": "You exceeded your current quota",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    fake = fake_http(httpx2.Response(429, json=error))
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderAuthError, match="exceeded your current quota"):
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert len(fake.requests) == 1


async def test_tools_json_stays_byte_identical_across_turns(fake_http) -> None:
    fake = fake_http(
        httpx2.Response(200, json=completion({"content": "a"})), httpx2.Response(200, json=completion({"content": "b"}))
    )
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    tools = (READ_TOOL, LIST_TOOL)
    await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=tools)
    await provider.request(model="m", system=None, messages=[UserMessage("y")], tools=tools)
    dumps = [json.dumps(body["tools"]) for body in fake.bodies]
    assert dumps[0] == dumps[1]


async def test_unparsable_arguments_are_replayed_as_an_empty_object_so_the_history_stays_valid(
    fake_http, check_request
) -> None:
    # vLLM, llama.cpp and OpenRouter's Anthropic route parse historical arguments: replaying the
    # broken string would make every later request of the run fail with a 400.
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"file_path": '}},
        {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "[1, 2]"}},
        {"id": "c3", "type": "function", "function": {"name": "read", "arguments": '{ "file_path":"/a" }'}},
    ]
    fake = fake_http(
        httpx2.Response(200, json=completion({"content": None, "tool_calls": calls}, "tool_calls")),
        httpx2.Response(200, json=completion({"content": "done"})),
    )
    provider = OpenAIProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    history: list[Any] = [UserMessage("x")]
    response = await provider.request(model="m", system=None, messages=history, tools=[READ_TOOL])
    results = tuple(
        ToolResult(c.id, c.name, (TextPart("r"),), is_error=c.arguments is None) for c in response.message.tool_calls
    )
    history += [response.message, ToolResultsMessage(results)]
    await provider.request(model="m", system=None, messages=history, tools=[READ_TOOL])
    echoed = fake.bodies[1]["messages"][1]["tool_calls"]
    assert [c["function"]["arguments"] for c in echoed] == ["{}", "{}", '{ "file_path":"/a" }']
    assert [c["id"] for c in echoed] == ["c1", "c2", "c3"]
    check_request("openai", fake.bodies[1])
    assert response.message.tool_calls[0].arguments_error  # the model is still told what was wrong
