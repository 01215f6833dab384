"""Context overflow: the oldest tool results become stubs and the request is made once more.

The scripted provider raises `ContextOverflowError` the way the HTTP adapters do when a provider
says the conversation is too long; its recorded requests show exactly what the retry sent.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from mcp import types

from omega_mcp.agent.command import AgentSettings, RunOptions, run_prompt
from omega_mcp.agent.loop import AgentEvent, ContextElidedEvent, elide_tool_results, run_agent
from omega_mcp.errors import ContextOverflowError
from omega_mcp.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from omega_mcp.providers.scripted import ScriptedProvider, ScriptedRequest, call, reply

SIZES = {"big": 3000, "mid": 1000, "small": 500}


class Host:
    """Tools whose output is `SIZES[name]` characters long."""

    async def list_tools(self) -> list[types.Tool]:
        schema = {"type": "object", "properties": {}}
        return [types.Tool(name=name, description=name, input_schema=schema) for name in SIZES]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=name[0] * SIZES[name])])


def overflowing(times: int, *, calls: tuple[str, ...] = ("big", "mid", "small")) -> ScriptedProvider:
    """Calls each tool of `calls` in its own turn; the next request overflows `times` times, then the answer."""
    left = [times]

    def script(request: ScriptedRequest) -> Any:
        done = sum(isinstance(m, ToolResultsMessage) for m in request.messages)
        if done < len(calls):
            return reply("", call(calls[done], id=f"id_{calls[done]}"))
        if left[0] > 0:
            left[0] -= 1
            raise ContextOverflowError("prompt is too long: 210000 tokens > 200000 maximum", status_code=400)
        return "it fits now"

    return ScriptedProvider(script)


def results_of(messages: tuple[Message, ...]) -> list[tuple[str | None, str, str]]:
    return [
        (result.call_id, result.name, result.text())
        for message in messages
        if isinstance(message, ToolResultsMessage)
        for result in message.results
    ]


async def test_an_overflow_elides_the_oldest_results_keeps_the_latest_and_retries_once() -> None:
    provider = overflowing(1)
    events: list[AgentEvent] = []
    result = await run_agent("go", provider=provider, tools=Host(), model="m", on_event=events.append)
    assert result.output == "it fits now" and result.turns == 4
    failed, retried = provider.requests[3], provider.requests[4]
    assert results_of(failed.messages) == [
        ("id_big", "big", "b" * 3000),
        ("id_mid", "mid", "m" * 1000),
        ("id_small", "small", "s" * 500),
    ]
    assert results_of(retried.messages) == [
        ("id_big", "big", "[elided: output of big, 3,000 characters, to fit the context window]"),
        ("id_mid", "mid", "m" * 1000),
        ("id_small", "small", "s" * 500),
    ]
    assert [type(m) for m in retried.messages] == [type(m) for m in failed.messages]  # pairing intact
    assert ContextElidedEvent(1, 3000) in events
    assert results_of(result.messages) == results_of(retried.messages)  # the run goes on elided


async def test_a_second_overflow_of_the_same_request_ends_the_run_with_a_clear_error() -> None:
    provider = overflowing(2)
    with pytest.raises(ContextOverflowError) as caught:
        await run_agent("go", provider=provider, tools=Host(), model="m")
    message = str(caught.value)
    assert "does not fit the model's context window even with 1 older tool result elided" in message
    assert "prompt is too long" in message and len(provider.requests) == 5


async def test_through_the_command_the_elision_is_announced_and_a_second_overflow_exits_1() -> None:
    settings = AgentSettings("scripted", "m", "http://127.0.0.1:1", None, None, 10, None, None)
    options = RunOptions(system=None, allowed_tools=None, stream=False, json_output=False)
    for times, code in ((1, 0), (2, 1)):
        stdout, stderr = io.StringIO(), io.StringIO()
        outcome = await run_prompt(
            "go",
            provider=overflowing(times),
            tools=Host(),
            settings=settings,
            options=options,
            stdout=stdout,
            stderr=stderr,
        )
        assert outcome.code == code
        lines = stderr.getvalue().splitlines()
        notice = (
            "omega-mcp agent: the conversation exceeded the model's context window: elided 1 older tool result "
            "(3,000 characters); retrying"
        )
        assert notice in lines and "Traceback" not in stderr.getvalue()
        if code == 0:
            assert stdout.getvalue() == "it fits now\n"
        else:
            assert stdout.getvalue() == ""
            assert lines[-1].startswith("omega-mcp agent: the conversation does not fit the model's context window")
            assert lines[-2].startswith("omega-mcp agent: 3 turns,")  # what the run cost so far


async def test_an_overflow_with_no_tool_results_fails_at_once() -> None:
    provider = overflowing(1, calls=())
    with pytest.raises(ContextOverflowError, match="has no tool results to elide: prompt is too long"):
        await run_agent("go", provider=provider, tools=Host(), model="m")
    assert len(provider.requests) == 1


async def test_when_only_the_latest_turn_has_results_those_are_elided() -> None:
    provider = overflowing(1, calls=("big",))
    result = await run_agent("go", provider=provider, tools=Host(), model="m")
    assert result.output == "it fits now"
    assert results_of(provider.requests[-1].messages) == [
        ("id_big", "big", "[elided: output of big, 3,000 characters, to fit the context window]")
    ]


def conversation(*turns: tuple[tuple[str, int], ...]) -> list[Message]:
    messages: list[Message] = [UserMessage("go")]
    for number, results in enumerate(turns):
        ids = [f"t{number}_{name}" for name, _size in results]
        messages.append(AssistantMessage(tuple(call(name, id=i) for (name, _), i in zip(results, ids, strict=True))))
        messages.append(
            ToolResultsMessage(
                tuple(
                    ToolResult(i, name, (TextPart("x" * size),)) for (name, size), i in zip(results, ids, strict=True)
                )
            )
        )
    return messages


def test_elision_goes_oldest_first_until_half_the_characters_are_gone_and_skips_stubs() -> None:
    messages = conversation((("a", 100), ("b", 100)), (("c", 400),), (("d", 50),), (("latest", 9999),))
    assert elide_tool_results(messages) == (3, 600)  # a, b, c: 600 of 650
    texts = [text for _id, _name, text in results_of(tuple(messages))]
    assert texts[:3] == [
        f"[elided: output of {n}, {s} characters, to fit the context window]"
        for n, s in (("a", 100), ("b", 100), ("c", 400))
    ]
    assert texts[3:] == ["x" * 50, "x" * 9999]
    assert elide_tool_results(messages) == (1, 50)  # the stubs are not elided again
    assert elide_tool_results(messages, lambda name: f"mcp__srv__{name}") == (1, 9999)  # then the latest
    assert results_of(tuple(messages))[-1][2].startswith("[elided: output of mcp__srv__latest, 9,999 characters")
    assert elide_tool_results(messages) == (0, 0)


def test_elision_keeps_ids_names_errors_and_counts_image_data() -> None:
    image = ToolResult("c1", "shot", (ImagePart("image/png", "A" * 800), TextPart("caption")), is_error=True)
    messages: list[Message] = [
        UserMessage("go"),
        AssistantMessage((call("shot", id="c1"),)),
        ToolResultsMessage((image,)),
        AssistantMessage((call("shot", id="c2"),)),
        ToolResultsMessage((ToolResult("c2", "shot", (TextPart("new"),)),)),
    ]
    assert elide_tool_results(messages) == (1, 807)
    stub = messages[2]
    assert isinstance(stub, ToolResultsMessage)
    (elided,) = stub.results
    assert (elided.call_id, elided.name, elided.is_error) == ("c1", "shot", True)
    assert elided.content == (TextPart("[elided: output of shot, 807 characters, to fit the context window]"),)
