"""Tool search in the agent loop, through each real wire format (HTTP answered by a mock transport).

Every run: the model searches (`search_tools`), calls the tool it found, then answers. Checked on
each request body: it is valid against the provider's published request schema (shared/specs/),
the first request carries only the always-visible tools and `search_tools` (Anthropic: every other
tool too, with `defer_loading: true`), and each request starts with the previous one's tools and
messages byte for byte (the found tool is appended). Anthropic gets our search's answer as
`tool_reference` blocks and keeps one tool list for the whole run.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from omega_mcp.agent.loop import AgentToolSearch, run_agent
from omega_mcp.builtin.schemas import BUILTIN_TOOLS
from omega_mcp.providers import RetryPolicy, create_provider
from search_support import CatalogHost

NO_WAIT = RetryPolicy(max_retries=0)
BUILTINS = [tool.name for tool, _ in BUILTIN_TOOLS]
FOUND = "mcp__github__create_issue"
SERVERS = ("filesystem", "github", "playwright", "time", "git")


def _args(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments)


SEARCH = ("search_tools", {"query": "create an issue in the github repository", "limit": 3})
CALL = (FOUND, {"owner": "o", "repo": "r", "title": "Login crash"})


def openai_turn(call: tuple[str, dict[str, Any]] | None, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if call else "done"}
    if call:
        function = {"name": call[0], "arguments": _args(call[1])}
        message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": function}]
    return {
        "id": f"c{number}",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls" if call else "stop", "message": message}],
        "usage": {"prompt_tokens": 1000 * number, "completion_tokens": 5, "total_tokens": 1000 * number + 5},
    }


def anthropic_turn(call: tuple[str, dict[str, Any]] | None, number: int) -> dict[str, Any]:
    content = (
        [{"type": "tool_use", "id": f"toolu_{number}", "name": call[0], "input": call[1]}]
        if call
        else [{"type": "text", "text": "done"}]
    )
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": "tool_use" if call else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1000 * number, "output_tokens": 5},
    }


def ollama_turn(call: tuple[str, dict[str, Any]] | None, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "" if call else "done"}
    if call:
        message["tool_calls"] = [{"function": {"name": call[0], "arguments": call[1]}}]
    return {
        "model": "qwen3",
        "created_at": "2026-11-01T00:00:00Z",
        "message": message,
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 1000 * number,
        "eval_count": 5,
    }


def gemini_turn(call: tuple[str, dict[str, Any]] | None, number: int) -> dict[str, Any]:
    parts = [{"functionCall": {"name": call[0], "args": call[1]}}] if call else [{"text": "done"}]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 1000 * number, "candidatesTokenCount": 5, "totalTokenCount": 1005},
        "modelVersion": "gemini-2.5-flash",
        "responseId": f"r{number}",
    }


FORMATS: dict[str, tuple[Callable[[tuple[str, dict[str, Any]] | None, int], dict[str, Any]], str]] = {
    "openai": (openai_turn, "gpt-5.4"),
    "openrouter": (openai_turn, "anthropic/claude-sonnet-4.5"),
    "anthropic": (anthropic_turn, "claude-sonnet-4-6"),
    "ollama": (ollama_turn, "qwen3"),
    "gemini": (gemini_turn, "gemini-2.5-flash"),
}
SPEC_OF = {"openrouter": "openai"}


def tool_names(provider: str, body: dict[str, Any]) -> list[str]:
    if provider in ("openai", "openrouter", "ollama"):
        return [tool["function"]["name"] for tool in body.get("tools", [])]
    if provider == "anthropic":
        return [tool["name"] for tool in body.get("tools", [])]
    return [d["name"] for group in body.get("tools", []) for d in group.get("functionDeclarations", [])]


def tool_entries(provider: str, body: dict[str, Any]) -> list[str]:
    """Each tool's JSON as sent (Anthropic's moving cache breakpoint left out)."""
    if provider == "gemini":
        items = [d for group in body.get("tools", []) for d in group.get("functionDeclarations", [])]
    else:
        items = body.get("tools", [])
    return [json.dumps({k: v for k, v in item.items() if k != "cache_control"}) for item in items]


def _without_breakpoints(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_breakpoints(v) for k, v in value.items() if k != "cache_control"}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [_without_breakpoints(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def message_entries(provider: str, body: dict[str, Any]) -> list[str]:
    """Each message's JSON as sent. Anthropic's breakpoints move from request to request (a text
    content carrying one is sent as a block); the prompt they render is the same, so they are
    compared without them, text content as a block."""
    messages = body.get("contents") if provider == "gemini" else body.get("messages")
    out: list[str] = []
    for message in messages or []:
        if provider == "anthropic":
            message = _without_breakpoints(message)
            if isinstance(message["content"], str):
                message = {**message, "content": [{"type": "text", "text": message["content"]}]}
        out.append(json.dumps(message))
    return out


@pytest.mark.parametrize("provider", list(FORMATS))
async def test_the_model_searches_then_uses_the_found_tool_with_a_byte_identical_prefix(
    provider: str, fake_http, check_request
) -> None:
    turn, model = FORMATS[provider]
    fake = fake_http(*(httpx2.Response(200, json=turn(call, n)) for n, call in enumerate([SEARCH, CALL, None], 1)))
    llm = create_provider(provider, api_key="k", client=fake.client, retry=NO_WAIT)
    host = CatalogHost(SERVERS)
    result = await run_agent(
        "File a bug about the login crash in o/r",
        provider=llm,
        tools=host,
        model=model,
        system="Be brief.",
        tool_search=AgentToolSearch("on", server_of=host.servers.get),
    )
    assert result.output == "done" and result.turns == 3
    assert host.calls == [FOUND]
    bodies = fake.bodies
    for body in bodies:
        check_request(SPEC_OF.get(provider, provider), body)
    first = tool_names(provider, bodies[0])
    assert first[: len(BUILTINS) + 1] == [*BUILTINS, "search_tools"]
    if provider == "anthropic":
        # Native deferred loading: everything else is sent deferred, the list never changes.
        assert len(first) == len(host.tools) + 1
        deferred = [t["name"] for t in bodies[0]["tools"] if t.get("defer_loading") is True]
        assert deferred == [t.name for t in host.tools if t.name not in BUILTINS]
        assert [t["name"] for t in bodies[0]["tools"] if "cache_control" in t] == ["search_tools"]
        results = bodies[1]["messages"][-1]["content"]
        references = [b for b in results[0]["content"] if b["type"] == "tool_reference"]
        assert {"type": "tool_reference", "tool_name": FOUND} in references
        assert json.dumps(bodies[0]["tools"]) == json.dumps(bodies[1]["tools"]) == json.dumps(bodies[2]["tools"])
    else:
        assert first == [*BUILTINS, "search_tools"]
        second = tool_names(provider, bodies[1])
        assert second[: len(first)] == first and FOUND in second[len(first) :]
        assert tool_names(provider, bodies[2]) == second  # calling a found tool adds nothing new
        assert "defer_loading" not in json.dumps(bodies)
    # Each request starts with the previous one's tools and messages, byte for byte.
    for earlier, later in itertools.pairwise(bodies):
        tools_before, tools_after = tool_entries(provider, earlier), tool_entries(provider, later)
        assert tools_after[: len(tools_before)] == tools_before
        messages_before, messages_after = message_entries(provider, earlier), message_entries(provider, later)
        assert messages_after[: len(messages_before)] == messages_before
    assert [u.input_tokens for u in result.turn_usage] == [1000, 2000, 3000]
    assert result.tools is not None and result.tools.search and result.tools.offered == len(host.tools)
    assert result.to_json()["usage"]["tool_search"]["loaded"] < 20
