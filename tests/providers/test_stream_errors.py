"""Streaming failures: what is retried (only while no text was shown), what says it broke, bounded reads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest
from stream_support import (
    CASES,
    FIRST_PIECE_AT,
    PIECES,
    SECOND_PIECE_AT,
    SSE,
    TEXT,
    TOOLS,
    Case,
    Recorder,
    data_events,
    named_events,
    streamed_response,
)

from omega_mcp.errors import ContextOverflowError, ProviderAuthError, ProviderHTTPError
from omega_mcp.messages import UserMessage
from omega_mcp.providers import RetryPolicy
from waits import deadline


async def ask(case: Case, fake: Recorder, pieces: list[str], **options: Any) -> Any:
    provider = case.provider(fake.client, sleep=fake.sleep, **options)
    with deadline(10):
        return await provider.request(
            model="m", system=None, messages=[UserMessage("go")], tools=TOOLS, on_text=pieces.append
        )


@pytest.mark.parametrize("name", list(CASES))
async def test_a_stream_cut_before_any_text_is_retried_as_a_whole(name: str) -> None:
    case = CASES[name]
    cut = case.stream[: case.stream.index(FIRST_PIECE_AT)]  # ends inside the first text event
    fake = Recorder(case.streamed(cut), case.streamed())
    pieces: list[str] = []
    response = await ask(case, fake, pieces)
    assert response.message.text == TEXT
    assert pieces == list(PIECES)  # nothing twice
    assert len(fake.requests) == 2


@pytest.mark.parametrize("name", list(CASES))
async def test_a_stream_cut_after_text_was_shown_is_a_clear_error_not_a_retry(name: str) -> None:
    case = CASES[name]
    cut = case.stream[: case.stream.index(SECOND_PIECE_AT)]
    fake = Recorder(case.streamed(cut), case.streamed())
    pieces: list[str] = []
    with pytest.raises(ProviderHTTPError, match=f"the stream from {name} broke after text was shown: .*broke"):
        await ask(case, fake, pieces)
    assert pieces == [PIECES[0]]
    assert len(fake.requests) == 1


async def test_a_transport_error_mid_stream_is_retried_only_before_text() -> None:
    case = CASES["openai"]

    def breaking(after: bytes) -> httpx2.Response:
        async def body() -> AsyncIterator[bytes]:
            yield after
            raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")

        return httpx2.Response(200, headers={"content-type": SSE}, content=body())

    early = case.stream[: case.stream.index(FIRST_PIECE_AT) - 10]
    fake = Recorder(breaking(early), case.streamed())
    pieces: list[str] = []
    assert (await ask(case, fake, pieces)).message.text == TEXT
    assert len(fake.requests) == 2

    late = case.stream[: case.stream.index(SECOND_PIECE_AT)]
    fake = Recorder(breaking(late), case.streamed())
    with pytest.raises(ProviderHTTPError, match=r"broke after text was shown: .*RemoteProtocolError"):
        await ask(case, fake, [])
    assert len(fake.requests) == 1


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_prefix(with_text: bool) -> list[dict[str, Any]]:
    start = {
        "type": "message_start",
        "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 1}},
    }
    events = [start, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
    if with_text:
        events.append({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hal"}})
    return events


async def test_an_overloaded_error_event_before_text_is_retried() -> None:
    case = CASES["anthropic"]
    failing = named_events(*anthropic_prefix(False), anthropic_error("overloaded_error", "Overloaded"))
    fake = Recorder(case.streamed(failing), case.streamed())
    pieces: list[str] = []
    assert (await ask(case, fake, pieces)).message.text == TEXT
    assert pieces == list(PIECES) and len(fake.requests) == 2


async def test_an_overloaded_error_event_after_text_says_the_stream_broke() -> None:
    case = CASES["anthropic"]
    failing = named_events(*anthropic_prefix(True), anthropic_error("overloaded_error", "Overloaded"))
    fake = Recorder(case.streamed(failing))
    pieces: list[str] = []
    with pytest.raises(
        ProviderHTTPError, match=r"broke after text was shown: .*HTTP 529.*overloaded_error: Overloaded"
    ):
        await ask(case, fake, pieces)
    assert pieces == ["Hal"]


@pytest.mark.parametrize(
    ("kind", "message", "error"),
    [
        ("authentication_error", "invalid x-api-key", ProviderAuthError),
        ("invalid_request_error", "prompt is too long: 215000 tokens > 200000 maximum", ContextOverflowError),
        ("invalid_request_error", "messages.1: bad block", ProviderHTTPError),
    ],
)
async def test_error_events_map_like_the_non_streamed_errors(kind: str, message: str, error: type) -> None:
    case = CASES["anthropic"]
    fake = Recorder(case.streamed(named_events(*anthropic_prefix(False), anthropic_error(kind, message))))
    with pytest.raises(error, match=message) as info:
        await ask(case, fake, [])
    assert type(info.value) is error
    assert len(fake.requests) == 1


async def test_openai_and_openrouter_error_chunks_are_errors() -> None:
    openrouter = CASES["openrouter"]
    upstream = {"error": {"code": 502, "message": "Upstream provider error"}, "choices": []}
    fake = Recorder(openrouter.streamed(data_events(upstream, done=False)), openrouter.streamed())
    assert (await ask(openrouter, fake, [])).message.text == TEXT  # transient: retried
    openai = CASES["openai"]
    overflow = {"error": {"message": "maximum context length is 8192 tokens", "code": "context_length_exceeded"}}
    fake = Recorder(openai.streamed(data_events(overflow, done=False)))
    with pytest.raises(ContextOverflowError):
        await ask(openai, fake, [])


async def test_ollama_and_gemini_error_lines_are_errors() -> None:
    ollama = CASES["ollama"]
    fake = Recorder(streamed_response(b'{"error":"model runner has unexpectedly stopped"}\n', "application/x-ndjson"))
    with pytest.raises(ProviderHTTPError, match="model runner has unexpectedly stopped"):
        await ask(ollama, fake, [])
    gemini = CASES["gemini"]
    unavailable = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    fake = Recorder(gemini.streamed(b"data: " + json.dumps(unavailable).encode() + b"\r\n\r\n"), gemini.streamed())
    assert (await ask(gemini, fake, [])).message.text == TEXT


async def test_rate_limits_before_the_stream_starts_keep_the_retry_policy() -> None:
    case = CASES["gemini"]
    error = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}],
        }
    }
    anthropic = CASES["anthropic"]
    fake = Recorder(httpx2.Response(429, json=error), case.streamed())
    assert (await ask(case, fake, [])).message.text == TEXT
    assert fake.delays == [1.5]
    overloaded = httpx2.Response(
        529, json=anthropic_error("overloaded_error", "Overloaded"), headers={"retry-after": "2"}
    )
    fake = Recorder(overloaded, anthropic.streamed())
    assert (await ask(anthropic, fake, [])).message.text == TEXT
    assert fake.delays == [2.0]
    fake = Recorder(*[httpx2.Response(503, json={"error": {"message": "busy"}}) for _ in range(3)])
    with pytest.raises(ProviderHTTPError, match=r"busy \(gave up after 3 attempts\)"):
        await ask(CASES["openai"], fake, [], retry=RetryPolicy(max_retries=2, initial_backoff_seconds=0, jitter=0))
    assert len(fake.requests) == 3


async def test_a_stalled_stream_fails_after_one_bounded_read() -> None:
    case = CASES["openai"]

    async def stall() -> AsyncIterator[bytes]:
        yield case.stream[: case.stream.index(SECOND_PIECE_AT)]
        await anyio.sleep_forever()
        yield b""

    fake = Recorder(httpx2.Response(200, headers={"content-type": SSE}, content=stall()))
    pieces: list[str] = []
    with pytest.raises(ProviderHTTPError, match=r"broke after text was shown: .*sent nothing for 0.05 s"):
        await ask(case, fake, pieces, timeout_seconds=0.05)
    assert pieces == [PIECES[0]] and len(fake.requests) == 1


async def test_a_tool_call_cut_by_max_tokens_is_the_same_error_streamed() -> None:
    case = CASES["anthropic"]
    events = [
        *anthropic_prefix(False)[:1],
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "write", "input": {}},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"file_pa'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 100}},
        {"type": "message_stop"},
    ]
    fake = Recorder(case.streamed(named_events(*events)))
    with pytest.raises(ProviderHTTPError, match=r"max_tokens \(100\) in the middle of a tool call"):
        await ask(case, fake, [], max_tokens=100)


async def test_garbage_in_a_stream_is_a_clear_error_not_a_retry() -> None:
    case = CASES["openai"]
    fake = Recorder(case.streamed(b"data: {not json}\n\n"))
    with pytest.raises(ProviderHTTPError, match="malformed: the stream sent an event that is not JSON"):
        await ask(case, fake, [])
    assert len(fake.requests) == 1


async def test_an_answer_text_callback_that_fails_is_not_mistaken_for_a_provider_error() -> None:
    case = CASES["anthropic"]
    fake = Recorder(case.streamed())

    def refuse(piece: str) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    provider = case.provider(fake.client)
    with pytest.raises(BrokenPipeError):
        await provider.request(model="m", system=None, messages=[UserMessage("go")], tools=TOOLS, on_text=refuse)
