"""The relay's own way to a streamable HTTP server: a POST per `tools/call`, beside the SDK's transport.

A `Lane` belongs to one streamable HTTP link (`connect.py` makes it when the relay can speak to
the server: `http://` or `https://`, no OAuth, no proxy in the environment). It sends what the
SDK's transport would send for the same call: the link's static headers, and in the handshake era
the session id (`note_response` reads it off the answer to `initialize`) and the negotiated version,
or in the 2026 era the routing headers (`MCP-Protocol-Version` of the call's envelope,
`Mcp-Method`, `Mcp-Name`, and the `Mcp-Param-*` mirrors of omega's `ModernChannel`). The answer, a
JSON body or a server-sent event stream (`wire/sse.py`), is read message by message (each bounded
by `max_message_mb`) over the relay's HTTP/1.1 client (`wire/http1.py`) and handed to the relay;
what the relay does not take (a server's request to the client, a notification about something
else) goes into the SDK session's own read stream (`session_inbox`), which answers it as if its
transport had read it.

A status the SDK's transport turns into a JSON-RPC error is turned into the same error here
(`Refusal`: the same codes and words), so a relayed call fails as the SDK path fails it. The lane
stays above `wire/` because it speaks the SDK's header names and error codes and hands what the
relay leaves to the SDK session as `SessionMessage`s.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import h11
import httpx2
from anyio.streams.memory import MemoryObjectSendStream
from mcp import types
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER, encode_header_value
from mcp.shared.message import SessionMessage

from omega_mcp._sdk import Streams
from omega_mcp.narrow import as_object, object_or_none
from omega_mcp.wire.http1 import Http1Pool, Response, speakable
from omega_mcp.wire.jsonline import decode
from omega_mcp.wire.sse import ServerSentEvents, TooLong

__all__ = ["Lane", "Refusal", "lane_for", "with_inbox"]

logger = logging.getLogger(__name__)

_SESSION_HEADER = "mcp-session-id"
_SSE = "text/event-stream"
_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
_AFTER_ANSWER_SECONDS = 1.0  # reading the rest of an answered stream, to keep its connection
_RESUME_ATTEMPTS = 2  # failed reconnections to a stream that ended early, as the SDK's transport
_RESUME_DELAY_MS = 1000  # before each, unless the stream said `retry:`
_POST_ONLY = frozenset({MCP_METHOD_HEADER, MCP_NAME_HEADER, "content-length"})


class Refusal(Exception):
    """An HTTP answer that is no answer to the call, as the JSON-RPC error the SDK's transport makes of it."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error: dict[str, Any] = {"code": code, "message": message, **({"data": data} if data is not None else {})}


Deliver = Callable[[dict[str, Any]], bool | None]
"""Offered each message of an answer: True for the call's answer, False for another it took, None for one
it leaves (to the SDK session: `hand_on`). After the answer the rest is read only to keep the connection."""


class Lane:
    """POSTs of relayed calls to one streamable HTTP link."""

    def __init__(self, url: str, headers: Mapping[str, str], max_message_bytes: int) -> None:
        self.pool = Http1Pool(url)
        self._static = [(name.lower(), value) for name, value in headers.items()]
        self._max = max_message_bytes
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.modern = False
        """A 2026-era link: routing headers per call, no session."""
        self.param_headers: Callable[[str, Mapping[str, Any]], dict[str, str]] = lambda name, arguments: {}
        self.session_inbox: MemoryObjectSendStream[SessionMessage | Exception] | None = None

    def note_response(self, response: httpx2.Response) -> None:
        """The session id, from the answer to `initialize` (the SDK's client sends it from then on)."""
        session_id = response.headers.get(_SESSION_HEADER)
        if session_id:
            self.session_id = session_id

    def headers(self, method: str, params: Mapping[str, Any], version: str | None) -> list[tuple[str, str]]:
        """The headers of a POST of `method` with `params`; `version` is a 2026-era call's envelope version."""
        mcp = [("accept", "application/json, text/event-stream"), ("content-type", "application/json")]
        if self.modern and version is not None:
            mcp += [(MCP_PROTOCOL_VERSION_HEADER, version), (MCP_METHOD_HEADER, method)]
            name = params.get("name")
            if isinstance(name, str):
                mcp.append((MCP_NAME_HEADER, encode_header_value(name)))
                mcp += self.param_headers(name, as_object(params.get("arguments"))).items()
        else:
            if self.session_id:
                mcp.append((_SESSION_HEADER, self.session_id))
            if self.protocol_version:
                mcp.append((MCP_PROTOCOL_VERSION_HEADER, self.protocol_version))
        # the MCP headers win over a configured one of the same name, as over the SDK client's defaults
        names = {name.lower() for name, _ in mcp}
        return [(name, value) for name, value in self._static if name not in names] + mcp

    async def exchange(self, body: bytes, headers: list[tuple[str, str]], deliver: Deliver) -> bool:
        """POST `body` and offer each message of the answer to `deliver`; whether the call's answer came.

        Raises:
            Refusal: the status or content type is no answer (as the SDK's transport words it).
            TooLong: one message is longer than the link's bound.
            OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, h11.ProtocolError:
                the connection failed.
        """
        async with self.pool.send(headers, body) as response:
            kind = response.header("content-type").lower()
            _check(response, kind)
            if response.status >= 400:
                raise await self._refusal(response, kind)
            if kind.startswith("application/json"):
                return await self._offer(_message(await self._whole(response)), deliver)
            if not kind.startswith(_SSE):
                raise Refusal(types.INVALID_REQUEST, f"Unexpected content type: {kind}")
            events = ServerSentEvents(self._max)
            if await self._events(response, events, deliver):
                return True
        return events.last_id is not None and await self._resume(events, headers, deliver)

    async def _events(self, response: Response, events: ServerSentEvents, deliver: Deliver) -> bool:
        """Offer the messages of an event stream until the call's answer; whether it came."""
        chunks = response.body()
        async for chunk in chunks:
            answered = False
            for data in events.feed(chunk):
                if await self._offer(_message(data), deliver):
                    answered = True
            if answered:  # the server ends the stream after the answer; read that end to keep the connection
                with anyio.move_on_after(_AFTER_ANSWER_SECONDS):
                    async for _ in chunks:
                        pass
                return True
        return False

    async def _resume(self, events: ServerSentEvents, headers: list[tuple[str, str]], deliver: Deliver) -> bool:
        """A stream that ended before the answer, after an event with an id: as the SDK's transport, GET
        it again from that event on (`Last-Event-ID`), after the server's `retry:` or a second, until the
        answer, a stream that ends again (then once more), or the second failed attempt in a row."""
        failed = 0
        while failed < _RESUME_ATTEMPTS:
            await anyio.sleep((events.retry_ms if events.retry_ms is not None else _RESUME_DELAY_MS) / 1000)
            assert events.last_id is not None
            again = [
                (n, v) for n, v in headers if n.lower() not in _POST_ONLY and not n.lower().startswith("mcp-param-")
            ]
            again.append(("last-event-id", events.last_id))
            events.restart()
            try:
                async with self.pool.send(again, b"", method=b"GET") as response:
                    if response.status >= 400 or not response.header("content-type").lower().startswith(_SSE):
                        failed += 1
                        continue
                    if await self._events(response, events, deliver):
                        return True
                    failed = 0  # it ended early again: reconnect again
            except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, h11.ProtocolError) as exc:
                logger.debug("relay: resuming a stream failed: %r", exc)
                failed += 1
        return False

    async def _offer(self, message: dict[str, Any] | None, deliver: Deliver) -> bool:
        if message is None:
            return False
        taken = deliver(message)
        if taken is None:
            await self.hand_on(message)
        return bool(taken)

    async def _whole(self, response: Response) -> bytes:
        body = bytearray()
        async for chunk in response.body():
            body += chunk
            if len(body) > self._max:
                raise TooLong(len(body))
        return bytes(body)

    async def _refusal(self, response: Response, kind: str) -> Refusal:
        if kind.startswith("application/json"):  # a JSON-RPC error in the body is the answer
            try:
                error = object_or_none(as_object(decode(await self._whole(response))).get("error"))
            except (ValueError, TooLong):
                error = None
            if error is not None and isinstance(code := error.get("code"), int):
                return Refusal(code, str(error.get("message", "")), error.get("data"))
        if response.status == 404:
            if self.session_id is None:
                return Refusal(types.METHOD_NOT_FOUND, "Not Found")
            return Refusal(types.INVALID_REQUEST, "Session terminated")
        return Refusal(types.INTERNAL_ERROR, "Server returned an error response")

    async def notify(self, message: dict[str, Any], body: bytes) -> None:
        """POST a notification (a handshake-era cancel), bounded; its answer is not waited for beyond that."""
        method = str(message.get("method"))
        with anyio.move_on_after(5):
            try:
                async with self.pool.send(self.headers(method, {}, None), body) as response:
                    async for _ in response.body():
                        pass
            except Exception as exc:  # best effort, as the SDK's: the call is already answered
                logger.debug("relay notification %s failed: %r", method, exc)

    async def hand_on(self, message: dict[str, Any]) -> None:
        """Hand a message the relay does not take to the SDK session, as if its transport had read it."""
        if self.session_inbox is None:
            return
        try:
            parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValueError as exc:
            logger.debug("relay: not a JSON-RPC message from the server: %r", exc)
            return
        await self.session_inbox.send(SessionMessage(parsed))

    async def aclose(self) -> None:
        await self.pool.aclose()


def _message(data: bytes) -> dict[str, Any] | None:
    """One message of an answer (None: not a JSON object); bad JSON fails the call as the SDK's transport does."""
    try:
        return object_or_none(decode(data))
    except ValueError as exc:
        raise Refusal(types.PARSE_ERROR, f"Failed to parse JSON response: {exc}") from None


def _check(response: Response, kind: str) -> None:
    if response.status == 202:
        raise Refusal(types.INVALID_REQUEST, "server answered a request with 202 Accepted")
    location = response.header("location")
    if 300 <= response.status < 400 and location:
        raise Refusal(
            types.INVALID_REQUEST,
            f"Redirect to {location} not followed; use that URL as the endpoint if it is the intended server",
        )


def lane_for(url: str, headers: Mapping[str, str], *, oauth: bool, max_message_bytes: int) -> Lane | None:
    """A lane to `url` when the relay can speak to it as the SDK's client would (else None: the SDK path)."""
    if oauth or not speakable(url) or any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return None
    return Lane(url, headers, max_message_bytes)


@asynccontextmanager
async def with_inbox(transport: Any, lane: Lane) -> AsyncGenerator[Streams]:
    """The SDK transport's streams, its read stream merged with the lane's inbox (then the lane is closed)."""
    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        inbox = send.clone()

        async def forward() -> None:
            with send, inbox:
                async for item in read:
                    await send.send(item)

        lane.session_inbox = inbox
        try:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(forward, name="omega http inbox")
                try:
                    yield receive, write  # type: ignore[misc]
                finally:
                    task_group.cancel_scope.cancel()
        finally:
            lane.session_inbox = None
            await lane.aclose()
