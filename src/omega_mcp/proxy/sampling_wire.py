"""What a sampling request adds to a provider's wire request, beyond the neutral message model.

The providers map `omega_mcp.messages` to their wire formats; a sampling request also carries a
temperature, stop sequences, a tool choice and images (or audio) in user messages, which the
neutral model has no place for. Rather than widen the `Provider` protocol, the sampler's HTTP
client adds them to the JSON body the provider built (`SamplingHTTPClient.build_request`), per
wire format: a user message with media is sent as a unique placeholder text and replaced here by
its content blocks. The options of the request being made live in a context variable, so
concurrent sampling requests share one client (and its connection pool).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp import types

from omega_mcp.narrow import as_list, object_or_none

__all__ = ["MEDIA_PROVIDERS", "OPTIONS", "Block", "SamplingHTTPClient", "WireOptions", "audio_problem"]

Block = types.TextContent | types.ImageContent | types.AudioContent
ToolChoice = Literal["auto", "required", "none"]

MEDIA_PROVIDERS: Mapping[str, frozenset[str]] = {
    "anthropic": frozenset({"image"}),
    "openai": frozenset({"image", "audio"}),
    "openrouter": frozenset({"image", "audio"}),
    "ollama": frozenset({"image"}),
    "gemini": frozenset({"image", "audio"}),
}
"""The media types each wire format takes in a user message."""

_OPENAI_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


@dataclass(frozen=True, slots=True)
class WireOptions:
    """One sampling request's additions to the provider's body."""

    provider: str
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    tool_choice: ToolChoice | None = None
    media: Mapping[str, Sequence[Block]] = field(default_factory=dict[str, Sequence[Block]])
    """Placeholder text → the user message's content blocks."""

    def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of `body` with the options in this provider's format.

        Raises:
            ValueError: a placeholder is not where a user message's text should be.
        """
        out = copy.deepcopy(dict(body))
        match self.provider:
            case "anthropic":
                self._anthropic(out)
            case "openai" | "openrouter":
                self._openai(out)
            case "ollama":
                self._ollama(out)
            case _:
                self._gemini(out)
        return out

    def _anthropic(self, body: dict[str, Any]) -> None:
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.stop:
            body["stop_sequences"] = list(self.stop)
        if self.tool_choice is not None and body.get("tools"):
            body["tool_choice"] = {"type": {"auto": "auto", "required": "any", "none": "none"}[self.tool_choice]}
        for message, blocks, extra in self._placed(body.get("messages"), "content"):
            message["content"] = _with_extra([_anthropic_block(b) for b in blocks], extra)

    def _openai(self, body: dict[str, Any]) -> None:
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.stop:
            body["stop"] = list(self.stop)
        if self.tool_choice is not None and body.get("tools"):
            body["tool_choice"] = self.tool_choice
        for message, blocks, extra in self._placed(body.get("messages"), "content"):
            message["content"] = _with_extra([_openai_part(b) for b in blocks], extra)

    def _ollama(self, body: dict[str, Any]) -> None:
        options = body.setdefault("options", {})
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.stop:
            options["stop"] = list(self.stop)
        if not options:
            del body["options"]
        if self.tool_choice == "none":  # no tool_choice in this format: offer no tools
            body.pop("tools", None)
        for message, blocks, _ in self._placed(body.get("messages"), "content"):
            message["content"] = "\n\n".join(b.text for b in blocks if isinstance(b, types.TextContent))
            message["images"] = [b.data for b in blocks if isinstance(b, types.ImageContent)]

    def _gemini(self, body: dict[str, Any]) -> None:
        config: dict[str, Any] = body.setdefault("generationConfig", {})
        if self.temperature is not None:
            config["temperature"] = self.temperature
        if self.stop:
            config["stopSequences"] = list(self.stop)
        if not config:
            del body["generationConfig"]
        if self.tool_choice is not None and body.get("tools"):
            mode = {"auto": "AUTO", "required": "ANY", "none": "NONE"}[self.tool_choice]
            body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
        for content, blocks, extra in self._placed(body.get("contents"), "parts"):
            content["parts"] = _with_extra([_gemini_part(b) for b in blocks], extra)

    def _placed(self, messages: object, key: str) -> list[tuple[dict[str, Any], Sequence[Block], dict[str, Any]]]:
        """The user messages whose `key` holds a placeholder (as a string, or as one text block),
        with the blocks it stands for and the placeholder block's other keys (a cache breakpoint).

        Raises:
            ValueError: a placeholder was not found exactly once.
        """
        if not self.media:
            return []
        found: list[tuple[dict[str, Any], Sequence[Block], dict[str, Any]]] = []
        for item in as_list(messages):
            message = object_or_none(item)
            if message is None or message.get("role") != "user":
                continue
            text, extra = _placeholder(message.get(key))
            if text is not None and text in self.media:
                found.append((message, self.media[text], extra))
        if len(found) != len(self.media):
            raise ValueError(f"{self.provider}: images could not be placed in the request (its format changed?)")
        return found


def _placeholder(value: object) -> tuple[str | None, dict[str, Any]]:
    """The text of a message's content that is a string or a single text block, and that block's other keys."""
    if isinstance(value, str):
        return value, {}
    blocks = as_list(value)
    block = object_or_none(blocks[0]) if len(blocks) == 1 else None
    if block is None or block.get("type", "text") != "text" or not isinstance(block.get("text"), str):
        return None, {}
    return block["text"], {k: v for k, v in block.items() if k not in ("type", "text")}


def _with_extra(blocks: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """`blocks`, the last carrying `extra` (so a cache breakpoint stays at the end of the message)."""
    if extra and blocks:
        blocks[-1] = {**blocks[-1], **extra}
    return blocks


def _anthropic_block(block: Block) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    return {"type": "image", "source": {"type": "base64", "media_type": block.mime_type, "data": block.data}}


def _openai_part(block: Block) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent):
        return {"type": "image_url", "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"}}
    return {"type": "input_audio", "input_audio": {"data": block.data, "format": _OPENAI_AUDIO[block.mime_type]}}


def _gemini_part(block: Block) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"text": block.text}
    return {"inlineData": {"mimeType": block.mime_type, "data": block.data}}


def audio_problem(provider: str, mime_type: str) -> str | None:
    """Why `provider` cannot take audio of `mime_type` in a user message, or None."""
    if "audio" not in MEDIA_PROVIDERS.get(provider, frozenset()):
        return f"the {provider} provider takes no audio input"
    if provider in ("openai", "openrouter") and mime_type not in _OPENAI_AUDIO:
        return f"the {provider} provider takes wav or mp3 audio only, not {mime_type}"
    return None


OPTIONS: ContextVar[WireOptions | None] = ContextVar("omega_mcp_sampling_options", default=None)
"""The options of the sampling request the current task is making."""


class SamplingHTTPClient(httpx2.AsyncClient):
    """An HTTP client that adds the current sampling request's `OPTIONS` to each JSON body it sends."""

    def build_request(self, method: str, url: httpx2.URL | str, **kwargs: Any) -> httpx2.Request:
        options = OPTIONS.get()
        body = kwargs.get("json")
        if options is not None and isinstance(body, dict):
            kwargs["json"] = options.apply(body)  # pyright: ignore[reportUnknownArgumentType]
        return super().build_request(method, url, **kwargs)
