"""Gemini generateContent adapter: roles, functionCall/functionResponse, thought signatures, errors."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from omega_mcp.errors import ProviderHTTPError
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
from omega_mcp.providers.gemini import GeminiProvider

NO_WAIT = RetryPolicy(initial_backoff_seconds=0, jitter=0)
READ_TOOL = ToolSpec(
    "read",
    "Read a file",
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"file_path": {"type": "string", "title": "File Path"}, "limit": {"type": ["integer", "null"]}},
        "required": ["file_path"],
    },
)


def generated(parts: list[dict[str, Any]], finish: str = "STOP", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": usage or {"promptTokenCount": 20, "candidatesTokenCount": 4, "totalTokenCount": 24},
        "modelVersion": "gemini-3-pro",
        "responseId": "r1",
    }


async def test_request_uses_model_url_key_header_system_instruction_and_json_schema(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=generated([{"text": "hi"}])))
    provider = GeminiProvider(api_key="g-key", client=fake.client, retry=NO_WAIT)
    response = await provider.request(
        model="models/gemini-2.5-flash", system="Be brief.", messages=[UserMessage("hello")], tools=[READ_TOOL]
    )
    assert response.message.text == "hi"
    request = fake.requests[0]
    assert (
        str(request.url) == "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert request.headers["x-goog-api-key"] == "g-key"
    body = fake.bodies[0]
    assert body == {
        "contents": [{"role": "user", "parts": [{"text": "hello"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "read",
                        "description": "Read a file",
                        "parametersJsonSchema": {
                            "type": "object",
                            "properties": {
                                "file_path": {"type": "string"},
                                "limit": {"type": "integer", "nullable": True},
                            },
                            "required": ["file_path"],
                        },
                    }
                ]
            }
        ],
    }
    check_request("gemini", body)


async def test_function_calls_under_stop_are_detected_and_signatures_echoed_on_their_part(
    fake_http, check_request
) -> None:
    parts = [
        {"text": "Summary of my plan", "thought": True},
        {
            "functionCall": {"id": "a1b2", "name": "read", "args": {"file_path": "/x"}},
            "thoughtSignature": "CiQBzGm+base64==",
        },
        {"functionCall": {"name": "read", "args": {"file_path": "/y"}}},
    ]
    fake = fake_http(
        httpx2.Response(200, json=generated(parts, finish="STOP")),
        httpx2.Response(200, json=generated([{"text": "done"}])),
    )
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    first = await provider.request(model="gemini-3-pro", system=None, messages=[UserMessage("go")], tools=[READ_TOOL])
    assert first.finish_reason == "STOP"
    assert first.message.parts == (
        ThinkingPart("Summary of my plan"),
        ToolCallPart("a1b2", "read", {"file_path": "/x"}),
        ToolCallPart(None, "read", {"file_path": "/y"}),
    )
    results = ToolResultsMessage(
        (
            ToolResult("a1b2", "read", (TextPart("text x"),)),
            ToolResult(None, "read", (TextPart("ENOENT"),), is_error=True),
        )
    )
    await provider.request(
        model="gemini-3-pro", system=None, messages=[UserMessage("go"), first.message, results], tools=[READ_TOOL]
    )
    body = fake.bodies[1]
    assert body["contents"][1] == {"role": "model", "parts": parts}
    assert body["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "read", "response": {"output": "text x"}, "id": "a1b2"}},
            {"functionResponse": {"name": "read", "response": {"error": "ENOENT"}}},
        ],
    }
    check_request("gemini", body)


async def test_turn_from_another_provider_gets_the_dummy_signature_on_its_first_call(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=generated([{"text": "ok"}])))
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    foreign = AssistantMessage(
        (
            TextPart("Reading."),
            ToolCallPart("toolu_1", "read", {"file_path": "a"}),
            ToolCallPart("toolu_2", "read", {"file_path": "b"}),
        ),
        raw={"role": "assistant", "content": []},
        raw_format="anthropic",
    )
    results = ToolResultsMessage(tuple(ToolResult(f"toolu_{i}", "read", (TextPart("x"),)) for i in (1, 2)))
    await provider.request(model="m", system=None, messages=[UserMessage("go"), foreign, results], tools=[READ_TOOL])
    model_parts = fake.bodies[0]["contents"][1]["parts"]
    assert model_parts[0] == {"text": "Reading."}
    assert model_parts[1]["thoughtSignature"] == "skip_thought_signature_validator"
    assert "thoughtSignature" not in model_parts[2]
    check_request("gemini", fake.bodies[0])


async def test_usage_counts_thoughts_as_output(fake_http) -> None:
    usage = {
        "promptTokenCount": 120,
        "candidatesTokenCount": 15,
        "thoughtsTokenCount": 40,
        "cachedContentTokenCount": 100,
    }
    fake = fake_http(httpx2.Response(200, json=generated([{"text": "ok"}], usage=usage)))
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.cache_read_tokens) == (
        120,
        55,
        100,
    )


async def test_blocked_prompt_is_an_error_naming_the_reason(fake_http) -> None:
    fake = fake_http(httpx2.Response(200, json={"promptFeedback": {"blockReason": "SAFETY"}}))
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match=r"blocked.*SAFETY"):
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])


async def test_malformed_function_call_without_content_is_an_error(fake_http) -> None:
    data = {
        "candidates": [
            {"finishReason": "MALFORMED_FUNCTION_CALL", "finishMessage": "Malformed function call: read(", "index": 0}
        ]
    }
    fake = fake_http(httpx2.Response(200, json=data))
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match=r"MALFORMED_FUNCTION_CALL.*read\("):
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[READ_TOOL])


async def test_rate_limit_honors_retry_info_delay(fake_http) -> None:
    error = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}],
        }
    }
    fake = fake_http(httpx2.Response(429, json=error), httpx2.Response(200, json=generated([{"text": "ok"}])))
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT, sleep=sleep)
    response = await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert response.message.text == "ok"
    assert delays == [1.5]


async def test_invalid_argument_shows_googles_message(fake_http) -> None:
    message = "Invalid JSON payload received. Unknown name \"$schema\" at 'tools[0].function_declarations[0]'"
    error = {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    fake = fake_http(httpx2.Response(400, json=error))
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError) as info:
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    assert "INVALID_ARGUMENT" in str(info.value) and 'Unknown name "$schema"' in str(info.value)
    assert len(fake.requests) == 1


async def test_no_tools_sends_no_tools_key(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=generated([{"text": "ok"}])))
    provider = GeminiProvider(api_key="k", max_tokens=256, client=fake.client, retry=NO_WAIT)
    await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=[])
    body = fake.bodies[0]
    assert "tools" not in body and body["generationConfig"] == {"maxOutputTokens": 256}
    assert json.dumps(body).count("systemInstruction") == 0
    check_request("gemini", body)


IMAGE_RESULTS = ToolResultsMessage(
    (
        ToolResult("a1", "read", (TextPart("a.png: PNG image, 5 bytes"), ImagePart("image/png", "aGVsbG8="))),
        ToolResult("a2", "read", (TextPart("text"),)),
    )
)
CALLS = AssistantMessage(
    (ToolCallPart("a1", "read", {"file_path": "a.png"}), ToolCallPart("a2", "read", {"file_path": "b"})),
    raw={
        "role": "model",
        "parts": [
            {"functionCall": {"id": "a1", "name": "read", "args": {"file_path": "a.png"}}},
            {"functionCall": {"id": "a2", "name": "read", "args": {"file_path": "b"}}},
        ],
    },
    raw_format="gemini",
)


async def test_gemini_3_gets_a_tool_result_image_inside_its_function_response(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=generated([{"text": "a red square"}])))
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    history = [UserMessage("look"), CALLS, IMAGE_RESULTS]
    await provider.request(model="gemini-3-pro-preview", system=None, messages=history, tools=[READ_TOOL])
    body = fake.bodies[0]
    first, second = body["contents"][2]["parts"]
    assert first["functionResponse"]["parts"] == [{"inlineData": {"mimeType": "image/png", "data": "aGVsbG8="}}]
    assert first["functionResponse"]["response"] == {"output": "a.png: PNG image, 5 bytes\n[image: image/png, 5 bytes]"}
    assert "parts" not in second["functionResponse"]
    check_request("gemini", body)


async def test_older_gemini_gets_a_tool_result_image_after_the_function_responses(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=generated([{"text": "a red square"}])))
    provider = GeminiProvider(api_key="k", client=fake.client, retry=NO_WAIT)
    history = [UserMessage("look"), CALLS, IMAGE_RESULTS]
    await provider.request(model="models/gemini-2.5-flash", system=None, messages=history, tools=[READ_TOOL])
    body = fake.bodies[0]
    parts = body["contents"][2]["parts"]
    assert [next(iter(part)) for part in parts] == ["functionResponse", "functionResponse", "text", "inlineData"]
    assert "parts" not in parts[0]["functionResponse"]
    assert parts[2] == {"text": "The image read returned:"}
    assert parts[3] == {"inlineData": {"mimeType": "image/png", "data": "aGVsbG8="}}
    check_request("gemini", body)
