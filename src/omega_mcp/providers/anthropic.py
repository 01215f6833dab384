"""Anthropic Messages adapter (`POST {base}/v1/messages`).

`max_tokens` is always sent and `anthropic-version` is configurable (sampling parameters are never
sent: API version 2026-10-21 rejects them). The assistant `content` array is echoed unchanged, so
`thinking` / `redacted_thinking` blocks keep their signatures and order. All results of a turn go
back in one user message of `tool_result` blocks, with `is_error` and MCP images as image blocks.
A response cut off by `max_tokens` in the middle of a tool call is an error, never executed.
Deferred tools (tool search) are sent with `defer_loading: true`, and a tool result's
`ToolReferencePart`s become `tool_reference` blocks, which load those tools.

Prompt caching: every request, streamed or not, marks up to four `cache_control` breakpoints: the
last tool loaded up front, the system prompt, the last message (cached for the next request) and the user message
that ended the previous request (read back from the cache). The streamed answer (SSE) is rebuilt
into the Message object the non-streamed request returns: text, thinking and signatures joined,
tool inputs parsed from their `input_json_delta` pieces, usage taken from `message_delta` (whose
counts are cumulative).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, assert_never

import anyio
import httpx2

from omega_mcp.errors import ProviderHTTPError
from omega_mcp.messages import (
    AssistantMessage,
    AssistantPart,
    AudioPart,
    ImagePart,
    Message,
    ModelResponse,
    RequestSettings,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReferencePart,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
    UserPart,
    decoded_size,
    parse_arguments,
)
from omega_mcp.narrow import as_int, as_list, as_object, as_str
from omega_mcp.providers._http import DEFAULT_TIMEOUT_SECONDS, HttpProvider, RetryPolicy
from omega_mcp.providers._schema import clean_schema
from omega_mcp.providers._stream import (
    SSEDecoder,
    StreamAssembler,
    StreamBrokenError,
    StreamErrorEvent,
    StreamEvent,
    StreamProtocolError,
    TextSink,
)

__all__ = ["DEFAULT_ANTHROPIC_VERSION", "DEFAULT_MAX_TOKENS", "AnthropicProvider", "build_request", "parse_response"]

DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192
_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")
_EPHEMERAL = {"type": "ephemeral"}


class AnthropicProvider(HttpProvider):
    """`x-api-key` auth plus the `anthropic-version` header."""

    name = "anthropic"
    defers_tools = True
    """Deferred tool specs go on the wire with `defer_loading: true`; a `ToolReferencePart` in a tool
    result (our own `search_tools`' answer) loads one (`agent/deferred.py`)."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str = "https://api.anthropic.com",
        anthropic_version: str = DEFAULT_ANTHROPIC_VERSION,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        extra_headers: Mapping[str, str] | None = None,
        client: httpx2.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        super().__init__(client=client, retry=retry, timeout_seconds=timeout_seconds, sleep=sleep)
        self.url = base_url.rstrip("/") + "/v1/messages"
        self.max_tokens = max_tokens
        self.headers: dict[str, str] = {"anthropic-version": anthropic_version}
        if api_key:
            self.headers["x-api-key"] = api_key
        self.headers.update(extra_headers or {})
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
        settings: RequestSettings | None = None,
    ) -> ModelResponse:
        if tools is not self._tools_for:  # byte-stable tools keep thinking blocks and caches valid
            self._tools_for, self._tools_wire = tools, wire_tools(tools)
        body = build_request(
            model=model,
            system=system,
            messages=messages,
            tools=self._tools_wire,
            max_tokens=self.max_tokens,
            settings=settings,
        )
        if on_text is None:
            return parse_response(await self._http.post(self.url, body, self.headers), max_tokens=self.max_tokens)
        body["stream"] = True
        return await self._http.stream(
            self.url, body, self.headers, framing=SSEDecoder, assembler=self._assembler, on_text=on_text
        )

    def _assembler(self, sink: TextSink) -> MessageStream:
        return MessageStream(sink, lambda data: parse_response(data, max_tokens=self.max_tokens))


def wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": clean_schema(tool.input_schema, "anthropic"),
            **({"defer_loading": True} if tool.deferred else {}),
        }
        for tool in tools
    ]


def build_request(
    *,
    model: str,
    system: str | None,
    messages: Sequence[Message],
    tools: list[dict[str, Any]],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    settings: RequestSettings | None = None,
) -> dict[str, Any]:
    """The request body with its cache breakpoints; `tools` is the output of `wire_tools` (omitted
    entirely when empty) and is not modified."""
    wire: list[dict[str, Any]] = []
    pending_ids: list[str] = []
    for index, message in enumerate(messages):
        match message:
            case UserMessage():
                content = [_user_block(part) for part in message.parts] if message.parts else message.text
                wire.append({"role": "user", "content": content})
            case AssistantMessage():
                pending_ids = [_safe_id(call.id, index, i) for i, call in enumerate(message.tool_calls)]
                wire.append({"role": "assistant", "content": _assistant_content(message, pending_ids)})
            case ToolResultsMessage():
                blocks = [
                    _tool_result(result, pending_ids[i] if i < len(pending_ids) else _safe_id(result.call_id, index, i))
                    for i, result in enumerate(message.results)
                ]
                wire.append({"role": "user", "content": blocks})
            case _:
                assert_never(message)
    # Breakpoints: the previous request ended with the second-to-last user message; this one ends
    # with the last. Together with tools and system that is Anthropic's maximum of four.
    for position in [i for i, item in enumerate(wire) if item["role"] == "user"][-2:]:
        wire[position] = _with_breakpoint(wire[position])
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": wire}
    if system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}]
    if tools:
        # The breakpoint goes on the last tool the model sees up front: deferred ones are not in the prefix.
        loaded = [i for i, tool in enumerate(tools) if not tool.get("defer_loading")]
        last = loaded[-1] if loaded else len(tools) - 1
        body["tools"] = [
            {**tool, "cache_control": dict(_EPHEMERAL)} if i == last else tool for i, tool in enumerate(tools)
        ]
    if settings is not None:
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.stop:
            body["stop_sequences"] = list(settings.stop)
        if settings.tool_choice is not None and tools:
            body["tool_choice"] = {"type": _TOOL_CHOICE[settings.tool_choice]}
    return body


_TOOL_CHOICE = {"auto": "auto", "required": "any", "none": "none"}


def _user_block(part: UserPart) -> dict[str, Any]:
    """A user message's part as a content block (this wire format takes no audio: the sampler checks first)."""
    match part:
        case TextPart():
            return {"type": "text", "text": part.text}
        case ImagePart():
            return {"type": "image", "source": {"type": "base64", "media_type": part.mime_type, "data": part.data}}
        case AudioPart():
            return {"type": "text", "text": f"[audio: {part.mime_type}, {decoded_size(part.data)} bytes]"}
        case _:
            assert_never(part)


def _with_breakpoint(message: dict[str, Any]) -> dict[str, Any]:
    """`message` with a cache breakpoint on its last block (empty text cannot carry one)."""
    content = message["content"]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks or (blocks[-1].get("type") == "text" and not blocks[-1].get("text")):
        return message
    blocks[-1] = {**blocks[-1], "cache_control": dict(_EPHEMERAL)}
    return {**message, "content": blocks}


def _safe_id(call_id: str | None, message_index: int, call_index: int) -> str:
    if call_id:
        safe = _UNSAFE_ID.sub("_", call_id)
        if safe:
            return safe
    return f"toolu_{message_index}_{call_index}"


def _assistant_content(message: AssistantMessage, ids: list[str]) -> list[dict[str, Any]]:
    raw = message.raw_for("anthropic")
    if raw is not None and isinstance(raw.get("content"), list):
        return list(raw["content"])
    blocks: list[dict[str, Any]] = []
    calls = 0
    for part in message.parts:
        match part:
            case TextPart():
                if part.text:  # the API rejects empty text blocks
                    blocks.append({"type": "text", "text": part.text})
            case ThinkingPart():
                # Foreign reasoning has no Anthropic signature and would be rejected: drop it.
                continue
            case ToolCallPart():
                blocks.append({"type": "tool_use", "id": ids[calls], "name": part.name, "input": part.arguments or {}})
                calls += 1
            case _:
                assert_never(part)
    return blocks or [{"type": "text", "text": "(no text)"}]


def _tool_result(result: ToolResult, tool_use_id: str) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id}
    if any(isinstance(part, ImagePart | ToolReferencePart) for part in result.content):
        content: list[dict[str, Any]] = []
        for part in result.content:
            match part:
                case TextPart():
                    if part.text:
                        content.append({"type": "text", "text": part.text})
                case ImagePart():
                    source = {"type": "base64", "media_type": part.mime_type, "data": part.data}
                    content.append({"type": "image", "source": source})
                case ToolReferencePart():
                    content.append({"type": "tool_reference", "tool_name": part.tool_name})
                case _:
                    assert_never(part)
        block["content"] = content
    else:
        block["content"] = result.text()
    if result.is_error:
        block["is_error"] = True
    return block


def parse_response(data: Mapping[str, Any], *, max_tokens: int | None = None) -> ModelResponse:
    """Map a Message object to neutral parts.

    Raises:
        ProviderHTTPError: the answer was cut off by `max_tokens` inside a tool call.
    """
    blocks = as_list(data.get("content"))
    parts: list[AssistantPart] = []
    for item in blocks:
        block = as_object(item)
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(str(block.get("text", ""))))
        elif kind == "thinking":
            parts.append(ThinkingPart(str(block.get("thinking", "")), signature=as_str(block.get("signature"))))
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart("", redacted_data=as_str(block.get("data"))))
        elif kind == "tool_use":
            arguments, problem = parse_arguments(block.get("input"))
            parts.append(ToolCallPart(str(block.get("id", "")), str(block.get("name", "")), arguments, problem))
        # Other block types (server tools, ...) stay in `raw` and are echoed untouched.
    stop = as_str(data.get("stop_reason"))
    if stop == "max_tokens" and any(isinstance(p, ToolCallPart) for p in parts):
        limit = f" ({max_tokens})" if max_tokens else ""
        raise ProviderHTTPError(
            f"anthropic: the answer hit max_tokens{limit} in the middle of a tool call; "
            "raise max_tokens in [agent] of servers.toml"
        )
    usage_raw = as_object(data.get("usage"))
    cache_write = as_int(usage_raw.get("cache_creation_input_tokens"))
    cache_read = as_int(usage_raw.get("cache_read_input_tokens"))
    usage = Usage(
        # Anthropic's input_tokens excludes cache traffic; report the full prompt like the others.
        input_tokens=as_int(usage_raw.get("input_tokens")) + cache_write + cache_read,
        output_tokens=as_int(usage_raw.get("output_tokens")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    raw = {"role": "assistant", "content": blocks}
    return ModelResponse(
        message=AssistantMessage(tuple(parts), raw=raw, raw_format="anthropic"),
        usage=usage,
        finish_reason=stop,
    )


class MessageStream(StreamAssembler):
    """Rebuilds a Message object from Messages API stream events."""

    def __init__(self, sink: TextSink, parse: Callable[[Mapping[str, Any]], ModelResponse]) -> None:
        super().__init__(sink, parse)
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._input_json: dict[int, list[str]] = {}

    def feed(self, event: StreamEvent) -> None:
        data = as_object(event.json())
        kind = as_str(data.get("type")) or event.name
        if kind == "error":
            raise StreamErrorEvent(data)
        if kind == "message_start":
            self._message = dict(as_object(data.get("message")))
        elif kind == "content_block_start":
            self._blocks[as_int(data.get("index"))] = dict(as_object(data.get("content_block")))
        elif kind == "content_block_delta":
            self._delta(as_int(data.get("index")), as_object(data.get("delta")))
        elif kind == "message_delta":
            self._message.update(as_object(data.get("delta")))
            usage = dict(as_object(self._message.get("usage")))
            # Cumulative counts: the latest value of each field wins.
            usage.update({key: value for key, value in as_object(data.get("usage")).items() if value is not None})
            self._message["usage"] = usage
        elif kind == "message_stop":
            self.done = True
        # ping, content_block_stop and event types added later need nothing.

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.get(index)
        if block is None:
            raise StreamProtocolError(f"a delta for content block {index} before its start")
        kind = delta.get("type")
        if kind == "text_delta":
            piece = str(delta.get("text", ""))
            block["text"] = str(block.get("text") or "") + piece
            self.sink(piece)
        elif kind == "input_json_delta":
            self._input_json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(delta.get("signature", ""))
        elif kind == "citations_delta":
            block["citations"] = [*as_list(block.get("citations")), delta.get("citation")]

    def result(self) -> ModelResponse:
        if not self.done:
            raise StreamBrokenError("it ended before message_stop")
        for index, pieces in self._input_json.items():
            text = "".join(pieces)
            if not text.strip():
                continue  # no arguments: the start block's `input: {}` stands
            try:
                self._blocks[index]["input"] = json.loads(text)
            except ValueError:
                if self._message.get("stop_reason") != "max_tokens":  # cut off: parse_response says so
                    raise ProviderHTTPError(
                        f"anthropic API error: the streamed input of a tool call is not valid JSON: {text[:200]!r}"
                    ) from None
        return self.parse({**self._message, "content": [self._blocks[index] for index in sorted(self._blocks)]})
