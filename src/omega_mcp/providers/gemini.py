"""Gemini `generateContent` adapter (`POST {base}/v1beta/models/{model}:generateContent`).

Roles are only `user` and `model`; the system prompt goes in `systemInstruction`. Tool schemas go
through `parametersJsonSchema` after the Gemini cleanup. `finishReason` is `STOP` even when the
model calls functions, so calls are detected from `functionCall` parts. The model `Content` is
echoed exactly as received so every `thoughtSignature` stays on its part (Gemini 3 rejects a loop
without them); a turn rebuilt from another provider's history gets the documented dummy signature.
All results of a step go back in one `user` Content as `functionResponse` parts with an object
`response` (`{"output": ...}` or `{"error": ...}`), ids echoed only when the call had one.
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

    def url_for(self, model: str) -> str:
        return f"{self.base_url}/v1beta/models/{quote(model.removeprefix('models/'), safe='')}:generateContent"

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
        body = build_request(system=system, messages=messages, tools=self._tools_wire, max_tokens=self.max_tokens)
        data = await self._http.post(self.url_for(model), body, self.headers)
        return parse_response(data)


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


def build_request(
    *,
    system: str | None,
    messages: Sequence[Message],
    tools: list[dict[str, Any]],
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The request body (the model is in the URL); `tools` is the output of `wire_tools`."""
    contents: list[dict[str, Any]] = []
    for message in messages:
        match message:
            case UserMessage():
                contents.append({"role": "user", "parts": [{"text": message.text}]})
            case AssistantMessage():
                contents.append(_model_content(message))
            case ToolResultsMessage():
                parts: list[dict[str, Any]] = []
                for result in message.results:
                    response = {"error": result.text()} if result.is_error else {"output": result.text()}
                    function_response: dict[str, Any] = {"name": result.name, "response": response}
                    if result.call_id:
                        function_response["id"] = result.call_id
                    parts.append({"functionResponse": function_response})
                contents.append({"role": "user", "parts": parts})
            case _:
                assert_never(message)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if tools:
        body["tools"] = tools
    if max_tokens is not None:
        body["generationConfig"] = {"maxOutputTokens": max_tokens}
    return body


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
