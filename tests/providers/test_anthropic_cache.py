"""Anthropic prompt caching: at most four breakpoints (last tool, system, the message that ended the
previous request, the last message), streamed or not, with a byte-stable prefix and valid bodies."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from stream_support import CASES

from omega_mcp.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ToolCallPart,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    UserMessage,
)
from omega_mcp.providers import RetryPolicy
from omega_mcp.providers.anthropic import AnthropicProvider

NO_WAIT = RetryPolicy(initial_backoff_seconds=0, jitter=0)
CACHE = {"type": "ephemeral"}
TOOLS = [ToolSpec(name, name, {"type": "object", "properties": {"x": {"type": "string"}}}) for name in ("a", "b", "c")]
OK = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def turn(index: int) -> tuple[AssistantMessage, ToolResultsMessage]:
    """One tool round as the loop stores it: the model's raw Anthropic turn and its results."""
    ids = [f"toolu_{index}_{i}" for i in range(2)]
    calls = [{"type": "tool_use", "id": call_id, "name": "a", "input": {"x": call_id}} for call_id in ids]
    raw = {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "c2ln"}, *calls]}
    parts = tuple(ToolCallPart(call_id, "a", {"x": call_id}) for call_id in ids)
    results = tuple(ToolResult(call_id, "a", (TextPart(f"result {call_id}"),)) for call_id in ids)
    return AssistantMessage(parts, raw=raw, raw_format="anthropic"), ToolResultsMessage(results)


def conversation(rounds: int) -> list[Message]:
    messages: list[Message] = [UserMessage("go")]
    for index in range(rounds):
        messages.extend(turn(index))
    return messages


def breakpoints(value: Any, path: str = "") -> list[str]:
    """Where `cache_control` appears in a request body (as paths)."""
    found: list[str] = []
    if isinstance(value, dict):
        if "cache_control" in value:
            found.append(path)
        for key, item in value.items():
            found += breakpoints(item, f"{path}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += breakpoints(item, f"{path}/{index}")
    return found


async def send(messages: list[Message], *, system: str | None = "Be brief.", tools=TOOLS, stream: bool = False):
    replies = [CASES["anthropic"].streamed() if stream else httpx2.Response(200, json=OK)]
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda request: replies.pop(0)))
    seen: list[httpx2.Request] = []
    client.event_hooks["request"].append(_record(seen))
    provider = AnthropicProvider(api_key="k", client=client, retry=NO_WAIT)
    await provider.request(
        model="m", system=system, messages=messages, tools=tools, on_text=(lambda _: None) if stream else None
    )
    return json.loads(seen[0].content)


def _record(seen: list[httpx2.Request]):
    async def hook(request: httpx2.Request) -> None:
        seen.append(request)

    return hook


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("rounds", [0, 1, 2, 5])
async def test_breakpoints_mark_tools_system_and_the_last_two_user_turns(
    check_request, rounds: int, stream: bool
) -> None:
    body = await send(conversation(rounds), stream=stream)
    messages = body["messages"]
    last = len(messages) - 1
    expected = ["/system/0", "/tools/2", f"/messages/{last}/content/{len(messages[last]['content']) - 1}"]
    if rounds:
        # The message that ended the previous request, where its cache was written: read back now.
        expected.append(f"/messages/{last - 2}/content/{len(messages[last - 2]['content']) - 1}")
    assert sorted(breakpoints(body)) == sorted(expected)
    assert len(expected) <= 4
    assert body.get("stream", False) is stream
    check_request("anthropic", body)


async def test_breakpoints_never_touch_the_echoed_turn_or_the_reused_tool_list() -> None:
    messages = conversation(2)
    first = await send(messages[:3])
    second = await send(messages)
    for message in messages:
        if isinstance(message, AssistantMessage):
            assert "cache_control" not in json.dumps(message.raw)  # the stored turn is unchanged
    # The prefix of the next request is byte-identical: system, tools and the earlier turns.
    assert json.dumps(first["system"]) == json.dumps(second["system"])
    assert json.dumps(first["tools"]) == json.dumps(second["tools"])
    assert second["messages"][1] == first["messages"][1]


async def test_without_tools_or_system_only_messages_are_marked(check_request) -> None:
    body = await send(conversation(1), system=None, tools=[])
    assert "system" not in body and "tools" not in body
    assert sorted(breakpoints(body)) == ["/messages/0/content/0", "/messages/2/content/1"]
    check_request("anthropic", body)


async def test_an_empty_user_text_gets_no_breakpoint(check_request) -> None:
    body = await send([UserMessage("")], system=None, tools=[])
    assert breakpoints(body) == []
    assert body["messages"][0] == {"role": "user", "content": ""}
