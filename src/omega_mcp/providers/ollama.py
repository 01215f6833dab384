"""Ollama native chat adapter (`POST {base}/api/chat`).

Ollama sends arguments as objects, and older servers give tool calls no ids: results therefore go
back in call order, each with `tool_name` (and `tool_call_id` only when the call had one).
`done_reason` is `stop` even with tool calls, so calls are detected from `message.tool_calls`.
Token counts may be absent (prompt cache reuse) and count as 0. Local servers need no key; a key
(ollama.com) is sent as a Bearer token.

Ollama streams NDJSON by default, so `"stream": false` is sent unless the caller streams; then the
lines are joined back into the one response the non-streamed request returns (content and thinking
concatenated, tool calls collected, counts from the final `done` line). An `{"error": ...}` line
is an error like any other.
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
    ImagePart,
    Message,
    ModelResponse,
    RequestSettings,
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
from omega_mcp.providers._stream import (
    NDJSONDecoder,
    StreamAssembler,
    StreamBrokenError,
    StreamErrorEvent,
    StreamEvent,
    TextSink,
)

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
        settings: RequestSettings | None = None,
    ) -> ModelResponse:
        if tools is not self._tools_for:
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
            return parse_response(await self._http.post(self.url, body, self.headers))
        body["stream"] = True
        return await self._http.stream(
            self.url, body, self.headers, framing=NDJSONDecoder, assembler=self._assembler, on_text=on_text
        )

    @staticmethod
    def _assembler(sink: TextSink) -> ChatStream:
        return ChatStream(sink, parse_response)


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
    settings: RequestSettings | None = None,
) -> dict[str, Any]:
    """The request body; `tools` is the output of `wire_tools` (omitted entirely when empty).

    This format has no tool choice: "none" offers no tools, "required" is left to the model.
    """
    wire: list[dict[str, Any]] = []
    if system:
        wire.append({"role": "system", "content": system})
    for message in messages:
        match message:
            case UserMessage():
                user: dict[str, Any] = {"role": "user", "content": message.text}
                images = [part.data for part in message.parts if isinstance(part, ImagePart)]
                if images:  # the text parts are `text`; this format takes no audio (the sampler checks first)
                    user["images"] = images
                wire.append(user)
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
                    images = [part.data for part in result.content if isinstance(part, ImagePart)]
                    if images:  # base64, for the multimodal models (others ignore them)
                        tool["images"] = images
                    wire.append(tool)
            case _:
                assert_never(message)
    body: dict[str, Any] = {"model": model, "stream": False, "messages": wire}
    if tools and not (settings is not None and settings.tool_choice == "none"):
        body["tools"] = tools
    options: dict[str, Any] = {}
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    if settings is not None and settings.temperature is not None:
        options["temperature"] = settings.temperature
    if settings is not None and settings.stop:
        options["stop"] = list(settings.stop)
    if options:
        body["options"] = options
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
    message = as_object(copy.deepcopy(data.get("message")))
    parts: list[AssistantPart] = []
    thinking = as_str(message.get("thinking"))
    if thinking:
        parts.append(ThinkingPart(thinking))
    content = as_str(message.get("content"))
    if content:
        parts.append(TextPart(content))
    # What is echoed next turn; the same whether the answer was streamed or not.
    raw: dict[str, Any] = {"role": "assistant", "content": content or ""}
    raw.update({key: message[key] for key in _ECHO_KEYS if message.get(key)})
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


class ChatStream(StreamAssembler):
    """Rebuilds a chat response from NDJSON lines (each a partial response, the last one `done`)."""

    def __init__(self, sink: TextSink, parse: Callable[[Mapping[str, Any]], ModelResponse]) -> None:
        super().__init__(sink, parse)
        self._content: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[Any] = []
        self._last: dict[str, Any] = {}

    def feed(self, event: StreamEvent) -> None:
        line = as_object(event.json())
        if line.get("error"):
            raise StreamErrorEvent(line)
        message = as_object(line.get("message"))
        text = as_str(message.get("content"))
        if text:
            self._content.append(text)
            self.sink(text)
        thinking = as_str(message.get("thinking"))
        if thinking:
            self._thinking.append(thinking)
        self._calls.extend(as_list(message.get("tool_calls")))
        self._last = line
        self.done = line.get("done") is True

    def result(self) -> ModelResponse:
        if not self.done:
            raise StreamBrokenError('it ended before the line with "done": true')
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
        if self._thinking:
            message["thinking"] = "".join(self._thinking)
        if self._calls:
            message["tool_calls"] = self._calls
        return self.parse({**self._last, "message": message})
