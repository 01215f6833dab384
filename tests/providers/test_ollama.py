"""Ollama native /api/chat adapter: stream off, object arguments, results matched without ids."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from omega_mcp.errors import ProviderHTTPError
from omega_mcp.messages import (
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
from omega_mcp.providers.ollama import OllamaProvider

NO_WAIT = RetryPolicy(initial_backoff_seconds=0, jitter=0)
BASH_TOOL = ToolSpec(
    "bash", "Run a command", {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
)


def chat(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "qwen3",
        "created_at": "2026-11-01T00:00:00Z",
        "message": {"role": "assistant", **message},
        "done": True,
        "done_reason": "stop",
        **extra,
    }


async def test_request_turns_streaming_off_and_matches_the_spec(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=chat({"content": "hi"}, prompt_eval_count=9, eval_count=2)))
    provider = OllamaProvider(client=fake.client, retry=NO_WAIT)
    response = await provider.request(
        model="qwen3", system="Be brief.", messages=[UserMessage("hello")], tools=[BASH_TOOL]
    )
    assert str(fake.requests[0].url) == "http://127.0.0.1:11434/api/chat"
    assert "authorization" not in fake.requests[0].headers
    body = fake.bodies[0]
    assert body == {
        "model": "qwen3",
        "stream": False,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "description": "Run a command",
                    "parameters": dict(BASH_TOOL.input_schema),
                },
            }
        ],
    }
    check_request("ollama", body)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 2)


async def test_calls_without_ids_are_answered_in_order_by_tool_name(fake_http, check_request) -> None:
    calls = [
        {"function": {"index": 0, "name": "bash", "arguments": {"command": "ls"}}},
        {"function": {"index": 1, "name": "bash", "arguments": {"command": "pwd"}}},
    ]
    # done_reason is "stop" although the model called tools; no token counts (prompt cache reuse).
    fake = fake_http(
        httpx2.Response(200, json=chat({"content": "", "thinking": "list then pwd", "tool_calls": calls})),
        httpx2.Response(200, json=chat({"content": "done"})),
    )
    provider = OllamaProvider(client=fake.client, retry=NO_WAIT)
    first = await provider.request(model="qwen3", system=None, messages=[UserMessage("go")], tools=[BASH_TOOL])
    assert first.message.parts == (
        ThinkingPart("list then pwd"),
        ToolCallPart(None, "bash", {"command": "ls"}),
        ToolCallPart(None, "bash", {"command": "pwd"}),
    )
    assert first.usage.input_tokens == 0 and first.usage.output_tokens == 0
    results = ToolResultsMessage(
        (
            ToolResult(None, "bash", (TextPart("a.txt"),)),
            ToolResult(None, "bash", (TextPart("exit code 1"),), is_error=True),
        )
    )
    await provider.request(
        model="qwen3", system=None, messages=[UserMessage("go"), first.message, results], tools=[BASH_TOOL]
    )
    body = fake.bodies[1]
    assert body["messages"][1] == {"role": "assistant", "content": "", "thinking": "list then pwd", "tool_calls": calls}
    assert body["messages"][2:] == [
        {"role": "tool", "tool_name": "bash", "content": "a.txt"},
        {"role": "tool", "tool_name": "bash", "content": "Error: exit code 1"},
    ]
    check_request("ollama", body)


async def test_call_ids_from_newer_servers_are_sent_back(fake_http) -> None:
    calls = [{"id": "call_k3j9x0ab", "function": {"index": 0, "name": "bash", "arguments": {"command": "ls"}}}]
    fake = fake_http(
        httpx2.Response(200, json=chat({"content": "", "tool_calls": calls})),
        httpx2.Response(200, json=chat({"content": "ok"})),
    )
    provider = OllamaProvider(client=fake.client, retry=NO_WAIT)
    first = await provider.request(model="qwen3", system=None, messages=[UserMessage("go")], tools=[BASH_TOOL])
    assert first.message.tool_calls[0].id == "call_k3j9x0ab"
    results = ToolResultsMessage((ToolResult("call_k3j9x0ab", "bash", (TextPart("a.txt"),)),))
    await provider.request(
        model="qwen3", system=None, messages=[UserMessage("go"), first.message, results], tools=[BASH_TOOL]
    )
    assert fake.bodies[1]["messages"][2] == {
        "role": "tool",
        "tool_name": "bash",
        "content": "a.txt",
        "tool_call_id": "call_k3j9x0ab",
    }


async def test_api_key_for_ollama_com_is_sent_as_bearer(fake_http) -> None:
    fake = fake_http(httpx2.Response(200, json=chat({"content": "ok"})))
    provider = OllamaProvider(api_key="ol-key", base_url="https://ollama.com", max_tokens=77, client=fake.client)
    await provider.request(model="gpt-oss:120b", system=None, messages=[UserMessage("x")], tools=[])
    assert fake.requests[0].headers["authorization"] == "Bearer ol-key"
    assert fake.bodies[0]["options"] == {"num_predict": 77}
    assert "tools" not in fake.bodies[0]


async def test_error_body_is_reported_with_its_message(fake_http) -> None:
    fake = fake_http(httpx2.Response(404, json={"error": "model 'qwen9' not found"}))
    provider = OllamaProvider(client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match="model 'qwen9' not found"):
        await provider.request(model="qwen9", system=None, messages=[UserMessage("x")], tools=[])
    assert len(fake.requests) == 1


async def test_error_inside_a_200_is_reported(fake_http) -> None:
    fake = fake_http(httpx2.Response(200, json={"error": "unexpected EOF"}))
    provider = OllamaProvider(client=fake.client, retry=NO_WAIT)
    with pytest.raises(ProviderHTTPError, match="unexpected EOF"):
        await provider.request(model="qwen3", system=None, messages=[UserMessage("x")], tools=[])


async def test_string_or_broken_arguments_are_replayed_as_objects(fake_http, check_request) -> None:
    # Ollama's Go server decodes historical arguments into a map: a string there fails the request.
    calls = [
        {"function": {"index": 0, "name": "bash", "arguments": '{"command": "ls"}'}},
        {"function": {"index": 1, "name": "bash", "arguments": '{"command": '}},
    ]
    fake = fake_http(
        httpx2.Response(200, json=chat({"content": "", "tool_calls": calls})),
        httpx2.Response(200, json=chat({"content": "done"})),
    )
    provider = OllamaProvider(client=fake.client, retry=NO_WAIT)
    first = await provider.request(model="qwen3", system=None, messages=[UserMessage("go")], tools=[BASH_TOOL])
    assert first.message.tool_calls[0].arguments == {"command": "ls"}
    assert first.message.tool_calls[1].arguments is None
    results = ToolResultsMessage(tuple(ToolResult(None, "bash", (TextPart("r"),)) for _ in calls))
    await provider.request(
        model="qwen3", system=None, messages=[UserMessage("go"), first.message, results], tools=[BASH_TOOL]
    )
    echoed = fake.bodies[1]["messages"][1]["tool_calls"]
    assert [c["function"]["arguments"] for c in echoed] == [{"command": "ls"}, {}]
    assert echoed[0]["function"]["index"] == 0 and echoed[1]["function"]["name"] == "bash"
    check_request("ollama", fake.bodies[1])


async def test_a_tool_result_image_goes_in_the_tool_message_images(fake_http, check_request) -> None:
    fake = fake_http(httpx2.Response(200, json=chat({"content": "a red square"})))
    provider = OllamaProvider(client=fake.client, retry=NO_WAIT)
    calls = chat({"content": "", "tool_calls": [{"function": {"name": "read", "arguments": {"file_path": "a.png"}}}]})
    first = fake_http(httpx2.Response(200, json=calls))
    turn = await OllamaProvider(client=first.client, retry=NO_WAIT).request(
        model="qwen2.5vl", system=None, messages=[UserMessage("look")], tools=[BASH_TOOL]
    )
    results = ToolResultsMessage((ToolResult(None, "read", (TextPart("a.png"), ImagePart("image/png", "aGVsbG8="))),))
    await provider.request(
        model="qwen2.5vl", system=None, messages=[UserMessage("look"), turn.message, results], tools=[BASH_TOOL]
    )
    body = fake.bodies[0]
    tool = body["messages"][-1]
    assert tool["role"] == "tool" and tool["images"] == ["aGVsbG8="]
    assert tool["content"] == "a.png\n[image: image/png, 5 bytes]"
    check_request("ollama", body)
