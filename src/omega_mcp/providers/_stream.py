"""Streamed answers: SSE and NDJSON framing, the text sink, and what an adapter's assembler implements.

The framing decoders take bytes exactly as they arrive (a chunk may end inside a line, a JSON
value or a multi-byte UTF-8 character) and hand back whole events; lines are split on bytes, so a
character is only decoded once its line is complete. An event left unterminated when the stream
ends is still handed over, marked `final`: if it turns out to be cut off, the stream broke.
Each adapter feeds the events to its own `StreamAssembler`, which rebuilds the answer the
non-streamed request would have returned and parses it with the adapter's `parse_response`, so
both paths give the same `ModelResponse`. `omega_mcp.providers._http` drives the requests,
retries and error mapping.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from omega_mcp.messages import ModelResponse

__all__ = [
    "MAX_EVENT_BYTES",
    "Framing",
    "NDJSONDecoder",
    "SSEDecoder",
    "StreamAssembler",
    "StreamBrokenError",
    "StreamErrorEvent",
    "StreamEvent",
    "StreamProtocolError",
    "TextSink",
]

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Upper bound for one event (or line) held in memory: a peer that never ends a line is an error."""

_LINE_END = re.compile(rb"\r\n|\r|\n")


class StreamBrokenError(Exception):
    """The stream ended before the answer was complete (the whole request may be retried)."""


class StreamProtocolError(Exception):
    """The stream is not in the expected format (never retried)."""


class StreamErrorEvent(Exception):
    """The provider reported an error inside the stream; `body` is the event's JSON."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        super().__init__(str(body)[:300])


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One SSE event (`name` defaults to "message") or one NDJSON line (`name` is "")."""

    name: str
    data: str
    final: bool = False
    """Handed over at the end of the stream without its terminator: it may be cut off."""

    def json(self) -> object:
        """The event's JSON value.

        Raises:
            StreamBrokenError: a `final` event that is not valid JSON (the stream was cut off).
            StreamProtocolError: any other event that is not valid JSON.
        """
        try:
            return json.loads(self.data)
        except ValueError:
            if self.final:
                raise StreamBrokenError("the stream ended in the middle of an event") from None
            raise StreamProtocolError(f"the stream sent an event that is not JSON: {self.data[:200]!r}") from None


class Framing(Protocol):
    def feed(self, chunk: bytes) -> list[StreamEvent]: ...

    def close(self) -> list[StreamEvent]: ...


class _LineSplitter:
    """Bytes in, complete lines out; `\\r\\n`, `\\r` and `\\n` all end a line."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[str]:
        # What is buffered holds no line end (but maybe a final "\r"): scan only the new bytes,
        # so a long line arriving in many chunks costs linear time.
        scan_from = max(len(self._buffer) - 1, 0)
        self._buffer += chunk
        lines: list[str] = []
        start = 0
        for match in _LINE_END.finditer(self._buffer, scan_from):
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # the "\n" of a "\r\n" may be in the next chunk
            lines.append(self._buffer[start : match.start()].decode("utf-8", errors="replace"))
            start = match.end()
        del self._buffer[:start]
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise StreamProtocolError(f"the stream sent a line longer than {MAX_EVENT_BYTES} bytes")
        return lines

    def close(self) -> list[str]:
        rest = bytes(self._buffer).rstrip(b"\r")
        self._buffer.clear()
        return [rest.decode("utf-8", errors="replace")] if rest else []


class SSEDecoder:
    """Server-sent events: `event:` and `data:` fields, comments (`:` lines) skipped."""

    def __init__(self) -> None:
        self._lines = _LineSplitter()
        self._name = ""
        self._data: list[str] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        return [event for line in self._lines.feed(chunk) if (event := self._line(line)) is not None]

    def close(self) -> list[StreamEvent]:
        events = [event for line in self._lines.close() if (event := self._line(line)) is not None]
        if self._data:
            events.append(self._dispatch(final=True))
        return events

    def _line(self, line: str) -> StreamEvent | None:
        if not line:
            return self._dispatch(final=False) if self._data else None
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._name = value
        elif field == "data":
            self._size += len(value)
            if self._size > MAX_EVENT_BYTES:
                raise StreamProtocolError(f"the stream sent an event larger than {MAX_EVENT_BYTES} bytes")
            self._data.append(value)
        return None  # `id` and `retry` mean nothing for a single POST

    def _dispatch(self, *, final: bool) -> StreamEvent:
        event = StreamEvent(self._name or "message", "\n".join(self._data), final)
        self._name, self._data, self._size = "", [], 0
        return event


class NDJSONDecoder:
    """One JSON value a line (Ollama); blank lines skipped."""

    def __init__(self) -> None:
        self._lines = _LineSplitter()

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        return [StreamEvent("", line) for line in self._lines.feed(chunk) if line.strip()]

    def close(self) -> list[StreamEvent]:
        return [StreamEvent("", line, final=True) for line in self._lines.close() if line.strip()]


class TextSink:
    """Passes answer text to the caller's `on_text` and remembers whether any was shown."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self._on_text = on_text
        self.shown = False

    def __call__(self, piece: str) -> None:
        if piece:
            self.shown = True
            self._on_text(piece)


class StreamAssembler(ABC):
    """Rebuilds one streamed answer with the adapter's `parse` (its non-streamed parser) at the end.

    A new one is made for every attempt. `done` turns true at the provider's end-of-answer event,
    after which nothing more is read.
    """

    def __init__(self, sink: TextSink, parse: Callable[[Mapping[str, Any]], ModelResponse]) -> None:
        self.sink = sink
        self.parse = parse
        self.done = False

    @abstractmethod
    def feed(self, event: StreamEvent) -> None:
        """Take one event, passing answer text to the sink.

        Raises:
            StreamErrorEvent: the event reports an error.
            StreamProtocolError: the event is malformed.
        """

    @abstractmethod
    def result(self) -> ModelResponse:
        """The assembled answer once the stream has ended.

        Raises:
            StreamBrokenError: the stream ended before the answer was complete.
            ProviderError: the answer itself is an error (as `parse` reports it).
        """

    def whole(self, data: Mapping[str, Any]) -> ModelResponse:
        """The answer of a server that ignored the stream flag and sent one JSON object."""
        response = self.parse(data)
        self.sink(response.message.text)
        return response
