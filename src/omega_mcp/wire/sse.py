"""Server-sent events as a streamable HTTP answer carries them, read from bytes as they come.

The relay's HTTP lane (`proxy/http_lane.py`) reads a `tools/call` answer that is an event stream
here, message by message: the data of each `message` event, and the last event id and `retry:`
(to resume a stream that ends early, as the SDK's transport does). Each message is bounded by the
link's `max_message_mb` (`TooLong`): a longer one is never held. Bytes only.
"""

from __future__ import annotations

__all__ = ["ServerSentEvents", "TooLong"]


class TooLong(Exception):
    """One message of an answer is longer than the link's `max_message_mb`."""


class ServerSentEvents:
    """Server-sent events, fed bytes as they come: the data of each `message` event with data (as the
    SDK's transport, an event with empty data is skipped), and the last event id and `retry:` seen (to
    resume a stream that ends early)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._pending = b""
        self._data: list[bytes] = []
        self._size = 0
        self._event = b""
        self.last_id: str | None = None
        self.retry_ms: int | None = None

    def restart(self) -> None:
        """A new stream: what was half-read of the old one is dropped (the ids and `retry:` stay)."""
        self._pending, self._data, self._size, self._event = b"", [], 0, b""

    def feed(self, chunk: bytes) -> list[bytes]:
        ready: list[bytes] = []
        text = self._pending + chunk
        carry = b"\r" if text.endswith(b"\r") else b""  # maybe half of a CRLF: decided with the next chunk
        lines = text[: len(text) - len(carry)].replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._pending = lines.pop() + carry
        if len(self._pending) > self._limit:
            raise TooLong(len(self._pending))
        for line in lines:
            if not line:  # the end of an event
                data = b"\n".join(self._data)
                if data and self._event in (b"", b"message"):  # no data: a priming event (its id counts)
                    ready.append(data)
                self._data, self._size, self._event = [], 0, b""
                continue
            name, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if name == b"data":
                self._data.append(value)
                self._size += len(value) + 1
                if self._size > self._limit:
                    raise TooLong(self._size)
            elif name == b"event":
                self._event = value
            elif name == b"id" and value and b"\0" not in value:  # as the SDK's: an empty id keeps the last
                self.last_id = value.decode("utf-8", "replace")
            elif name == b"retry" and value.isdigit():
                self.retry_ms = int(value)
        return ready
