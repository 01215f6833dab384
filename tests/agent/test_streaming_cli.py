"""What `omega-mcp agent` prints while it streams, without streaming, and with --json; the usage line.

In process: `run_prompt` with providers written here (one that streams and then waits for the test,
one that never streams) or the scripted provider, and `run_agent_command` with a mock transport
for the JSON comparisons. Every stream records its writes in one shared log, so the order of
stdout and stderr is checked, not only their contents.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import types

from omega_mcp.agent.command import AgentSettings, RunOptions, run_agent_command, run_prompt
from omega_mcp.agent.output import streams_live, usage_line
from omega_mcp.config import Config
from omega_mcp.messages import AssistantMessage, Message, ModelResponse, RequestSettings, TextPart, ToolSpec, Usage
from omega_mcp.providers.scripted import ScriptedProvider, call, reply, turns
from waits import deadline

SETTINGS = AgentSettings("scripted", "m", "http://127.0.0.1:1", None, None, 10, None, None)
USAGE = re.compile(r"omega-mcp agent: (\d+) turns?, ([\d,]+) in( \((.*)\))? / ([\d,]+) out(, \$[\d.]+)?, \d+\.\d s")


class Host:
    async def list_tools(self) -> list[types.Tool]:
        schema = {"type": "object", "properties": {"value": {"type": "string"}}}
        return [types.Tool(name="echo", description="Echo", input_schema=schema)]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"echoed {arguments}")])


class Log:
    """The writes to stdout and stderr, in the order they happened."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []
        self.written = anyio.Event()

    def stream(self, name: str) -> io.StringIO:
        log = self

        class Recording(io.StringIO):
            def write(self, text: str) -> int:
                log.writes.append((name, text))
                log.written.set()
                return super().write(text)

        return Recording()

    def text(self, name: str) -> str:
        return "".join(text for stream, text in self.writes if stream == name)


def options(*, stream: bool, json_output: bool = False) -> RunOptions:
    return RunOptions(system=None, allowed_tools=None, stream=stream, json_output=json_output)


async def prompt(provider: Any, *, stream: bool, json_output: bool = False) -> tuple[int, Log]:
    log = Log()
    outcome = await run_prompt(
        "go",
        provider=provider,
        tools=Host(),
        settings=SETTINGS,
        options=options(stream=stream, json_output=json_output),
        stdout=log.stream("out"),
        stderr=log.stream("err"),
    )
    return outcome.code, log


class GatedProvider:
    """Streams each turn's text in two pieces, then waits for `release` before the turn ends."""

    name = "gated"

    def __init__(self, replies: list[AssistantMessage]) -> None:
        self.replies = replies
        self.release = anyio.Event()
        self.waiting = anyio.Event()

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
        message = self.replies.pop(0)
        assert on_text is not None
        text = message.text
        on_text(text[: len(text) // 2])
        on_text(text[len(text) // 2 :])
        self.waiting.set()
        await self.release.wait()
        return ModelResponse(message=message, usage=Usage(input_tokens=7, output_tokens=3))

    async def aclose(self) -> None:
        return None


async def test_streamed_text_reaches_stdout_before_the_turn_ends_and_is_not_printed_again() -> None:
    provider = GatedProvider([reply("Hello there")])
    log = Log()
    codes: list[int] = []

    async def run() -> None:
        outcome = await run_prompt(
            "go",
            provider=provider,
            tools=Host(),
            settings=SETTINGS,
            options=options(stream=True),
            stdout=log.stream("out"),
            stderr=log.stream("err"),
        )
        codes.append(outcome.code)

    with deadline(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await provider.waiting.wait()
            assert log.text("out") == "Hello there"  # the turn has not ended: the provider still waits
            assert log.text("err") == ""
            provider.release.set()
    assert codes == [0]
    assert log.text("out") == "Hello there\n"
    assert USAGE.fullmatch(log.text("err").strip())


async def test_text_before_tool_calls_is_streamed_to_stdout_and_ended_before_the_tool_lines() -> None:
    provider = ScriptedProvider(turns([reply("Let me check.", call("echo", {"value": "a"})), "All done."]))
    code, log = await prompt(provider, stream=True)
    assert code == 0
    assert log.text("out") == "Let me check.\nAll done.\n"
    assert log.writes[:4] == [
        ("out", "Let me check."),
        ("out", "\n"),
        ("err", '[tool] echo {"value": "a"}\n'),
        ("err", "[result] echo: echoed {'value': 'a'}\n"),
    ]
    err = log.text("err").splitlines()
    assert "Let me check." not in err and len(err) == 3 and USAGE.fullmatch(err[-1])


async def test_without_streaming_stdout_holds_only_the_final_answer_and_the_rest_goes_to_stderr() -> None:
    provider = ScriptedProvider(turns([reply("Let me check.", call("echo", {"value": "a"})), "All done."]))
    code, log = await prompt(provider, stream=False)
    assert code == 0
    assert log.text("out") == "All done.\n"
    err = log.text("err").splitlines()
    assert err[:3] == ["Let me check.", '[tool] echo {"value": "a"}', "[result] echo: echoed {'value': 'a'}"]
    assert USAGE.fullmatch(err[3]) and len(err) == 4


async def test_a_provider_that_ignores_on_text_still_shows_each_turn_once() -> None:
    class Silent(ScriptedProvider):
        async def request(self, *, on_text: Callable[[str], None] | None = None, **kwargs: Any) -> ModelResponse:
            return await super().request(**kwargs)  # never calls on_text

    provider = Silent(turns([reply("Checking", call("echo", {"value": "a"})), "Answer with\nlines\n"]))
    code, log = await prompt(provider, stream=True)
    assert code == 0
    assert log.text("out") == "Checking\nAnswer with\nlines\n"


async def test_a_failing_streamed_turn_ends_its_line_before_the_error_line() -> None:
    class Breaks(ScriptedProvider):
        async def request(self, *, on_text: Callable[[str], None] | None = None, **kwargs: Any) -> ModelResponse:
            assert on_text is not None
            on_text("half an answ")
            from omega_mcp.errors import ProviderHTTPError

            raise ProviderHTTPError("the stream broke after text was shown")

    code, log = await prompt(Breaks(turns([])), stream=True)
    assert code == 1
    assert log.text("out") == "half an answ\n"
    assert log.text("err") == "omega-mcp agent: the stream broke after text was shown\n"


def openai_reply(content: str | None, calls: list[dict[str, Any]] | None = None) -> httpx2.Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 60}}
    return httpx2.Response(
        200, json={"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": usage}
    )


CALL = [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"value": "x"}'}}]


async def command(tmp_path: Path, **flags: Any) -> tuple[int, str, str, list[dict[str, Any]]]:
    replies = [openai_reply("Let me echo.", CALL), openai_reply("Done.")]
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return replies.pop(0)

    stdout, stderr = io.StringIO(), io.StringIO()
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handle)) as client:
        code = await run_agent_command(
            prompt="do it",
            config=Config(home=tmp_path),
            tools=Host(),
            provider="openai",
            model=None,
            base_url=None,
            max_turns=None,
            no_tools=False,
            allow_tools=None,
            system=None,
            stdout=stdout,
            stderr=stderr,
            environ={"OPENAI_API_KEY": "sk-test"},
            http_client=client,
            **flags,
        )
    return code, stdout.getvalue(), stderr.getvalue(), bodies


@pytest.mark.parametrize("stream", [True, False, None])
async def test_json_output_is_the_same_whether_streaming_was_asked_for_or_not(tmp_path: Path, stream) -> None:
    code, out, err, bodies = await command(tmp_path, json_output=True, stream=stream)
    assert code == 0
    assert all("stream" not in body for body in bodies)  # --json never streams
    data = json.loads(out)
    assert data["output"] == "Done." and data["turns"] == 2
    assert data["usage"]["cache_read_tokens"] == 120 and data["usage"]["cache_write_tokens"] == 0
    reference = await command(tmp_path, json_output=True, stream=False)
    assert json.loads(reference[1]) == data and reference[1] == out
    assert USAGE.fullmatch(err.splitlines()[-1])  # the usage line is on stderr with --json too


async def test_the_usage_line_counts_turns_tokens_and_cache(tmp_path: Path) -> None:
    code, out, err, _bodies = await command(tmp_path, json_output=False, stream=False)
    assert (code, out) == (0, "Done.\n")
    found = USAGE.fullmatch(err.splitlines()[-1])
    assert found is not None, err
    assert found.group(1, 2, 4, 5) == ("2", "200", "120 cached", "20")


def test_the_usage_line_shows_cache_writes_and_cost_only_when_reported() -> None:
    usage = Usage(input_tokens=12_345, output_tokens=456, cache_read_tokens=8_000, cache_write_tokens=1_200)
    assert usage_line(3, usage, 4.21) == "3 turns, 12,345 in (8,000 cached, 1,200 written to cache) / 456 out, 4.2 s"
    assert usage_line(1, Usage(10, 2, cost=0.00125), 0.04) == "1 turn, 10 in / 2 out, $0.0013, 0.0 s"


def test_streaming_is_the_default_for_a_pipe_but_not_for_a_file_or_memory(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe, os.fdopen(read_end) as _reader:
        assert streams_live(pipe)
    with (tmp_path / "out.txt").open("w") as file:
        assert not streams_live(file)
    assert not streams_live(io.StringIO())


async def test_the_final_answer_of_a_streamed_run_is_its_last_text_on_stdout() -> None:
    provider = ScriptedProvider(turns([AssistantMessage((TextPart("one "), TextPart("two"))), "unused"]))
    code, log = await prompt(provider, stream=True)
    assert code == 0 and log.text("out") == "one two\n"
