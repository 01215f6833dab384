"""A provider whose replies come from a Python function: for tests and demos, no HTTP.

The script receives every request (model, system, messages, tools) and returns the next assistant
turn as a `ModelResponse`, an `AssistantMessage`, or plain text for a final answer; it may be sync
or async (async scripts can block on events, which is how tests prove tool calls run concurrently).
`turns()` builds a script from a fixed list of replies. Every request is recorded in `requests`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omega_mcp.errors import ProviderHTTPError
from omega_mcp.messages import (
    AssistantMessage,
    AssistantPart,
    Message,
    ModelResponse,
    RequestSettings,
    TextPart,
    ToolCallPart,
    ToolSpec,
    Usage,
)

__all__ = ["Reply", "ScriptedProvider", "ScriptedRequest", "call", "reply", "turns"]

Reply = ModelResponse | AssistantMessage | str
Script = Callable[["ScriptedRequest"], Reply | Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class ScriptedRequest:
    """One request as the loop made it."""

    model: str
    system: str | None
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    settings: RequestSettings | None = None


class ScriptedProvider:
    """Implements the `Provider` protocol by calling `script`."""

    name = "scripted"

    def __init__(self, script: Script, *, usage: Usage | None = None, defers_tools: bool = False) -> None:
        self.defers_tools = defers_tools
        """Act as a provider that loads deferred tools itself (as Anthropic's adapter does)."""
        self._script = script
        self._usage = usage or Usage(input_tokens=10, output_tokens=5)
        self.requests: list[ScriptedRequest] = []

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
        seen = ScriptedRequest(model, system, tuple(messages), tuple(tools), settings)
        self.requests.append(seen)
        produced = self._script(seen)
        answer: Reply = await produced if inspect.isawaitable(produced) else produced  # pyright: ignore[reportGeneralTypeIssues]
        if isinstance(answer, str):
            answer = reply(answer)
        response = answer if isinstance(answer, ModelResponse) else ModelResponse(message=answer, usage=self._usage)
        if on_text is not None:  # "streams" the answer text, as an HTTP provider would
            for part in response.message.parts:
                if isinstance(part, TextPart) and part.text:
                    on_text(part.text)
        return response

    async def aclose(self) -> None:
        return None


def call(name: str, arguments: Mapping[str, Any] | None = None, *, id: str | None = None) -> ToolCallPart:
    """A tool-call part (the `id` defaults to one derived from the name)."""
    return ToolCallPart(id or f"call_{name}", name, dict(arguments or {}))


def reply(text: str = "", *calls: ToolCallPart | AssistantPart) -> AssistantMessage:
    """An assistant turn with optional text followed by tool calls."""
    parts: list[AssistantPart] = [TextPart(text)] if text else []
    parts.extend(calls)
    return AssistantMessage(tuple(parts))


def turns(replies: Iterable[Reply]) -> Script:
    """A script that returns `replies` in order, then fails clearly if asked for more."""
    pending = list(replies)

    def script(_request: ScriptedRequest) -> Reply:
        if not pending:
            raise ProviderHTTPError("scripted provider: no more scripted replies")
        return pending.pop(0)

    return script
