"""SSE and NDJSON framing: whole events out of bytes cut anywhere."""

from __future__ import annotations

import pytest

from omega_mcp.providers._stream import (
    MAX_EVENT_BYTES,
    NDJSONDecoder,
    SSEDecoder,
    StreamBrokenError,
    StreamEvent,
    StreamProtocolError,
)


def decode(decoder: SSEDecoder | NDJSONDecoder, data: bytes, size: int) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    for start in range(0, len(data), size):
        events += decoder.feed(data[start : start + size])
    return events + decoder.close()


SSE_TEXT = (
    ": keep-alive comment\r\n"
    "event: message_start\r\n"
    'data: {"text": "Grüße 🎉"}\r\n'
    "\r\n"
    "data: line one\n"
    "data:line two\n"
    "id: 7\n"
    "retry: 100\n"
    "\n"
    "event: ping\r"
    "data: {}\r"
    "\r"
    "event: no data, not dispatched\n\n"
).encode()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64, 10_000])
def test_sse_events_come_out_whole_for_any_chunk_size(size: int) -> None:
    assert decode(SSEDecoder(), SSE_TEXT, size) == [
        StreamEvent("message_start", '{"text": "Grüße 🎉"}'),
        StreamEvent("message", "line one\nline two"),
        StreamEvent("ping", "{}"),
    ]


def test_an_sse_event_left_open_at_the_end_is_handed_over_as_final() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a": 1}\n\ndata: {"b":') == [StreamEvent("message", '{"a": 1}')]
    [last] = decoder.close()
    assert last.final
    with pytest.raises(StreamBrokenError, match="ended in the middle of an event"):
        last.json()
    # A complete event missing only its blank line is fine.
    decoder = SSEDecoder()
    decoder.feed(b"data: [DONE]")
    assert decoder.close() == [StreamEvent("message", "[DONE]", final=True)]


def test_ndjson_lines_come_out_whole_and_a_cut_last_line_is_broken() -> None:
    data = '{"a": "ü"}\n\n{"b": 2}\r\n{"c":'.encode()
    for size in (1, 4, 100):
        events = decode(NDJSONDecoder(), data, size)
        assert [e.data for e in events] == ['{"a": "ü"}', '{"b": 2}', '{"c":']
        assert events[0].json() == {"a": "ü"}
        assert not events[1].final and events[2].final
        with pytest.raises(StreamBrokenError):
            events[2].json()


def test_a_complete_event_that_is_not_json_is_a_protocol_error() -> None:
    with pytest.raises(StreamProtocolError, match="not JSON"):
        StreamEvent("message", "<html>").json()


def test_a_line_that_never_ends_is_refused_instead_of_filling_memory() -> None:
    decoder = NDJSONDecoder()
    block = b"x" * (1024 * 1024)
    with pytest.raises(StreamProtocolError, match="longer than"):
        for _ in range(MAX_EVENT_BYTES // len(block) + 2):
            decoder.feed(block)
    sse = SSEDecoder()
    with pytest.raises(StreamProtocolError, match="larger than"):
        for _ in range(MAX_EVENT_BYTES // len(block) + 2):
            sse.feed(b"data: " + block + b"\n")
