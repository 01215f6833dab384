"""The neutral message model shared by `omega_mcp.agent` (the loop) and `omega_mcp.providers` (the adapters).

It lives at the top of the package rather than under `agent/` so the providers depend on it
without importing the agent: `agent` imports `providers`, never the other way round.

Frozen dataclasses, no MCP and no wire format: adapters map them to and from JSON. An assistant
turn keeps the provider's own message (`raw`, tagged with `raw_format`) next to its normalized
parts, because thinking blocks, Gemini thought signatures and OpenRouter reasoning details must be
echoed byte for byte; an adapter rebuilds a turn from its parts only when the raw form is another
provider's. Tool-call names here are the *wire* names the model saw; the loop maps them back.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from omega_mcp.narrow import as_object

__all__ = [
    "AssistantMessage",
    "AssistantPart",
    "ImagePart",
    "Message",
    "ModelResponse",
    "ResultPart",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResult",
    "ToolResultsMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "decoded_size",
    "message_to_json",
    "parse_arguments",
]


@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text, from the model or inside a tool result."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingPart:
    """Reasoning the model exposed; `signature`/`redacted_data` matter only inside `raw`."""

    text: str
    signature: str | None = None
    redacted_data: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """One tool call. `arguments` is None when the model sent something unparsable (`arguments_error`).

    `id` is None when the provider gave none (Ollama, Gemini): results then match by order and name.
    """

    id: str | None
    name: str
    arguments: dict[str, Any] | None
    arguments_error: str | None = None


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image inside a tool result (base64 `data`)."""

    mime_type: str
    data: str

    def describe(self) -> str:
        """A short text stand-in for providers whose tool results are text only."""
        return f"[image: {self.mime_type}, {decoded_size(self.data)} bytes]"


AssistantPart = TextPart | ThinkingPart | ToolCallPart
ResultPart = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """One model turn: normalized `parts`, plus the provider's message JSON to echo verbatim."""

    parts: tuple[AssistantPart, ...]
    raw: Mapping[str, Any] | None = None
    raw_format: str | None = None

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.parts if isinstance(part, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(part for part in self.parts if isinstance(part, ToolCallPart))

    def raw_for(self, raw_format: str) -> Mapping[str, Any] | None:
        """The raw message if it is in `raw_format`, else None (rebuild from parts)."""
        return self.raw if self.raw is not None and self.raw_format == raw_format else None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call, in call order; `name` is the wire name of the call."""

    call_id: str | None
    name: str
    content: tuple[ResultPart, ...]
    is_error: bool = False

    def text(self) -> str:
        """All content as text, images described briefly; never empty."""
        chunks: list[str] = []
        for part in self.content:
            match part:
                case TextPart():
                    chunks.append(part.text)
                case ImagePart():
                    chunks.append(part.describe())
                case _:
                    assert_never(part)
        text = "\n".join(chunks)
        # Some APIs reject empty tool-result text; an explicit marker also reads better to a model.
        return text if text.strip() else "(no output)"


@dataclass(frozen=True, slots=True)
class ToolResultsMessage:
    """Every result of one assistant turn, in the order the calls were made."""

    results: tuple[ToolResult, ...]


Message = UserMessage | AssistantMessage | ToolResultsMessage


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to a model: wire-safe name, description, raw MCP input schema."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts normalized across providers.

    `input_tokens` counts every prompt token (cached ones included, unlike Anthropic's field);
    `output_tokens` includes reasoning (unlike Gemini's `candidatesTokenCount`). `cost` is only
    reported by OpenRouter.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost is None and other.cost is None else (self.cost or 0.0) + (other.cost or 0.0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost=cost,
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }
        if self.cost is not None:
            data["cost"] = self.cost
        return data


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What a provider returns for one request."""

    message: AssistantMessage
    usage: Usage
    finish_reason: str | None = None


def parse_arguments(raw: object) -> tuple[dict[str, Any] | None, str | None]:
    """Tool-call arguments as a dict, or `(None, reason)`. Accepts a JSON string or an object.

    An empty string or null means "no arguments" (models send that for parameterless tools).
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    value: object = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as exc:
            return None, f"the arguments are not valid JSON ({exc}): {_shorten(raw)}"
    arguments = as_object(value)
    if not isinstance(value, dict):
        return None, f"the arguments must be a JSON object, got {type(value).__name__}: {_shorten(str(raw))}"
    return dict(arguments), None


def message_to_json(message: Message) -> dict[str, Any]:
    """A provider-neutral JSON view of a message (for `--json` output and logs)."""
    match message:
        case UserMessage():
            return {"role": "user", "content": message.text}
        case AssistantMessage():
            return {"role": "assistant", "content": [_part_to_json(part) for part in message.parts]}
        case ToolResultsMessage():
            results = [
                {"type": "tool_result", "id": r.call_id, "name": r.name, "is_error": r.is_error, "text": r.text()}
                for r in message.results
            ]
            return {"role": "tool", "content": results}
        case _:
            assert_never(message)


def _part_to_json(part: AssistantPart) -> dict[str, Any]:
    match part:
        case TextPart():
            return {"type": "text", "text": part.text}
        case ThinkingPart():
            return {"type": "thinking", "text": part.text}
        case ToolCallPart():
            data: dict[str, Any] = {"type": "tool_call", "id": part.id, "name": part.name, "arguments": part.arguments}
            if part.arguments_error is not None:
                data["arguments_error"] = part.arguments_error
            return data
        case _:
            assert_never(part)


def decoded_size(data: str) -> int:
    """The byte size of base64 `data` (its length if it is not valid base64)."""
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
