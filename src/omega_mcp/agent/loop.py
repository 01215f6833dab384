"""The agent loop: infer, run the requested tools, feed the results back, repeat.

Tool calls are detected from the assistant's content, never from a stop reason. The calls of one
turn run concurrently in a task group and their results go back in call order, each with its id.
Unknown tools, unparsable arguments, tool errors, exceptions and timeouts all become error results
the model can act on, and a result too large for the context window is cut in the middle; only
provider failures and the turn limit end the loop with an exception.
The loop knows neither MCP transports nor wire formats: tools come from a `ToolHost`, turns from
a `Provider`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from mcp import types

from omega_mcp.agent.tools import DEFAULT_MAX_RESULT_CHARS, ToolCatalog, capped, result_parts
from omega_mcp.errors import MaxTurnsExceededError, ProviderError, ToolError
from omega_mcp.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResult,
    ToolResultsMessage,
    Usage,
    UserMessage,
    message_to_json,
)
from omega_mcp.providers import Provider

__all__ = [
    "DEFAULT_MAX_TURNS",
    "AgentEvent",
    "AgentResult",
    "TextEvent",
    "ThinkingEvent",
    "ToolCallEvent",
    "ToolHost",
    "ToolResultEvent",
    "partial_result",
    "run_agent",
]

DEFAULT_MAX_TURNS = 25
DEFAULT_TOOL_TIMEOUT_SECONDS = 900.0
"""A backstop only: bash (max 600 s) and downstream calls enforce their own, shorter timeouts."""
_PARTIAL = "omega_partial_result"  # attribute on a ProviderError holding the run so far


class ToolHost(Protocol):
    """Where tools come from (`omega_mcp.toolbox.Toolbox` is one)."""

    async def list_tools(self) -> list[types.Tool]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Run a tool; failures are `is_error` results.

        Raises:
            UnknownToolError: no tool by that name.
        """
        ...


@dataclass(frozen=True, slots=True)
class TextEvent:
    """Assistant text; `final` when it is the answer (no tool calls in that turn)."""

    text: str
    final: bool


@dataclass(frozen=True, slots=True)
class ThinkingEvent:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A call about to run; `name` is the tool's own name when known, else what the model sent.

    `run` is False for the calls of the last allowed turn: the turn limit stops them.
    """

    call_id: str | None
    name: str
    arguments: dict[str, Any] | None
    run: bool = True


@dataclass(frozen=True, slots=True)
class ToolResultEvent:
    call_id: str | None
    name: str
    text: str
    is_error: bool


AgentEvent = TextEvent | ThinkingEvent | ToolCallEvent | ToolResultEvent


@dataclass(frozen=True, slots=True)
class AgentResult:
    """The final answer, the number of model requests, summed usage and the whole conversation.

    `finish_reason` is the provider's own stop reason for the last turn (`length`, `max_tokens`,
    `MAX_TOKENS` mean the answer was cut off), when it gave one.
    """

    output: str
    turns: int
    usage: Usage
    messages: tuple[Message, ...]
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "turns": self.turns,
            "usage": self.usage.to_json(),
            "messages": [message_to_json(m) for m in self.messages],
        }


async def run_agent(
    prompt: str,
    *,
    provider: Provider,
    tools: ToolHost,
    model: str,
    max_turns: int = DEFAULT_MAX_TURNS,
    allowed_tools: Sequence[str] | None = None,
    system: str | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
    tool_timeout_seconds: float = DEFAULT_TOOL_TIMEOUT_SECONDS,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    history: Sequence[Message] = (),
    on_text: Callable[[str], None] | None = None,
) -> AgentResult:
    """Run the loop until the model answers without calling tools.

    `allowed_tools`: None offers every tool, an empty sequence none (no `tools` key is sent at
    all), otherwise only the tools matching one of the globs. A tool result whose text exceeds
    `max_result_chars` reaches the model cut in the middle, with its full size. `history` is an
    earlier conversation this prompt continues (a resumed session); the result's `messages` hold it
    too. With `on_text` the provider streams and answer text reaches `on_text` as it arrives.

    Raises:
        MaxTurnsExceededError: the model still called tools in request number `max_turns`
            (`.result` holds the conversation so far; those calls are not run).
        ProviderError: the provider failed (after its retries); `partial_result(exc)` gives the
            turns, usage and conversation before the failure.
        ValueError: `max_turns` is less than 1.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    emit = on_event or _ignore
    listed = await tools.list_tools() if allowed_tools is None or len(allowed_tools) > 0 else []
    catalog = ToolCatalog(listed, allowed_tools)
    messages: list[Message] = [*history, UserMessage(prompt)]
    usage = Usage()
    for turn in range(1, max_turns + 1):
        try:
            response = await provider.request(
                model=model, system=system, messages=messages, tools=catalog.specs, on_text=on_text
            )
        except ProviderError as exc:
            # What the run cost and said so far still matters to the caller (`--json`, billing).
            setattr(exc, _PARTIAL, AgentResult("", turn - 1, usage, tuple(messages)))
            raise
        usage += response.usage
        message = response.message
        messages.append(message)
        calls = message.tool_calls
        _emit_parts(message, catalog, emit, final=not calls, run=turn < max_turns)
        if not calls:
            return AgentResult(message.text, turn, usage, tuple(messages), response.finish_reason)
        if turn == max_turns:
            partial = AgentResult(message.text, turn, usage, tuple(messages))
            raise MaxTurnsExceededError(max_turns, partial)
        results = await _run_calls(
            calls, tools, catalog, emit, timeout_seconds=tool_timeout_seconds, max_result_chars=max_result_chars
        )
        messages.append(ToolResultsMessage(results))
    raise AssertionError("unreachable: the last turn either returns or raises")


def partial_result(exc: BaseException) -> AgentResult | None:
    """The run up to a `ProviderError` raised by `run_agent` (None for other exceptions)."""
    result = getattr(exc, _PARTIAL, None)
    return result if isinstance(result, AgentResult) else None


def _ignore(_event: AgentEvent) -> None:
    return None


def _emit_parts(
    message: AssistantMessage, catalog: ToolCatalog, emit: Callable[[AgentEvent], None], *, final: bool, run: bool
) -> None:
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:
                emit(TextEvent(part.text, final))
        elif isinstance(part, ThinkingPart):
            if part.text:
                emit(ThinkingEvent(part.text))
        else:
            emit(ToolCallEvent(part.id, catalog.tool_name(part.name) or part.name, part.arguments, run))


async def _run_calls(
    calls: Sequence[ToolCallPart],
    tools: ToolHost,
    catalog: ToolCatalog,
    emit: Callable[[AgentEvent], None],
    *,
    timeout_seconds: float,
    max_result_chars: int,
) -> tuple[ToolResult, ...]:
    results: list[ToolResult | None] = [None] * len(calls)

    async def run_one(index: int, call: ToolCallPart) -> None:
        result = await _run_call(call, tools, catalog, timeout_seconds, max_result_chars)
        results[index] = result
        emit(ToolResultEvent(call.id, catalog.tool_name(call.name) or call.name, result.text(), result.is_error))

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            group.start_soon(run_one, index, call)
    return tuple(r for r in results if r is not None)


async def _run_call(
    call: ToolCallPart, tools: ToolHost, catalog: ToolCatalog, timeout_seconds: float, max_result_chars: int
) -> ToolResult:
    def error(text: str) -> ToolResult:
        return ToolResult(call.id, call.name, (TextPart(text),), is_error=True)

    name = catalog.tool_name(call.name)
    if name is None:
        return error(catalog.unknown_message(call.name))
    if call.arguments is None:
        return error(
            f"Could not run {call.name}: {call.arguments_error or 'the arguments are invalid'}. "
            "Call the tool again with a JSON object matching its input schema."
        )
    outcome: types.CallToolResult | None = None
    try:
        with anyio.move_on_after(timeout_seconds):
            outcome = await tools.call_tool(name, call.arguments)
    except ToolError as exc:  # UnknownToolError included: the host's namespace changed under us
        return error(str(exc))
    except Exception as exc:  # boundary: a broken tool must not end the conversation
        return error(f"{call.name} failed: {type(exc).__name__}: {exc}")
    if outcome is None:
        return error(f"{call.name} timed out after {timeout_seconds:g} s")
    content = capped(result_parts(outcome), max_result_chars)
    return ToolResult(call.id, call.name, content, is_error=bool(outcome.is_error))
