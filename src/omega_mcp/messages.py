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
from typing import Any, Literal, assert_never

from omega_mcp.narrow import as_list, as_object, as_str, object_or_none

__all__ = [
    "AssistantMessage",
    "AssistantPart",
    "AudioPart",
    "ImagePart",
    "Message",
    "ModelResponse",
    "RequestSettings",
    "ResultPart",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolChoice",
    "ToolReferencePart",
    "ToolResult",
    "ToolResultsMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "UserPart",
    "decoded_size",
    "message_from_json",
    "message_to_json",
    "message_to_record",
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
    """An image inside a tool result or a user message (base64 `data`)."""

    mime_type: str
    data: str

    def describe(self) -> str:
        """A short text stand-in for providers whose tool results are text only."""
        return f"[image: {self.mime_type}, {decoded_size(self.data)} bytes]"


@dataclass(frozen=True, slots=True)
class ToolReferencePart:
    """A deferred tool that a tool search returned (`tool_name` is its wire name): Anthropic loads
    its definition (`tool_reference`); other providers see one line of text."""

    tool_name: str

    def describe(self) -> str:
        return f"[tool available: {self.tool_name}]"


@dataclass(frozen=True, slots=True)
class AudioPart:
    """Audio inside a user message (base64 `data`): sampling requests carry it; the providers whose
    wire format takes audio map it, the others are never sent one (`providers.media_problem`)."""

    mime_type: str
    data: str


AssistantPart = TextPart | ThinkingPart | ToolCallPart
ResultPart = TextPart | ImagePart | ToolReferencePart
UserPart = TextPart | ImagePart | AudioPart


@dataclass(frozen=True, slots=True)
class UserMessage:
    """What the user says: `text`, or with media, `parts` (text, images, audio in their order;
    `text` is then the text parts joined, for logs and text-only views)."""

    text: str
    parts: tuple[UserPart, ...] = ()

    @classmethod
    def of(cls, parts: tuple[UserPart, ...]) -> UserMessage:
        """A user message of `parts`: plain text when they are all text, else the parts themselves."""
        text = "\n\n".join(part.text for part in parts if isinstance(part, TextPart))
        media = any(not isinstance(part, TextPart) for part in parts)
        return cls(text, parts if media else ())

    @property
    def content(self) -> tuple[UserPart, ...]:
        """The message's parts in order (one text part for a plain message)."""
        return self.parts or (TextPart(self.text),)


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
                case ToolReferencePart():
                    continue  # the search's own text names the tools
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
ToolChoice = Literal["auto", "required", "none"]


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """How one request should be answered, beyond its messages and tools (sampling requests set them).

    `tool_choice`: "required" makes the model call a tool, "none" forbids it; each adapter maps it
    only when tools are offered. A provider maps every field it has a place for in its own format.
    """

    temperature: float | None = None
    stop: tuple[str, ...] = ()
    tool_choice: ToolChoice | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to a model: wire-safe name, description, raw MCP input schema.

    `deferred`: sent for a provider that loads it only when a tool search returns it (Anthropic's
    `defer_loading`); the loop sends deferred specs only to a provider with `defers_tools`.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    deferred: bool = False


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


def message_to_record(message: Message) -> dict[str, Any]:
    """A lossless JSON view of a message (saved sessions): `message_from_json` rebuilds it equal.

    It extends `message_to_json` with what a provider echoes byte for byte (the raw turn, thinking
    signatures, redacted thinking) and with tool results' parts (images included) instead of their text.
    """
    match message:
        case UserMessage():
            record = message_to_json(message)
            if message.parts:
                record["parts"] = [_content_part_to_record(part) for part in message.parts]
            return record
        case AssistantMessage():
            data: dict[str, Any] = {"role": "assistant", "content": [_part_to_record(p) for p in message.parts]}
            if message.raw is not None:
                data["raw"] = message.raw
                data["raw_format"] = message.raw_format
            return data
        case ToolResultsMessage():
            results = [
                {
                    "type": "tool_result",
                    "id": r.call_id,
                    "name": r.name,
                    "is_error": r.is_error,
                    "content": [_content_part_to_record(part) for part in r.content],
                }
                for r in message.results
            ]
            return {"role": "tool", "content": results}
        case _:
            assert_never(message)


def _part_to_record(part: AssistantPart) -> dict[str, Any]:
    data = _part_to_json(part)
    if isinstance(part, ThinkingPart):
        if part.signature is not None:
            data["signature"] = part.signature
        if part.redacted_data is not None:
            data["redacted_data"] = part.redacted_data
    return data


def _content_part_to_record(part: UserPart | ResultPart) -> dict[str, Any]:
    """A user message's or a tool result's part, as `message_from_json` reads it back."""
    match part:
        case TextPart():
            return {"type": "text", "text": part.text}
        case ImagePart():
            return {"type": "image", "mime_type": part.mime_type, "data": part.data}
        case AudioPart():
            return {"type": "audio", "mime_type": part.mime_type, "data": part.data}
        case ToolReferencePart():
            return {"type": "tool_reference", "tool_name": part.tool_name}
        case _:
            assert_never(part)


def message_from_json(data: object) -> Message:
    """The message a `message_to_record` (or `message_to_json`) dict describes.

    From `message_to_json`'s lossy view a tool result comes back as its text and a turn without
    its raw form.

    Raises:
        ValueError: `data` is not a message in either shape (the message says what is wrong).
    """
    item = object_or_none(data)
    if item is None:
        raise ValueError(f"a message must be a JSON object, got {type(data).__name__}")
    role = item.get("role")
    content = item.get("content")
    if role == "user":
        if not isinstance(content, str):
            raise ValueError("a user message needs text content")
        if "parts" not in item:
            return UserMessage(content)
        return UserMessage(content, tuple(_user_part_from_json(part) for part in _array(item["parts"], "user")))
    if role == "assistant":
        raw = object_or_none(item.get("raw"))
        if raw is None and item.get("raw") is not None:
            raise ValueError("an assistant message's raw form must be a JSON object")
        raw_format = as_str(item.get("raw_format")) if raw is not None else None
        parts = tuple(_part_from_json(part) for part in _array(content, "assistant"))
        return AssistantMessage(parts, raw=raw, raw_format=raw_format)
    if role == "tool":
        return ToolResultsMessage(tuple(_result_from_json(result) for result in _array(content, "tool")))
    raise ValueError(f"unknown message role {role!r}")


def _array(value: object, role: str) -> list[Any]:
    items = as_list(value)
    if not items and value != []:
        raise ValueError(f"a {role} message needs a list of content parts")
    return items


def _text(item: dict[str, Any], key: str = "text") -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ValueError(f"a {item.get('type')} part needs a string {key!r}")
    return value


def _optional_str(item: dict[str, Any], key: str) -> str | None:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key!r} must be a string")
    return value


def _part_from_json(value: object) -> AssistantPart:
    item = as_object(value)
    kind = item.get("type")
    if kind == "text":
        return TextPart(_text(item))
    if kind == "thinking":
        signature, redacted = _optional_str(item, "signature"), _optional_str(item, "redacted_data")
        return ThinkingPart(_text(item), signature=signature, redacted_data=redacted)
    if kind == "tool_call":
        arguments = object_or_none(item.get("arguments"))
        if arguments is None and item.get("arguments") is not None:
            raise ValueError("a tool call's arguments must be a JSON object or null")
        return ToolCallPart(
            _optional_str(item, "id"), _text(item, "name"), arguments, _optional_str(item, "arguments_error")
        )
    raise ValueError(f"unknown assistant part type {kind!r}")


def _user_part_from_json(value: object) -> UserPart:
    item = as_object(value)
    kind = item.get("type")
    if kind == "text":
        return TextPart(_text(item))
    if kind == "image":
        return ImagePart(_text(item, "mime_type"), _text(item, "data"))
    if kind == "audio":
        return AudioPart(_text(item, "mime_type"), _text(item, "data"))
    raise ValueError(f"unknown user part type {kind!r}")


def _result_from_json(value: object) -> ToolResult:
    item = as_object(value)
    if item.get("type") != "tool_result":
        raise ValueError(f"unknown tool message part type {item.get('type')!r}")
    parts: list[ResultPart] = []
    if "content" in item:
        for part in _array(item["content"], "tool result"):
            entry = as_object(part)
            if entry.get("type") == "text":
                parts.append(TextPart(_text(entry)))
            elif entry.get("type") == "image":
                parts.append(ImagePart(_text(entry, "mime_type"), _text(entry, "data")))
            elif entry.get("type") == "tool_reference":
                parts.append(ToolReferencePart(_text(entry, "tool_name")))
            else:
                raise ValueError(f"unknown tool result part type {entry.get('type')!r}")
    else:
        parts.append(TextPart(_text(item)))
    is_error = item.get("is_error") is True
    return ToolResult(_optional_str(item, "id"), _text(item, "name"), tuple(parts), is_error=is_error)


def decoded_size(data: str) -> int:
    """The byte size of base64 `data` (its length if it is not valid base64)."""
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
