"""Gemini `generateContent` adapter (`POST {base}/v1beta/models/{model}:generateContent`).

Roles are only `user` and `model`; the system prompt goes in `systemInstruction`. Tool schemas go
through `parametersJsonSchema` after the Gemini cleanup. `finishReason` is `STOP` even when the
model calls functions, so calls are detected from `functionCall` parts. The model `Content` is
echoed exactly as received so every `thoughtSignature` stays on its part (Gemini 3 rejects a loop
without them); a turn rebuilt from another provider's history gets the documented dummy signature.
All results of a step go back in one `user` Content as `functionResponse` parts with an object
`response` (`{"output": ...}` or `{"error": ...}`), ids echoed only when the call had one.

Streamed (`:streamGenerateContent?alt=sse`), each event is a partial GenerateContentResponse; the
parts are collected into the one Content the non-streamed request returns: pieces of text (or of
a thought) are joined into one part, which takes the `thoughtSignature` a later piece brings
(Gemini sends it last, often with empty text); function calls arrive whole. The last chunk holds
the final `finishReason` and `usageMetadata`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, assert_never
from urllib.parse import quote

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
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
    UserPart,
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
    TextSink,
)

__all__ = ["DUMMY_THOUGHT_SIGNATURE", "GeminiProvider", "build_request", "parse_response"]

DUMMY_THOUGHT_SIGNATURE = "skip_thought_signature_validator"


class GeminiProvider(HttpProvider):
    """The Gemini Developer API, key in `x-goog-api-key`."""

    name = "gemini"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str = "https://generativelanguage.googleapis.com",
        max_tokens: int | None = None,
        client: httpx2.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        super().__init__(client=client, retry=retry, timeout_seconds=timeout_seconds, sleep=sleep)
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        self.headers: dict[str, str] = {"x-goog-api-key": api_key} if api_key else {}
        self._tools_for: Sequence[ToolSpec] | None = None
        self._tools_wire: list[dict[str, Any]] = []

    def url_for(self, model: str, *, stream: bool = False) -> str:
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"{self.base_url}/v1beta/models/{quote(model.removeprefix('models/'), safe='')}:{method}"

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
            system=system,
            messages=messages,
            tools=self._tools_wire,
            max_tokens=self.max_tokens,
            model=model,
            settings=settings,
        )
        if on_text is None:
            return parse_response(await self._http.post(self.url_for(model), body, self.headers))
        return await self._http.stream(
            self.url_for(model, stream=True),
            body,
            self.headers,
            framing=SSEDecoder,
            assembler=self._assembler,
            on_text=on_text,
        )

    @staticmethod
    def _assembler(sink: TextSink) -> GenerateStream:
        return GenerateStream(sink, parse_response)


def wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    if not tools:
        return []
    declarations = [
        {
            "name": tool.name,
            "description": tool.description,
            "parametersJsonSchema": clean_schema(tool.input_schema, "gemini"),
        }
        for tool in tools
    ]
    return [{"functionDeclarations": declarations}]


def _native_media(model: str | None) -> bool:
    """Whether the model takes images inside a `functionResponse` (`parts`, Gemini 3); older models get them
    as parts of the same user turn, after the responses."""
    return model is not None and model.removeprefix("models/").startswith("gemini-3")


def build_request(
    *,
    system: str | None,
    messages: Sequence[Message],
    tools: list[dict[str, Any]],
    max_tokens: int | None = None,
    model: str | None = None,
    settings: RequestSettings | None = None,
) -> dict[str, Any]:
    """The request body (the model is in the URL, and decides where images of tool results go); `tools` is
    the output of `wire_tools`."""
    contents: list[dict[str, Any]] = []
    for message in messages:
        match message:
            case UserMessage():
                contents.append({"role": "user", "parts": [_user_part(part) for part in message.content]})
            case AssistantMessage():
                contents.append(_model_content(message))
            case ToolResultsMessage():
                parts: list[dict[str, Any]] = []
                standalone: list[dict[str, Any]] = []
                for result in message.results:
                    response = {"error": result.text()} if result.is_error else {"output": result.text()}
                    function_response: dict[str, Any] = {"name": result.name, "response": response}
                    if result.call_id:
                        function_response["id"] = result.call_id
                    images = [
                        {"inlineData": {"mimeType": part.mime_type, "data": part.data}}
                        for part in result.content
                        if isinstance(part, ImagePart)
                    ]
                    if images and _native_media(model):
                        function_response["parts"] = images
                    elif images:
                        standalone += [{"text": f"The image{'s' if len(images) > 1 else ''} {result.name} returned:"}]
                        standalone += images
                    parts.append({"functionResponse": function_response})
                contents.append({"role": "user", "parts": parts + standalone})
            case _:
                assert_never(message)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if tools:
        body["tools"] = tools
    config: dict[str, Any] = {}
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    if settings is not None:
        if settings.temperature is not None:
            config["temperature"] = settings.temperature
        if settings.stop:
            config["stopSequences"] = list(settings.stop)
        if settings.tool_choice is not None and tools:
            body["toolConfig"] = {"functionCallingConfig": {"mode": _TOOL_CHOICE[settings.tool_choice]}}
    if config:
        body["generationConfig"] = config
    return body


_TOOL_CHOICE = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def _user_part(part: UserPart) -> dict[str, Any]:
    match part:
        case TextPart():
            return {"text": part.text}
        case ImagePart() | AudioPart():
            return {"inlineData": {"mimeType": part.mime_type, "data": part.data}}
        case _:
            assert_never(part)


def _model_content(message: AssistantMessage) -> dict[str, Any]:
    raw = message.raw_for("gemini")
    if raw is not None and isinstance(raw.get("parts"), list):
        return {"role": "model", "parts": list(raw["parts"])}
    parts: list[dict[str, Any]] = []
    signed = False
    for part in message.parts:
        match part:
            case TextPart():
                if part.text:
                    parts.append({"text": part.text})
            case ThinkingPart():
                continue  # another provider's reasoning cannot be replayed as Gemini thoughts
            case ToolCallPart():
                call: dict[str, Any] = {"name": part.name, "args": part.arguments or {}}
                if part.id:
                    call["id"] = part.id
                wire: dict[str, Any] = {"functionCall": call}
                if not signed:  # the first call of a step must carry a signature
                    wire["thoughtSignature"] = DUMMY_THOUGHT_SIGNATURE
                    signed = True
                parts.append(wire)
            case _:
                assert_never(part)
    return {"role": "model", "parts": parts or [{"text": "(no text)"}]}


def parse_response(data: Mapping[str, Any]) -> ModelResponse:
    """Map a GenerateContentResponse to neutral parts.

    Raises:
        ProviderHTTPError: the prompt was blocked, or the candidate has no content (safety,
            malformed function call, ...).
    """
    candidates = as_list(data.get("candidates"))
    candidate = as_object(candidates[0]) if candidates else {}
    if not candidate:
        reason = as_str(as_object(data.get("promptFeedback")).get("blockReason"))
        if reason:
            raise ProviderHTTPError(f"gemini: the prompt was blocked (blockReason {reason})")
        raise ProviderHTTPError(f"gemini API error: the response has no candidates: {str(data)[:300]}")
    finish = as_str(candidate.get("finishReason"))
    raw_parts = as_list(as_object(candidate.get("content")).get("parts"))
    if not raw_parts and finish not in (None, "STOP"):
        detail = as_str(candidate.get("finishMessage"))
        suffix = f": {detail}" if detail else ""
        raise ProviderHTTPError(f"gemini returned no content (finishReason {finish}){suffix}")
    parts: list[AssistantPart] = []
    for item in raw_parts:
        raw_part = as_object(item)
        text = raw_part.get("text")
        if isinstance(raw_part.get("functionCall"), dict):
            call = as_object(raw_part["functionCall"])
            arguments, problem = parse_arguments(call.get("args"))
            parts.append(ToolCallPart(as_str(call.get("id")), str(call.get("name") or ""), arguments, problem))
        elif isinstance(text, str):
            if raw_part.get("thought"):
                parts.append(ThinkingPart(text))
            elif text:
                parts.append(TextPart(text))
    usage_raw = as_object(data.get("usageMetadata"))
    usage = Usage(
        input_tokens=as_int(usage_raw.get("promptTokenCount")),
        # candidatesTokenCount excludes thinking; bill what was generated.
        output_tokens=as_int(usage_raw.get("candidatesTokenCount")) + as_int(usage_raw.get("thoughtsTokenCount")),
        cache_read_tokens=as_int(usage_raw.get("cachedContentTokenCount")),
    )
    raw = {"role": "model", "parts": raw_parts}
    return ModelResponse(
        message=AssistantMessage(tuple(parts), raw=raw, raw_format="gemini"),
        usage=usage,
        finish_reason=finish,
    )


_TEXT_KEYS = frozenset({"text", "thought", "thoughtSignature"})


class GenerateStream(StreamAssembler):
    """Rebuilds a GenerateContentResponse from its streamed chunks (only candidate 0 is read)."""

    def __init__(self, sink: TextSink, parse: Callable[[Mapping[str, Any]], ModelResponse]) -> None:
        super().__init__(sink, parse)
        self._top: dict[str, Any] = {}
        self._candidate: dict[str, Any] | None = None
        self._parts: list[dict[str, Any]] = []

    def feed(self, event: StreamEvent) -> None:
        chunk = as_object(event.json())
        if chunk.get("error"):
            raise StreamErrorEvent(chunk)
        self._top.update({key: value for key, value in chunk.items() if key != "candidates"})
        for item in as_list(chunk.get("candidates")):
            candidate = as_object(item)
            if as_int(candidate.get("index")) != 0:
                continue
            if self._candidate is None:
                self._candidate = {}
            self._candidate.update({key: value for key, value in candidate.items() if key != "content"})
            for part in as_list(as_object(candidate.get("content")).get("parts")):
                self._add(dict(as_object(part)))

    def _add(self, part: dict[str, Any]) -> None:
        text = part.get("text")
        if isinstance(text, str) and not part.get("thought") and "functionCall" not in part:
            self.sink(text)
        previous = self._parts[-1] if self._parts else None
        if previous is not None and _continues(previous, part):
            previous["text"] += text
            if part.get("thoughtSignature"):
                previous["thoughtSignature"] = part["thoughtSignature"]
        else:
            self._parts.append(part)

    def result(self) -> ModelResponse:
        finished = self._candidate is not None and "finishReason" in self._candidate
        if not finished and not as_object(self._top.get("promptFeedback")).get("blockReason"):
            raise StreamBrokenError("it ended before a finishReason")
        data = dict(self._top)
        if self._candidate is not None:
            data["candidates"] = [{**self._candidate, "content": {"role": "model", "parts": self._parts}}]
        return self.parse(data)


def _continues(previous: dict[str, Any], part: dict[str, Any]) -> bool:
    """`part` is the next piece of `previous`: both text of the same kind, `previous` not yet signed."""
    return (
        previous.keys() <= _TEXT_KEYS
        and part.keys() <= _TEXT_KEYS
        and isinstance(previous.get("text"), str)
        and isinstance(part.get("text"), str)
        and bool(previous.get("thought")) == bool(part.get("thought"))
        and "thoughtSignature" not in previous
    )
