"""Sampling answered by omega's own LLM provider (`[sampling]` in servers.toml).

With `[sampling] provider = ...`, a downstream's `sampling/createMessage` is answered through
omega's provider when the client cannot sample (`mode = "fallback"`, the default) or always
(`mode = "always"`); `client_requests.py` decides which. Only the servers named in `allow` may
spend the user's tokens (none until configured); any other gets a JSON-RPC error (code -1, the
spec's "rejected" code) naming the setting. Every request is logged on stderr (INFO) with the
server's name, the model and the tokens it cost.

The request is mapped to the neutral messages of `omega_mcp.messages` and back: text, images (and
audio where the wire format takes it) in user messages, `tool_use` / `tool_result` content with the
request's `tools`; `systemPrompt`, `maxTokens` (capped by `max_tokens` in `[sampling]`),
`temperature`, `stopSequences` and `toolChoice` are honoured (as `RequestSettings`, which each
provider maps in its own module, like the media parts of user messages); a model that refuses a
temperature or stop sequences (400: the reasoning models) is asked once more without them, and
Anthropic's API version 2026-10-21, which refuses any temperature, is sent none. The model: a
`modelPreferences` hint that names (a part of) a configured model picks it; otherwise a high
`intelligencePriority` picks `model_complex`, a high `speedPriority` `model_fast`, else `model`
(each falling back as in `[agent]`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from typing import Literal, Self

import httpx2
from mcp import types

from omega_mcp.errors import ProviderError, ProviderHTTPError
from omega_mcp.messages import (
    AssistantMessage,
    AssistantPart,
    AudioPart,
    ImagePart,
    Message,
    ModelResponse,
    RequestSettings,
    ResultPart,
    TextPart,
    ToolCallPart,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    UserMessage,
    UserPart,
    decoded_size,
)
from omega_mcp.providers import RetryPolicy, create_provider, media_problem
from omega_mcp.proxy.client_requests import SamplingAnswer

__all__ = ["REFUSED", "ProviderSampler", "SamplingSettings", "choose_model"]

logger = logging.getLogger(__name__)

REFUSED = -1
"""The JSON-RPC error code of a sampling request omega will not answer (the spec's "user rejected")."""
_HIGH = 0.5
_NO_TEMPERATURE_VERSION = "2026-10-21"
_REJECTED = re.compile(r"temperature|stop", re.IGNORECASE)
_STOP_REASONS = {
    "end_turn": "endTurn",
    "stop": "endTurn",
    "STOP": "endTurn",
    "stop_sequence": "stopSequence",
    "max_tokens": "maxTokens",
    "length": "maxTokens",
    "MAX_TOKENS": "maxTokens",
}


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """`[sampling]`, resolved (keys and base URLs as for the agent; `cli/toolbox.py` resolves them)."""

    provider: str
    model: str
    model_fast: str
    model_complex: str
    base_url: str
    api_key: str | None
    mode: Literal["fallback", "always"] = "fallback"
    allow: frozenset[str] = frozenset()
    max_tokens: int | None = None
    anthropic_version: str | None = None


def choose_model(settings: SamplingSettings, preferences: types.ModelPreferences | None) -> str:
    """The configured model a request's `modelPreferences` point to (see the module docstring)."""
    if preferences is None:
        return settings.model
    configured = dict.fromkeys((settings.model, settings.model_fast, settings.model_complex))
    for hint in preferences.hints or ():
        name = (hint.name or "").casefold()
        match = next((model for model in configured if name and name in model.casefold()), None)
        if match is not None:
            return match
    speed, intelligence = preferences.speed_priority or 0.0, preferences.intelligence_priority or 0.0
    if intelligence >= _HIGH and intelligence > speed:
        return settings.model_complex
    if speed >= _HIGH and speed > intelligence:
        return settings.model_fast
    return settings.model


class ProviderSampler:
    """Answers sampling requests with one provider; an async context manager (closes its HTTP client).

    With `problem` (a `[sampling]` that could not be resolved, e.g. its API key is not set) every
    request is refused with that reason. `transport` and `retry` are for tests.
    """

    def __init__(
        self,
        settings: SamplingSettings | None,
        *,
        problem: str | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.settings = settings
        self.problem = problem
        self._retry = retry
        timeout = httpx2.Timeout(600.0, connect=30.0)
        self._client = httpx2.AsyncClient(transport=transport, timeout=timeout, trust_env=transport is None)

    @property
    def always(self) -> bool:
        return self.settings is not None and self.settings.mode == "always"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def sample(self, server_name: str, params: types.CreateMessageRequestParams) -> SamplingAnswer:
        """The provider's answer, or a JSON-RPC error saying why there is none."""
        settings = self.settings
        if settings is None:
            return self._refuse(server_name, f"[sampling] in servers.toml is not usable: {self.problem}")
        if server_name not in settings.allow:
            return self._refuse(
                server_name,
                f"server {server_name} may not use omega's [sampling] provider: add it to `allow` in "
                f'[sampling] of servers.toml (allow = ["{server_name}"])',
            )
        try:
            messages = _to_neutral(params, settings.provider)
        except ValueError as exc:
            message = f"omega's {settings.provider} provider cannot take this request from server {server_name}: {exc}"
            logger.info("sampling: %s", message)
            return types.ErrorData(code=types.INVALID_PARAMS, message=message)
        model = choose_model(settings, params.model_preferences)
        max_tokens = min(params.max_tokens, settings.max_tokens or params.max_tokens)
        tools = [ToolSpec(t.name, t.description or "", t.input_schema) for t in params.tools or ()]
        choice = params.tool_choice.mode if params.tool_choice is not None else None
        temperature = params.temperature
        if settings.provider == "anthropic" and (settings.anthropic_version or "") >= _NO_TEMPERATURE_VERSION:
            temperature = None  # that API version answers 400 to any temperature
        request = RequestSettings(temperature, tuple(params.stop_sequences or ()), choice)
        provider = create_provider(
            settings.provider,
            api_key=settings.api_key,
            base_url=settings.base_url,
            client=self._client,
            retry=self._retry,
            anthropic_version=settings.anthropic_version,
            max_tokens=max_tokens,
        )

        async def ask(request: RequestSettings) -> ModelResponse:
            return await provider.request(
                model=model, system=params.system_prompt, messages=messages, tools=tools, settings=request
            )

        try:
            try:
                response = await ask(request)
            except ProviderHTTPError as exc:
                if (
                    exc.status_code != 400
                    or not _REJECTED.search(str(exc))
                    or not (temperature is not None or request.stop)
                ):
                    raise
                # Reasoning models refuse a temperature or stop sequences: the answer matters more.
                logger.info(
                    "sampling for server %s: %s %s refused temperature or stop sequences; asking without",
                    server_name,
                    settings.provider,
                    model,
                )
                response = await ask(replace(request, temperature=None, stop=()))
        except ProviderError as exc:
            logger.warning("sampling for server %s failed (%s %s): %s", server_name, settings.provider, model, exc)
            text = f"omega's {settings.provider} provider could not answer the request of server {server_name}: {exc}"
            return types.ErrorData(code=types.INTERNAL_ERROR, message=text)
        finally:
            await provider.aclose()
        usage = response.usage
        logger.info(
            "sampling for server %s answered by %s %s (%d tokens in, %d out)",
            server_name,
            settings.provider,
            model,
            usage.input_tokens,
            usage.output_tokens,
        )
        return _to_mcp(response, model, with_tools=bool(params.tools or params.tool_choice))

    def _refuse(self, server_name: str, message: str) -> types.ErrorData:
        logger.info("sampling for server %s refused: %s", server_name, message)
        return types.ErrorData(code=REFUSED, message=message)


# -- MCP sampling messages <-> neutral messages -----------------------------------------------


def _to_neutral(params: types.CreateMessageRequestParams, provider: str) -> list[Message]:
    """The conversation as neutral messages (media in user messages as their parts, in order).

    Raises:
        ValueError: content the provider cannot take, or tool content out of place.
    """
    messages: list[Message] = []
    names: dict[str, str] = {}  # tool_use id -> tool name, for the results
    for message in params.messages:
        blocks = message.content_as_list
        if message.role == "assistant":
            messages.append(AssistantMessage(tuple(_assistant_part(block, names) for block in blocks)))
            continue
        results = [block for block in blocks if isinstance(block, types.ToolResultContent)]
        if results:
            if len(results) != len(blocks):
                raise ValueError("a user message with tool_result content may hold nothing else")
            messages.append(ToolResultsMessage(tuple(_tool_result(r, names) for r in results)))
            continue
        messages.append(UserMessage.of(tuple(_user_part(block, provider) for block in blocks)))
    return messages


def _user_part(block: types.SamplingMessageContentBlock, provider: str) -> UserPart:
    match block:
        case types.TextContent():
            return TextPart(block.text)
        case types.ImageContent():
            return _checked(ImagePart(block.mime_type, block.data), provider)
        case types.AudioContent():
            return _checked(AudioPart(block.mime_type, block.data), provider)
        case types.ToolUseContent():
            raise ValueError("tool_use content belongs in an assistant message")
        case types.ToolResultContent():
            raise ValueError("a user message with tool_result content may hold nothing else")


def _checked(part: ImagePart | AudioPart, provider: str) -> ImagePart | AudioPart:
    problem = media_problem(provider, part)
    if problem is not None:
        raise ValueError(problem)
    return part


def _assistant_part(block: types.SamplingMessageContentBlock, names: dict[str, str]) -> AssistantPart:
    match block:
        case types.TextContent():
            return TextPart(block.text)
        case types.ToolUseContent():
            names[block.id] = block.name
            return ToolCallPart(block.id, block.name, dict(block.input))
        case types.ImageContent() | types.AudioContent():
            return TextPart(f"[{block.type}: {block.mime_type}, {decoded_size(block.data)} bytes]")
        case types.ToolResultContent():
            raise ValueError("tool_result content belongs in a user message")


def _tool_result(result: types.ToolResultContent, names: dict[str, str]) -> ToolResult:
    parts: list[ResultPart] = []
    for block in result.content:
        match block:
            case types.TextContent():
                parts.append(TextPart(block.text))
            case types.ImageContent():
                parts.append(ImagePart(block.mime_type, block.data))
            case types.AudioContent():
                parts.append(TextPart(f"[audio: {block.mime_type}, {decoded_size(block.data)} bytes]"))
            case types.ResourceLink():
                parts.append(TextPart(f"[resource: {block.uri}]"))
            case types.EmbeddedResource():
                resource = block.resource
                text = getattr(resource, "text", None)
                parts.append(TextPart(text if isinstance(text, str) else f"[resource: {resource.uri}]"))
    if not parts and result.structured_content is not None:
        parts.append(TextPart(json.dumps(result.structured_content)))
    name = names.get(result.tool_use_id, "tool")
    return ToolResult(result.tool_use_id, name, tuple(parts), is_error=bool(result.is_error))


def _to_mcp(response: ModelResponse, model: str, *, with_tools: bool) -> SamplingAnswer:
    content: list[types.SamplingMessageContentBlock] = []
    calls = 0
    for part in response.message.parts:
        if isinstance(part, TextPart) and part.text:
            content.append(types.TextContent(text=part.text))
        elif isinstance(part, ToolCallPart):
            calls += 1
            call_id = part.id or f"call_{calls}"
            content.append(types.ToolUseContent(id=call_id, name=part.name, input=part.arguments or {}))
    reason = response.finish_reason
    stop = "toolUse" if calls else _STOP_REASONS.get(reason or "", reason)
    if with_tools:
        return types.CreateMessageResultWithTools(
            role="assistant", content=content or [types.TextContent(text="")], model=model, stop_reason=stop
        )
    text = "".join(block.text for block in content if isinstance(block, types.TextContent))
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(text=text), model=model, stop_reason=stop
    )
