"""Ollama native chat adapter (`POST {base}/api/chat`, always `"stream": false`).

Ollama streams NDJSON unless told not to, sends arguments as objects, and older servers give tool
calls no ids: results therefore go back in call order, each with `tool_name` (and `tool_call_id`
only when the call had one). `done_reason` is `stop` even with tool calls, so calls are detected
from `message.tool_calls`. Token counts may be absent (prompt cache reuse) and count as 0.
Local servers need no key; a key (ollama.com) is sent as a Bearer token.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, assert_never

import anyio
import httpx2

from omega_mcp.errors import ProviderHTTPError
from omega_mcp.messages import (
    AssistantMessage,
    AssistantPart,
    Message,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
    parse_arguments,
)
from omega_mcp.narrow import as_int, as_list, as_object, as_str
from omega_mcp.providers._http import DEFAULT_TIMEOUT_SECONDS, HttpProvider, RetryPolicy
from omega_mcp.providers._schema import clean_schema

__all__ = ["OllamaProvider", "build_request", "parse_response"]

_ECHO_KEYS = ("thinking", "tool_calls")


class OllamaProvider(HttpProvider):
    """A local (or ollama.com) Ollama server."""

    name = "ollama"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str = "http://127.0.0.1:11434",
        max_tokens: int | None = None,
        client: httpx2.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        super().__init__(client=client, retry=retry, timeout_seconds=timeout_seconds, sleep=sleep)
        self.url = base_url.rstrip("/") + "/api/chat"
        self.max_tokens = max_tokens
        self.headers: dict[str, str] = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._tools_for: Sequence[ToolSpec] | None = None
        self._tools_wire: list[dict[str, Any]] = []

    async def request(
        self,
        *,
        model: str,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None] | None = None,
    ) -> ModelResponse:
        if tools is not self._tools_for:
            self._tools_for, self._tools_wire = tools, wire_tools(tools)
        body = build_request(
            model=model, system=system, messages=messages, tools=self._tools_wire, max_tokens=self.max_tokens
        )
        data = await self._http.post(self.url, body, self.headers)
        return parse_response(data)


def wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": clean_schema(tool.input_schema, "ollama"),
            },
        }
        for tool in tools
    ]


def build_request(
    *,
    model: str,
    system: str | None,
    messages: Sequence[Message],
    tools: list[dict[str, Any]],
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The request body; `tools` is the output of `wire_tools` (omitted entirely when empty)."""
    wire: list[dict[str, Any]] = []
    if system:
        wire.append({"role": "system", "content": system})
    for message in messages:
        match message:
            case UserMessage():
                wire.append({"role": "user", "content": message.text})
            case AssistantMessage():
                wire.append(_assistant(message))
            case ToolResultsMessage():
                for result in message.results:
                    text = result.text()
                    # `content` is required by the spec even when empty; `tool_name` is how old servers match.
                    tool: dict[str, Any] = {
                        "role": "tool",
                        "tool_name": result.name,
                        "content": f"Error: {text}" if result.is_error else text,
                    }
                    if result.call_id:
                        tool["tool_call_id"] = result.call_id
                    wire.append(tool)
            case _:
                assert_never(message)
    body: dict[str, Any] = {"model": model, "stream": False, "messages": wire}
    if tools:
        body["tools"] = tools
    if max_tokens is not None:
        body["options"] = {"num_predict": max_tokens}
    return body


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    raw = message.raw_for("ollama")
    if raw is not None:
        echoed: dict[str, Any] = {"role": "assistant", "content": raw.get("content") or ""}
        echoed.update({key: raw[key] for key in _ECHO_KEYS if raw.get(key)})
        return echoed
    out: dict[str, Any] = {"role": "assistant", "content": message.text}
    calls: list[dict[str, Any]] = []
    for part in message.tool_calls:
        call: dict[str, Any] = {"function": {"name": part.name, "arguments": part.arguments or {}}}
        if part.id:
            call["id"] = part.id
        calls.append(call)
    if calls:
        out["tool_calls"] = calls
    return out


def parse_response(data: Mapping[str, Any]) -> ModelResponse:
    """Map a non-streamed chat response to neutral parts.

    Raises:
        ProviderHTTPError: the response carries no message.
    """
    if not isinstance(data.get("message"), dict):
        raise ProviderHTTPError(f"ollama API error: the response has no message: {str(data)[:300]}")
    raw = as_object(copy.deepcopy(data.get("message")))
    parts: list[AssistantPart] = []
    thinking = as_str(raw.get("thinking"))
    if thinking:
        parts.append(ThinkingPart(thinking))
    content = as_str(raw.get("content"))
    if content:
        parts.append(TextPart(content))
    for item in as_list(raw.get("tool_calls")):
        call = as_object(item)
        function = as_object(call.get("function"))
        arguments, problem = parse_arguments(function.get("arguments"))
        if isinstance(call.get("function"), dict) and not isinstance(function.get("arguments"), dict):
            # The server decodes historical arguments into a map: replay an object, never a string.
            function["arguments"] = arguments or {}
        parts.append(ToolCallPart(as_str(call.get("id")), str(function.get("name") or ""), arguments, problem))
    usage = Usage(input_tokens=as_int(data.get("prompt_eval_count")), output_tokens=as_int(data.get("eval_count")))
    return ModelResponse(
        message=AssistantMessage(tuple(parts), raw=raw, raw_format="ollama"),
        usage=usage,
        finish_reason=as_str(data.get("done_reason")),
    )
