"""Streaming, per provider: the streamed turn equals the non-streamed one, however the bytes are cut.

Each case of `stream_support` is replayed through `httpx2.MockTransport` in one piece, one byte
at a time, and cut exactly inside a multi-byte character, inside a JSON value and inside the
tool arguments; the resulting `ModelResponse` must equal the one parsed from the non-streamed
answer, and the pieces given to `on_text` must join to the answer text.
"""

from __future__ import annotations

import httpx2
import pytest
from stream_support import CASES, PIECES, TEXT, TOOLS, Case, Recorder

from omega_mcp.errors import ProviderHTTPError
from omega_mcp.messages import ModelResponse, UserMessage


def cuts_for(case: Case, chunking: str) -> list[int]:
    data = case.stream
    if chunking == "whole":
        return []
    if chunking == "bytes":
        return list(range(1, len(data)))
    # Named places: inside 'ü' (2 bytes), '你' (3) and '🎉' (4), inside a JSON key, and inside the
    # tool arguments (the last 'ü' of the stream sits in them).
    inside_characters = [data.index(char.encode()) + 1 for char in ("ü", "你", "🎉")]
    for at in inside_characters:
        with pytest.raises(UnicodeDecodeError):
            data[:at].decode()  # the cut really splits a character
    return [*inside_characters, data.index(b'"role"') + 3, data.rindex("ü".encode()) + 1]


async def ask(case: Case, response: httpx2.Response) -> tuple[ModelResponse, list[str], Recorder]:
    fake = Recorder(response)
    provider = case.provider(fake.client)
    pieces: list[str] = []
    result = await provider.request(
        model="m", system="Be brief.", messages=[UserMessage("go")], tools=TOOLS, on_text=pieces.append
    )
    return result, pieces, fake


async def ask_plain(case: Case) -> Recorder:
    fake = Recorder(httpx2.Response(200, json=case.whole))
    provider = case.provider(fake.client)
    await provider.request(model="m", system="Be brief.", messages=[UserMessage("go")], tools=TOOLS)
    return fake


@pytest.mark.parametrize("chunking", ["whole", "bytes", "places"])
@pytest.mark.parametrize("name", list(CASES))
async def test_the_streamed_turn_equals_the_non_streamed_turn(name: str, chunking: str) -> None:
    case = CASES[name]
    streamed, pieces, _ = await ask(case, case.streamed(chunks=cuts_for(case, chunking)))
    assert streamed == await case.expected()
    assert "".join(pieces) == TEXT == streamed.message.text
    if chunking == "whole":
        assert pieces == list(PIECES)  # each piece as it arrived, never thinking


async def test_streamed_usage_reports_prompt_cache_reads_and_writes() -> None:
    expected = {
        "openai": (120, 30, 100, 0),
        "openrouter": (50, 10, 20, 5),
        "anthropic": (1210, 80, 1000, 200),  # input_tokens counts every prompt token
        "ollama": (412, 35, 0, 0),
        "gemini": (120, 55, 100, 0),
    }
    for name, case in CASES.items():
        response, _, _ = await ask(case, case.streamed())
        usage = response.usage
        got = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
        assert got == expected[name], name
    openrouter, _, _ = await ask(CASES["openrouter"], CASES["openrouter"].streamed())
    assert openrouter.usage.cost == pytest.approx(0.0012)


async def test_thinking_signatures_and_calls_survive_streaming() -> None:
    anthropic, _, _ = await ask(CASES["anthropic"], CASES["anthropic"].streamed(chunks=range(1, 4000, 7)))
    assert anthropic.message.raw is not None
    blocks = anthropic.message.raw["content"]
    assert blocks[0] == {"type": "thinking", "thinking": "Two files.", "signature": "EqQBCkgIARABGAIiQL2sig=="}
    assert blocks[3]["input"] == {"file_path": "aü", "content": "1"}
    openai, _, _ = await ask(CASES["openai"], CASES["openai"].streamed(chunks=range(1, 4000, 5)))
    assert [(c.id, c.name, c.arguments) for c in openai.message.tool_calls] == [
        ("call_a", "read", {"file_path": "/tmp/ü.txt"}),
        ("call_b", "mcp__fs__list", {}),
    ]
    gemini, _, _ = await ask(CASES["gemini"], CASES["gemini"].streamed())
    assert gemini.message.raw is not None
    assert [part.get("thoughtSignature") for part in gemini.message.raw["parts"]] == [None, "Zm9v", "CiQBzGm+"]


@pytest.mark.parametrize("name", list(CASES))
async def test_streamed_requests_carry_the_stream_flags_and_match_the_spec(name: str, check_request) -> None:
    case = CASES[name]
    plain = await ask_plain(case)
    _, _, streamed = await ask(case, case.streamed())
    body = streamed.bodies[0]
    check_request(case.spec, body)
    url = str(streamed.requests[0].url)
    if case.spec == "openai":
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        extra = {"stream", "stream_options"}
    elif case.spec == "gemini":
        assert url.endswith("/v1beta/models/m:streamGenerateContent?alt=sse")
        assert str(plain.requests[0].url).endswith("/v1beta/models/m:generateContent")
        extra = set()
    else:
        assert body["stream"] is True
        extra = {"stream"}
    plain_body = plain.bodies[0]
    if case.spec == "ollama":
        assert plain_body["stream"] is False
    # Apart from the flags, the request is the same streamed or not (same cache prefix).
    assert {k: v for k, v in body.items() if k not in extra} == {k: v for k, v in plain_body.items() if k not in extra}


@pytest.mark.parametrize("name", list(CASES))
async def test_without_on_text_nothing_is_streamed(name: str) -> None:
    plain = await ask_plain(CASES[name])
    body = plain.bodies[0]
    assert body.get("stream") in (None, False) and "stream_options" not in body
    assert "stream" not in str(plain.requests[0].url).lower()


@pytest.mark.parametrize("name", list(CASES))
async def test_a_server_that_ignores_the_stream_flag_still_gives_the_turn(name: str) -> None:
    case = CASES[name]
    response, pieces, _ = await ask(case, httpx2.Response(200, json=case.whole))
    assert response == await case.expected()
    assert pieces == [TEXT]


async def test_unknown_events_and_keep_alives_are_ignored() -> None:
    case = CASES["anthropic"]
    extra = b'event: future_event\ndata: {"type": "future_event", "x": 1}\n\n: comment\n\n'
    at = case.stream.index(b"event: content_block_stop")
    response, pieces, _ = await ask(case, case.streamed(case.stream[:at] + extra + case.stream[at:]))
    assert response == await case.expected() and "".join(pieces) == TEXT


async def test_a_blocked_prompt_is_the_same_error_streamed() -> None:
    case = CASES["gemini"]
    blocked = b'data: {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}\r\n\r\n'
    with pytest.raises(ProviderHTTPError, match=r"blocked \(blockReason PROHIBITED_CONTENT\)"):
        await ask(case, case.streamed(blocked))
