"""OpenAI Chat Completions adapter; also serves OpenRouter (same wire format, other base URL and key).

Arguments arrive as a JSON *string* and may be invalid: they are parsed here and a failure is kept
on the call so the loop can hand it back to the model. Tool calls are detected from
`message.tool_calls`, never from `finish_reason`. The assistant message is echoed as received
(with OpenRouter's `reasoning_details`); each result becomes one `role: "tool"` message, errors
marked by an `Error:` prefix since the format has no flag. Sampling and parallel-call parameters
are never sent (o-series models reject some of them); `max_completion_tokens` only when configured.
Streamed (`stream: true` with usage included), the chunks are put back together into the
chat.completion the non-streamed request returns: text and reasoning joined, tool calls assembled
by `index` (a new `id` at a used index starts a new call, as some compatible servers send them),
OpenRouter's `reasoning_details` merged by their `index`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, assert_never

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
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
    UserPart,
    parse_arguments,
)
from omega_mcp.narrow import as_int, as_list, as_object, as_str, object_or_none
from omega_mcp.providers._http import DEFAULT_TIMEOUT_SECONDS, HttpProvider, RetryPolicy, error_text
from omega_mcp.providers._schema import clean_schema
from omega_mcp.providers._stream import (
    SSEDecoder,
    StreamAssembler,
    StreamBrokenError,
    StreamErrorEvent,
    StreamEvent,
    TextSink,
)

__all__ = ["OpenAIProvider", "build_request", "parse_response"]

Flavor = Literal["openai", "openrouter"]
_ECHO_KEYS = ("content", "tool_calls", "reasoning_details")
# What an assistant turn keeps of the message (the same whether it was streamed or not).
_KEPT_KEYS = ("reasoning", "reasoning_content", "tool_calls", "reasoning_details")


class OpenAIProvider(HttpProvider):
    """`POST {base_url}/chat/completions` with a Bearer key."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str = "https://api.openai.com/v1",
        flavor: Flavor = "openai",
        max_tokens: int | None = None,
        extra_headers: Mapping[str, str] | None = None,
        client: httpx2.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.name = flavor
        super().__init__(client=client, retry=retry, timeout_seconds=timeout_seconds, sleep=sleep)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.flavor: Flavor = flavor
        self.max_tokens = max_tokens
        self.headers: dict[str, str] = {}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        if flavor == "openrouter":
            self.headers["X-Title"] = "omega-mcp"  # OpenRouter's app attribution header
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
        if tools is not self._tools_for:  # same tools object each turn: keep the JSON byte-stable
            self._tools_for, self._tools_wire = tools, wire_tools(tools)
        body = build_request(
            model=model,
            system=system,
            messages=messages,
            tools=self._tools_wire,
            max_tokens=self.max_tokens,
            max_tokens_field="max_tokens" if self.flavor == "openrouter" else "max_completion_tokens",
            settings=settings,
        )
        if on_text is None:
            return parse_response(await self._http.post(self.url, body, self.headers), provider_name=self.name)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return await self._http.stream(
            self.url, body, self.headers, framing=SSEDecoder, assembler=self._assembler, on_text=on_text
        )

    def _assembler(self, sink: TextSink) -> ChatStream:
        return ChatStream(sink, lambda data: parse_response(data, provider_name=self.name))


def wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": clean_schema(tool.input_schema, "openai"),
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
    max_tokens_field: str = "max_completion_tokens",
    settings: RequestSettings | None = None,
) -> dict[str, Any]:
    """The request body; `tools` is the output of `wire_tools` (omitted entirely when empty)."""
    wire: list[dict[str, Any]] = []
    if system:
        wire.append({"role": "system", "content": system})
    pending_ids: list[str] = []
    for index, message in enumerate(messages):
        match message:
            case UserMessage():
                content = [_user_part(part) for part in message.parts] if message.parts else message.text
                wire.append({"role": "user", "content": content})
            case AssistantMessage():
                pending_ids = [call.id or f"call_{index}_{i}" for i, call in enumerate(message.tool_calls)]
                wire.append(_assistant(message, pending_ids))
            case ToolResultsMessage():
                images: list[dict[str, Any]] = []
                for i, result in enumerate(message.results):
                    fallback = pending_ids[i] if i < len(pending_ids) else f"call_{index}_{i}"
                    call_id = result.call_id or fallback
                    text = result.text()
                    content = f"Error: {text}" if result.is_error else text
                    wire.append({"role": "tool", "tool_call_id": call_id, "content": content})
                    images += _image_parts(result, call_id)
                if images:  # a tool message carries text only: the images follow in a user message
                    wire.append({"role": "user", "content": images})
            case _:
                assert_never(message)
    body: dict[str, Any] = {"model": model, "messages": wire}
    if tools:
        body["tools"] = tools
    if max_tokens is not None:
        body[max_tokens_field] = max_tokens
    if settings is not None:
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.stop:
            body["stop"] = list(settings.stop)
        if settings.tool_choice is not None and tools:
            body["tool_choice"] = settings.tool_choice
    return body


_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}
"""`input_audio` takes a format name, not a MIME type (`providers.media_problem` admits only these)."""


def _user_part(part: UserPart) -> dict[str, Any]:
    match part:
        case TextPart():
            return {"type": "text", "text": part.text}
        case ImagePart():
            return {"type": "image_url", "image_url": {"url": f"data:{part.mime_type};base64,{part.data}"}}
        case AudioPart():
            audio_format = _AUDIO_FORMATS.get(part.mime_type, "wav")
            return {"type": "input_audio", "input_audio": {"data": part.data, "format": audio_format}}
        case _:
            assert_never(part)


def _image_parts(result: ToolResult, call_id: str) -> list[dict[str, Any]]:
    """The images of a tool result as user content parts, introduced by which call returned them."""
    images = [part for part in result.content if isinstance(part, ImagePart)]
    if not images:
        return []
    noun = "images" if len(images) > 1 else "image"
    intro = {"type": "text", "text": f"The {noun} returned by {result.name} ({call_id}):"}
    urls = [{"type": "image_url", "image_url": {"url": f"data:{part.mime_type};base64,{part.data}"}} for part in images]
    return [intro, *urls]


def _assistant(message: AssistantMessage, ids: list[str]) -> dict[str, Any]:
    raw = message.raw_for("openai")
    if raw is not None:
        echoed: dict[str, Any] = {"role": "assistant"}
        echoed.update({key: raw[key] for key in _ECHO_KEYS if raw.get(key) is not None})
        echoed.setdefault("content", None if raw.get("tool_calls") else "")
        return echoed
    calls = message.tool_calls
    out: dict[str, Any] = {"role": "assistant", "content": message.text or (None if calls else "")}
    if calls:
        out["tool_calls"] = [
            {"id": ids[i], "type": "function", "function": {"name": call.name, "arguments": _json(call.arguments)}}
            for i, call in enumerate(calls)
        ]
    return out


def parse_response(data: Mapping[str, Any], *, provider_name: str = "openai") -> ModelResponse:
    """Map a chat.completion object to neutral parts.

    Raises:
        ProviderHTTPError: no choices, or a `finish_reason: "error"` choice (OpenRouter).
    """
    choices = as_list(data.get("choices"))
    choice = as_object(choices[0]) if choices else {}
    if not choice:
        raise ProviderHTTPError(f"{provider_name} API error: the response has no choices: {str(data)[:300]}")
    finish = as_str(choice.get("finish_reason"))
    if finish == "error":
        raise ProviderHTTPError(f"{provider_name} API error: {error_text(choice, 'generation failed')}")
    message = as_object(copy.deepcopy(choice.get("message")))
    parts: list[AssistantPart] = []
    reasoning = as_str(message.get("reasoning")) or as_str(message.get("reasoning_content"))
    if reasoning:
        parts.append(ThinkingPart(reasoning))
    content = message.get("content")
    if isinstance(message.get("content"), list):  # some compatible servers answer with content parts
        content = "".join(str(as_object(p).get("text", "")) for p in as_list(message.get("content")))
    raw: dict[str, Any] = {"role": "assistant"}
    if isinstance(content, str) and content:
        parts.append(TextPart(content))
        raw["content"] = content
    for i, item in enumerate(as_list(message.get("tool_calls"))):
        call = as_object(item)
        if not call.get("id"):
            call["id"] = f"call_{i}"  # ids are required on the way back; patch the echoed copy too
        function = as_object(call.get("function"))
        arguments, problem = parse_arguments(function.get("arguments"))
        if problem is not None or not isinstance(function.get("arguments"), str):
            # Replay broken arguments as "{}": compatible servers (vLLM, llama.cpp, OpenRouter's
            # non-OpenAI routes) parse history and would reject every later request of the run.
            # The model still learns what was wrong from the error result.
            function["arguments"] = "{}"
        parts.append(ToolCallPart(str(call["id"]), str(function.get("name") or ""), arguments, problem))
    raw.update({key: message[key] for key in _KEPT_KEYS if message.get(key) is not None})
    return ModelResponse(
        message=AssistantMessage(tuple(parts), raw=raw, raw_format="openai"),
        usage=_usage(as_object(data.get("usage"))),
        finish_reason=finish,
    )


def _usage(raw: dict[str, Any]) -> Usage:
    details = as_object(raw.get("prompt_tokens_details"))
    cost = raw.get("cost")
    return Usage(
        input_tokens=as_int(raw.get("prompt_tokens")),
        output_tokens=as_int(raw.get("completion_tokens")),
        cache_read_tokens=as_int(details.get("cached_tokens")),
        cache_write_tokens=as_int(details.get("cache_write_tokens")),
        cost=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
    )


def _json(arguments: dict[str, Any] | None) -> str:
    return json.dumps(arguments or {}, ensure_ascii=False)


class ChatStream(StreamAssembler):
    """Rebuilds a chat.completion from `chat.completion.chunk` events (only choice 0 is read)."""

    def __init__(self, sink: TextSink, parse: Callable[[Mapping[str, Any]], ModelResponse]) -> None:
        super().__init__(sink, parse)
        self._choice_seen = False
        self._finish: str | None = None
        self._content: list[str] = []
        self._reasoning: dict[str, list[str]] = {}
        self._details: dict[int, dict[str, Any]] = {}
        self._calls: list[dict[str, Any]] = []
        self._slots: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] = {}

    def feed(self, event: StreamEvent) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = as_object(event.json())
        if chunk.get("error"):  # OpenAI error object, OpenRouter mid-stream error
            raise StreamErrorEvent(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for item in as_list(chunk.get("choices")):
            choice = as_object(item)
            if as_int(choice.get("index")) != 0:
                continue
            self._choice_seen = True
            self._finish = as_str(choice.get("finish_reason")) or self._finish
            delta = as_object(choice.get("delta"))
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._content.append(text)
                self.sink(text)
            for key in ("reasoning", "reasoning_content"):
                if isinstance(delta.get(key), str) and delta[key]:
                    self._reasoning.setdefault(key, []).append(delta[key])
            for position, detail in enumerate(as_list(delta.get("reasoning_details"))):
                self._merge_detail(as_object(detail), position)
            for fragment in as_list(delta.get("tool_calls")):
                self._merge_call(as_object(fragment))

    def _merge_detail(self, fragment: dict[str, Any], position: int) -> None:
        index = fragment.get("index")
        detail = self._details.setdefault(index if isinstance(index, int) else position, {})
        for key, value in fragment.items():
            if key in ("text", "summary", "data") and isinstance(value, str) and isinstance(detail.get(key), str):
                detail[key] += value
            elif value is not None or key not in detail:
                detail[key] = value

    def _merge_call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        call_id = as_str(fragment.get("id"))
        call = self._slots.get(index) if isinstance(index, int) else (self._calls[-1] if self._calls else None)
        if call is None or (call_id and call["id"] and call_id != call["id"]):
            fresh: dict[str, Any] = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            call = fresh
            self._calls.append(call)
            if isinstance(index, int):
                self._slots[index] = call
        if call_id and not call["id"]:
            call["id"] = call_id
        function = as_object(fragment.get("function"))
        name = as_str(function.get("name"))
        if name and not call["function"]["name"]:
            call["function"]["name"] = name
        arguments = function.get("arguments")
        if object_or_none(arguments) is not None:  # a compatible server sending whole objects
            arguments = _json(as_object(arguments))
        if isinstance(arguments, str):
            call["function"]["arguments"] += arguments

    def result(self) -> ModelResponse:
        if not self.done and self._finish is None:
            raise StreamBrokenError("it ended before [DONE]")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content) or None}
        message.update({key: "".join(pieces) for key, pieces in self._reasoning.items()})
        if self._details:
            message["reasoning_details"] = [self._details[index] for index in sorted(self._details)]
        if self._calls:
            message["tool_calls"] = self._calls
        choices = [{"index": 0, "finish_reason": self._finish, "message": message}] if self._choice_seen else []
        return self.parse({"choices": choices, "usage": self._usage})
