"""The agent loop: infer, run the requested tools, feed the results back, repeat.

Tool calls are detected from the assistant's content, never from a stop reason. The calls of one
turn run concurrently in a task group and their results go back in call order, each with its id.
Unknown tools, unparsable arguments, tool errors, exceptions and timeouts all become error results
the model can act on, and a result too large for the context window is cut in the middle; only
provider failures and the turn limit end the loop with an exception.
When the provider refuses a request because the conversation no longer fits the context window
(`ContextOverflowError`), the oldest tool results are replaced by one-line stubs (the latest turn's
results are kept whenever older ones exist; call ids and order never change, so every wire format
still pairs calls with results), a `ContextElidedEvent` is emitted, and the request is made once
more; a second overflow of that request ends the run. The elided conversation is the one the run
continues with and returns.
The loop knows neither MCP transports nor wire formats: tools come from a `ToolHost`, turns from
a `Provider`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from mcp import types

from omega_mcp.agent.deferred import AgentToolSearch, DeferredTools
from omega_mcp.agent.tools import DEFAULT_MAX_RESULT_CHARS, ToolCatalog, capped, result_parts
from omega_mcp.errors import ContextOverflowError, MaxTurnsExceededError, ProviderError, ToolError
from omega_mcp.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
    message_to_json,
)
from omega_mcp.providers import Provider

__all__ = [
    "DEFAULT_MAX_TURNS",
    "AgentEvent",
    "AgentResult",
    "AgentToolSearch",
    "ContextElidedEvent",
    "TextEvent",
    "ThinkingEvent",
    "ToolCallEvent",
    "ToolHost",
    "ToolResultEvent",
    "elide_tool_results",
    "partial_result",
    "run_agent",
]

DEFAULT_MAX_TURNS = 25
DEFAULT_TOOL_TIMEOUT_SECONDS = 900.0
"""A backstop only: bash (max 600 s) and downstream calls enforce their own, shorter timeouts."""
_PARTIAL = "omega_partial_result"  # attribute on a ProviderError holding the run so far
_ELIDED = "[elided: output of "


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


@dataclass(frozen=True, slots=True)
class ContextElidedEvent:
    """The conversation overflowed the context window: `count` older tool results (`characters` in
    all) were replaced by stubs, and the request is being made once more."""

    count: int
    characters: int


AgentEvent = TextEvent | ThinkingEvent | ToolCallEvent | ToolResultEvent | ContextElidedEvent


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
    turn_usage: tuple[Usage, ...] = ()
    """The usage of each request, in order."""
    tools: ToolsInfo | None = None
    """What the model was offered (None when the run offered no tools)."""

    def to_json(self) -> dict[str, Any]:
        usage = self.usage.to_json()
        if self.turn_usage:
            usage["per_turn"] = [u.to_json() for u in self.turn_usage]
        if self.tools is not None and self.tools.search:
            usage["tool_search"] = self.tools.to_json()
        return {
            "output": self.output,
            "turns": self.turns,
            "usage": usage,
            "messages": [message_to_json(m) for m in self.messages],
        }


@dataclass(frozen=True, slots=True)
class ToolsInfo:
    """The tools of a run: how many were offered, whether tool search was on, and how many the model
    had in full by the last request (the visible ones, `search_tools`, and those found or called)."""

    offered: int
    search: bool
    loaded: int

    def to_json(self) -> dict[str, Any]:
        return {"offered": self.offered, "loaded": self.loaded}


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
    tool_search: AgentToolSearch | None = None,
) -> AgentResult:
    """Run the loop until the model answers without calling tools.

    `allowed_tools`: None offers every tool, an empty sequence none (no `tools` key is sent at
    all), otherwise only the tools matching one of the globs. A tool result whose text exceeds
    `max_result_chars` reaches the model cut in the middle, with its full size. `history` is an
    earlier conversation this prompt continues (a resumed session); the result's `messages` hold it
    too. With `on_text` the provider streams and answer text reaches `on_text` as it arrives.
    A request refused for overflowing the context window is made once more with the older tool
    results elided (`elide_tool_results`, announced by a `ContextElidedEvent`). With `tool_search`
    (and a catalog its mode finds large enough) the model starts with the always-visible tools and
    `search_tools` (`agent/deferred.py`).

    Raises:
        MaxTurnsExceededError: the model still called tools in request number `max_turns`
            (`.result` holds the conversation so far; those calls are not run).
        ContextOverflowError: the conversation did not fit the context window even with older tool
            results elided, or there was nothing to elide.
        ProviderError: the provider failed (after its retries); `partial_result(exc)` gives the
            turns, usage and conversation before the failure.
        ValueError: `max_turns` is less than 1.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    emit = on_event or _ignore
    listed = await tools.list_tools() if allowed_tools is None or len(allowed_tools) > 0 else []
    catalog = ToolCatalog(listed, allowed_tools)
    deferred: DeferredTools | None = None
    if tool_search is not None and DeferredTools.active(listed, catalog, tool_search):
        native = getattr(provider, "defers_tools", False) is True  # an optional capability of a provider
        deferred = DeferredTools(listed, catalog, tool_search, native=native)
    messages: list[Message] = [*history, UserMessage(prompt)]
    usage = Usage()
    per_turn: list[Usage] = []

    def info() -> ToolsInfo | None:
        if not catalog.specs:
            return None
        loaded = deferred.loaded() if deferred is not None else len(catalog.specs)
        return ToolsInfo(len(catalog.specs), deferred is not None, loaded)

    def result(output: str, turn: int, finish_reason: str | None = None) -> AgentResult:
        return AgentResult(output, turn, usage, tuple(messages), finish_reason, tuple(per_turn), info())

    for turn in range(1, max_turns + 1):
        specs = deferred.specs if deferred is not None else catalog.specs
        try:
            response = await _request_fitting(
                provider,
                model=model,
                system=system,
                messages=messages,
                tools=specs,
                catalog=catalog,
                emit=emit,
                on_text=on_text,
            )
        except ProviderError as exc:
            # What the run cost and said so far still matters to the caller (`--json`, billing).
            setattr(exc, _PARTIAL, result("", turn - 1))
            raise
        usage += response.usage
        per_turn.append(response.usage)
        message = response.message
        messages.append(message)
        calls = message.tool_calls
        _emit_parts(message, catalog, emit, final=not calls, run=turn < max_turns)
        if not calls:
            return result(message.text, turn, response.finish_reason)
        if turn == max_turns:
            raise MaxTurnsExceededError(max_turns, result(message.text, turn))
        results = await _run_calls(
            calls,
            tools,
            catalog,
            emit,
            timeout_seconds=tool_timeout_seconds,
            max_result_chars=max_result_chars,
            deferred=deferred,
        )
        messages.append(ToolResultsMessage(results))
    raise AssertionError("unreachable: the last turn either returns or raises")


def partial_result(exc: BaseException) -> AgentResult | None:
    """The run up to a `ProviderError` raised by `run_agent` (None for other exceptions)."""
    result = getattr(exc, _PARTIAL, None)
    return result if isinstance(result, AgentResult) else None


def _ignore(_event: AgentEvent) -> None:
    return None


async def _request_fitting(
    provider: Provider,
    *,
    model: str,
    system: str | None,
    messages: list[Message],
    tools: Sequence[ToolSpec],
    catalog: ToolCatalog,
    emit: Callable[[AgentEvent], None],
    on_text: Callable[[str], None] | None,
) -> ModelResponse:
    """The next turn; on a context overflow, elide older tool results in `messages` and try once more."""
    try:
        return await provider.request(model=model, system=system, messages=messages, tools=tools, on_text=on_text)
    except ContextOverflowError as exc:
        count, characters = elide_tool_results(messages, lambda name: catalog.tool_name(name) or name)
        if count == 0:
            raise ContextOverflowError(
                f"the conversation does not fit the model's context window and has no tool results to elide: {exc}",
                status_code=exc.status_code,
            ) from exc
        emit(ContextElidedEvent(count, characters))
    try:
        return await provider.request(model=model, system=system, messages=messages, tools=tools, on_text=on_text)
    except ContextOverflowError as exc:
        raise ContextOverflowError(
            f"the conversation does not fit the model's context window even with {count} older tool "
            f"result{'' if count == 1 else 's'} elided: {exc}",
            status_code=exc.status_code,
        ) from exc


def elide_tool_results(messages: list[Message], tool_name: Callable[[str], str] = str) -> tuple[int, int]:
    """Replace the oldest tool results of `messages` (in place) by one-line stubs.

    Oldest first, until at least half the characters of the candidates are gone. The candidates are
    the results not yet elided outside the last `ToolResultsMessage` (the latest turn's results),
    or, when there are none, that message's own results. Call ids, names, `is_error` and the order
    of the messages stay as they were. `tool_name` maps a call's wire name to the name shown in the
    stub. Returns how many results were elided and their characters (base64 image data included).
    """
    places = [
        (index, position)
        for index, message in enumerate(messages)
        if isinstance(message, ToolResultsMessage)
        for position, result in enumerate(message.results)
        if not _is_stub(result)
    ]
    last = max((index for index, m in enumerate(messages) if isinstance(m, ToolResultsMessage)), default=-1)
    candidates = [place for place in places if place[0] != last] or places
    total = sum(_size(_result_at(messages, place)) for place in candidates)
    chosen: dict[int, dict[int, ToolResult]] = {}
    removed = 0
    for index, position in candidates:
        if chosen and removed * 2 >= total:
            break
        result = _result_at(messages, (index, position))
        size = _size(result)
        stub = f"{_ELIDED}{tool_name(result.name)}, {size:,} characters, to fit the context window]"
        chosen.setdefault(index, {})[position] = ToolResult(
            result.call_id, result.name, (TextPart(stub),), is_error=result.is_error
        )
        removed += size
    for index, stubs in chosen.items():
        message = messages[index]
        assert isinstance(message, ToolResultsMessage)
        messages[index] = ToolResultsMessage(tuple(stubs.get(i, r) for i, r in enumerate(message.results)))
    return sum(len(stubs) for stubs in chosen.values()), removed


def _result_at(messages: list[Message], place: tuple[int, int]) -> ToolResult:
    message = messages[place[0]]
    assert isinstance(message, ToolResultsMessage)
    return message.results[place[1]]


def _size(result: ToolResult) -> int:
    return sum(
        len(part.text) if isinstance(part, TextPart) else len(part.data) if isinstance(part, ImagePart) else 0
        for part in result.content
    )


def _is_stub(result: ToolResult) -> bool:
    match result.content:
        case (TextPart(text=text),):
            return text.startswith(_ELIDED) and text.endswith("to fit the context window]")
        case _:
            return False


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
    deferred: DeferredTools | None = None,
) -> tuple[ToolResult, ...]:
    results: list[ToolResult | None] = [None] * len(calls)

    async def run_one(index: int, call: ToolCallPart) -> None:
        if deferred is not None and call.name == deferred.search_spec.name and catalog.tool_name(call.name) is None:
            result = deferred.search(call.id, call.name, call.arguments)
        else:
            result = await _run_call(call, tools, catalog, timeout_seconds, max_result_chars)
            if deferred is not None and catalog.tool_name(call.name) is not None:
                deferred.add([call.name])  # a tool called by name joins the following requests
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
