"""Resumable event streams of the HTTP hub (SEP-1699): each session's own bounded event store, the
priming event with `retry:`, `[hub] sse_poll_seconds`, and resuming a call with `Last-Event-ID`.

The store is tested in-process for its bounds; the rest against a real `serve --http` with raw
HTTP (the SDK's client hides the events), and once with the SDK's own client, which resumes by itself.
A bash call that waits for a file the test writes keeps the call unanswered exactly as long as needed.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx2
import mcp
import pytest
import uvicorn
from mcp import types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel.server import Server
from mcp.shared._httpx_utils import create_mcp_http_client

from hub_support import HEADERS, Hub, free_port, start_hub
from omega_mcp._sdk import store_per_session
from omega_mcp.server.events import RETRY_MS, HubEvents, SessionEvents
from omega_mcp.server.ops import QUIET_SECONDS
from waits import deadline, until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef0123"
VERSION = "2025-11-25"
_WAIT_FOR_GO = "touch started; while [ ! -e go ]; do sleep 0.02; done; echo answered-{word}"


def _note(text: str) -> types.JSONRPCMessage:
    return types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/message", params={"level": "info", "data": text}
    )


def _answer(request_id: int | str, text: str = "") -> types.JSONRPCMessage:
    return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"text": text})


FOLLOWING = "(still following its request)"


async def _follow(
    store: SessionEvents,
    last_event_id: str,
    sent: list[str],
    ended: list[str | None],
    held: anyio.Event | None = None,
) -> None:
    """Resume from `last_event_id`: each message sent goes to `sent` (each only once `held` is set, a
    client that reads slowly), and what the replay returns to `ended` once the stream ends."""

    async def send(event: object) -> None:
        if held is not None:
            await held.wait()
        sent.append(event.message.model_dump_json())  # type: ignore[attr-defined]

    ended.append(await store.replay_events_after(last_event_id, send))  # type: ignore[arg-type]


async def _replayed(store: SessionEvents, last_event_id: str) -> tuple[str | None, list[str]]:
    """What a resume from `last_event_id` sends until it ends, or until it waits for its request's next event
    (then the stream is `FOLLOWING`)."""
    sent: list[str] = []
    ended: list[str | None] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_follow, store, last_event_id, sent, ended)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    return (ended[0] if ended else FOLLOWING), sent


# -- the store --------------------------------------------------------------------------------


async def test_a_sessions_store_keeps_its_newest_events_up_to_its_bound():
    hub = HubEvents(session_events=3)
    store = hub.new()
    first = await store.store_event("1", None)
    ids = [await store.store_event("1", _note(f"n{i}")) for i in range(4)]
    assert store.count == 3
    assert await _replayed(store, first) == (None, [])  # the priming event was dropped first
    stream, sent = await _replayed(store, ids[1])
    assert stream == FOLLOWING
    assert [s for s in sent if "n2" in s or "n3" in s] == sent and len(sent) == 2


def _size(message: types.JSONRPCMessage) -> int:
    return len(message.model_dump_json(by_alias=True, exclude_unset=True).encode())


async def test_a_sessions_store_keeps_at_most_its_bytes_and_a_longer_message_not_at_all():
    size = _size(_note("x" * 150))
    hub = HubEvents(session_bytes=2 * size + 10)
    store = hub.new()
    for letter in "xyz":
        await store.store_event("1", _note(letter * 150))
    assert store.bytes == 2 * size and store.count == 2
    await store.store_event("1", _note("w" * 500))  # sent, not kept
    assert store.bytes == 2 * size and store.count == 2
    assert hub.bytes == store.bytes


async def test_all_sessions_together_keep_at_most_the_total_bytes_oldest_first():
    size = _size(_note("e" * 100))
    hub = HubEvents(total_bytes=7 * size + size // 2)
    early, late = hub.new(), hub.new()
    kept = [await early.store_event("1", _note("e" * 100)) for _ in range(4)]
    for _ in range(6):
        await late.store_event("1", _note("l" * 100))
    assert hub.bytes == 7 * size
    assert early.count == 1 and late.count == 6  # the oldest events went, whichever session held them
    assert early.holds(kept[-1]) and not early.holds(kept[0])


async def test_a_closed_sessions_events_are_gone_and_its_bytes_freed():
    hub = HubEvents()
    store, other = hub.new(), hub.new()
    event = await store.store_event("1", _note("secret"))
    await other.store_event("1", _note("kept"))
    store.close()
    store.close()
    assert await _replayed(store, event) == (None, [])
    assert hub.bytes == other.bytes > 0
    await store.store_event("1", _note("late"))  # a message routed while the session ends
    assert store.count == 0 and hub.bytes == other.bytes


async def test_many_short_sessions_leave_no_bookkeeping_behind():
    hub = HubEvents(session_events=2)
    for _ in range(2000):
        store = hub.new()
        for _ in range(5):
            await store.store_event("1", _note("x"))
        store.close()
    assert hub.bytes == 0
    assert len(hub._order) <= 1100  # pyright: ignore[reportPrivateUsage]


async def test_a_request_id_used_again_replays_only_its_own_new_stream():
    store = HubEvents().new()
    await store.store_event("1", None)
    await store.store_event("1", _note("old call"))
    await store.store_event("1", _answer(1, "old answer"))
    again = await store.store_event("1", None)  # the same id, a new request after the first was answered
    await store.store_event("1", _note("new call"))
    stream, sent = await _replayed(store, again)
    assert stream == FOLLOWING
    assert len(sent) == 1 and "new call" in sent[0]


async def test_a_resumed_call_gets_what_its_request_sends_next_and_its_stream_ends_with_the_answer():
    store = HubEvents().new()
    priming = await store.store_event("1", None)
    await store.store_event("1", _note("before"))
    sent: list[str] = []
    ended: list[str | None] = []
    with deadline(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_follow, store, priming, sent, ended)
            await until(lambda: len(sent) == 1, "the missed event")
            await store.store_event("1", _note("meanwhile"))  # routed while the client is back: not lost
            await store.store_event("2", _note("another call's"))
            await store.store_event("1", _answer(1, "done"))
    assert ended == [None]  # the stream ends with its answer; the SDK does not follow it again
    assert ["before" in sent[0], "meanwhile" in sent[1], "done" in sent[2]] == [True] * 3 and len(sent) == 3


async def test_resuming_an_answered_call_replays_through_the_answer_and_ends():
    store = HubEvents(session_bytes=400).new()
    priming = await store.store_event("1", None)
    await store.store_event("1", _answer(1, "kept"))
    with deadline(10):
        stream, sent = await _replayed(store, priming)
    assert stream is None and len(sent) == 1 and "kept" in sent[0]
    other = await store.store_event("2", None)
    await store.store_event("2", _answer(2, "x" * 1000))  # sent, too long to keep
    with deadline(10):
        assert await _replayed(store, other) == (None, [])  # over all the same: nothing to wait for


async def test_a_followed_stream_ends_when_the_session_closes():
    store = HubEvents().new()
    priming = await store.store_event("1", None)
    sent: list[str] = []
    ended: list[str | None] = []
    with deadline(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_follow, store, priming, sent, ended)
            await anyio.wait_all_tasks_blocked()
            assert not ended
            store.close()
    assert ended == [None] and sent == []


async def test_a_reader_too_slow_for_the_bound_is_ended_without_holding_up_the_router():
    store = HubEvents(session_events=5).new()
    priming = await store.store_event("1", None)
    stuck = anyio.Event()
    sent: list[str] = []
    ended: list[str | None] = []
    with deadline(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_follow, store, priming, sent, ended, stuck)
            await anyio.wait_all_tasks_blocked()
            for i in range(8):
                await store.store_event("1", _note(f"n{i}"))  # each returns at once
            stuck.set()
    assert ended == [None]  # the stream ended: the client resumes from the last event it read
    assert 5 <= len(sent) <= 7 and "n0" in sent[0]


async def test_the_standalone_streams_id_goes_back_to_the_sdk_after_its_replay():
    store = HubEvents().new()
    priming = await store.store_event("_GET_stream", None)
    await store.store_event("_GET_stream", _note("listed"))
    with deadline(10):
        stream, sent = await _replayed(store, priming)
    assert stream == "_GET_stream" and len(sent) == 1


async def test_event_ids_of_two_sessions_share_nothing_guessable():
    hub = HubEvents()
    one, two = hub.new(), hub.new()
    a, b = await one.store_event("1", None), await two.store_event("1", None)
    assert a.rsplit(".", 1)[0] != b.rsplit(".", 1)[0]
    assert len(a.rsplit(".", 1)[0]) >= 16
    assert await _replayed(one, b) == (None, [])


# -- against a real hub -----------------------------------------------------------------------


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    tmp = tmp_path_factory.mktemp("events")
    config = tmp / "omega.toml"
    config.write_text(
        '[hub]\nsse_poll_seconds = 0.1\n[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\n'
        '[hub.clients.bob]\ntoken = "${BOB_TOKEN}"\n'
    )
    hub = start_hub(tmp, "--config", str(config), env={"ALICE_TOKEN": ALICE, "BOB_TOKEN": BOB})
    try:
        yield hub
    finally:
        hub.stop()


@dataclass
class Event:
    id: str | None = None
    data: str = ""
    retry: int | None = None
    lines: list[str] = field(default_factory=list[str])


async def _events(response: httpx2.Response) -> AsyncIterator[Event]:
    event = Event()
    async for line in response.aiter_lines():
        if not line:
            if event.lines:
                yield event
            event = Event()
            continue
        event.lines.append(line)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            event.id = value
        elif name == "data":
            event.data += value
        elif name == "retry":
            event.retry = int(value)


@dataclass
class Session:
    http: httpx2.AsyncClient
    url: str
    headers: dict[str, str]


@asynccontextmanager
async def _session(hub: Hub, token: str) -> AsyncIterator[Session]:
    async with _raw_session(hub.url, {"Authorization": f"Bearer {token}"}) as session:
        yield session


@asynccontextmanager
async def _raw_session(url: str, auth: dict[str, str] | None = None) -> AsyncIterator[Session]:
    base = {**HEADERS, **(auth or {})}
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        opened = await http.post(url, json=initialize, headers=base)
        assert opened.status_code == 200, opened.text
        headers = {**base, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": VERSION}
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        yield Session(http, url, headers)


def _call(command: str, request_id: int = 1) -> dict[str, object]:
    params = {"name": "bash", "arguments": {"command": command}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def _post_until_closed(session: Session, body: dict[str, object]) -> list[Event]:
    """POST a call and read its stream until the hub closes it."""
    async with session.http.stream("POST", session.url, json=body, headers=session.headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [event async for event in _events(response)]


async def _resume(session: Session, last_event_id: str, until: str | None = None) -> list[Event]:
    """GET the stream again from `last_event_id`: its events until one has `until` in it (or it ends)."""
    headers = {**session.headers, "last-event-id": last_event_id, "accept": "text/event-stream"}
    got: list[Event] = []
    async with session.http.stream("GET", session.url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        async for event in _events(response):
            got.append(event)
            if until is not None and until in event.data:
                break
    return got


@pytest.mark.e2e
async def test_a_call_stream_opens_with_a_priming_event_and_retry(hub: Hub):
    async with _session(hub, ALICE) as session:
        events = await _post_until_closed(session, _call("echo quick"))
    assert events[0].id and events[0].data == "" and events[0].retry == 1000
    assert "quick" in events[-1].data and events[-1].id


@pytest.mark.e2e
async def test_a_call_unanswered_past_sse_poll_seconds_is_resumed_with_last_event_id(hub: Hub):
    work = hub.log.parent / "ws"
    async with _session(hub, ALICE) as session:
        with deadline(30):
            first = await _post_until_closed(session, _call(_WAIT_FOR_GO.format(word="late")))
            assert first[0].data == "" and first[0].id  # the priming event, then the hub closed it
            assert not any("answered-late" in e.data for e in first)
            assert (work / "started").exists()
            (work / "go").touch()
            rest = await _resume(session, first[-1].id or "", until="answered-late")
    assert "answered-late" in rest[-1].data


@pytest.mark.e2e
async def test_a_client_that_drops_its_connection_gets_the_answer_on_resuming(hub: Hub):
    work = hub.log.parent / "ws"
    async with _session(hub, BOB) as session:
        with deadline(30):
            async with session.http.stream(
                "POST", session.url, json=_call(_WAIT_FOR_GO.format(word="dropped")), headers=session.headers
            ) as response:
                priming = await anext(_events(response))  # then the connection is dropped
            (work / "go").touch()
            rest = await _resume(session, priming.id or "", until="answered-dropped")
    assert "answered-dropped" in rest[-1].data


@pytest.mark.e2e
async def test_another_sessions_last_event_id_replays_none_of_its_events(hub: Hub):
    async with _session(hub, BOB) as bob, _session(hub, ALICE) as alice:
        with deadline(30):
            bobs = await _post_until_closed(bob, _call("echo bobs-secret"))
            assert "bobs-secret" in bobs[-1].data
            assert "bobs-secret" in "".join(e.data for e in await _resume(bob, bobs[0].id or "", "bobs-secret"))
            for event in bobs:  # alice, in her own session, presents each of bob's event ids
                stolen: list[Event] = []
                with anyio.move_on_after(2):  # her stream ends at once; a leak would keep it open after
                    stolen = await _resume(alice, event.id or "", until="bobs-secret")
                assert not any("bobs-secret" in e.data for e in stolen), stolen


@pytest.mark.e2e
async def test_the_sdk_client_gets_the_answer_of_a_call_the_hub_polls(hub: Hub):
    work = hub.log.parent / "ws"
    resumed = anyio.Event()

    async def watch(request: httpx2.Request) -> None:
        if request.method == "GET" and "last-event-id" in request.headers:
            resumed.set()  # the hub closed the call's stream and the client came back for the rest

    headers = {"Authorization": f"Bearer {ALICE}"}
    async with create_mcp_http_client(headers=headers) as http:
        http.event_hooks["request"].append(watch)
        transport = streamable_http_client(hub.url, http_client=http)
        async with mcp.Client(transport, mode="legacy") as client:  # type: ignore[arg-type]
            assert client.protocol_version == VERSION
            with deadline(30):
                async with anyio.create_task_group() as tg:

                    async def release() -> None:
                        await resumed.wait()
                        (work / "go").touch()

                    tg.start_soon(release)
                    result = await client.call_tool("bash", {"command": _WAIT_FOR_GO.format(word="sdk")})
    assert "answered-sdk" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.e2e
async def test_a_polled_call_keeps_the_draining_hub_until_it_is_answered_and_resumed(hub: Hub):
    work = hub.log.parent / "ws"
    async with _session(hub, ALICE) as session:
        with deadline(60):
            first = await _post_until_closed(session, _call(_WAIT_FOR_GO.format(word="drained")))
            assert not any("answered-drained" in e.data for e in first)  # its HTTP request has ended
            hub.proc.send_signal(signal.SIGTERM)
            await until(lambda: "draining" in hub.log.read_text(), "the hub to drain")
            with anyio.move_on_after(QUIET_SECONDS * 2 + 1):  # a drain that saw nothing in flight ends by now
                await until(lambda: "drained" in hub.log.read_text(), "the drain to end", seconds=60)
            assert "drained" not in hub.log.read_text()
            (work / "go").touch()
            rest = await _resume(session, first[-1].id or "", until="answered-drained")
    assert "answered-drained" in rest[-1].data
    assert await anyio.to_thread.run_sync(lambda: hub.proc.wait(timeout=60)) == 0


async def test_a_sessions_events_go_when_the_session_ends():
    """In-process: the SDK's own server and client over loopback, with the hub's stores given per session."""
    events = HubEvents()

    async def on_list_tools(ctx: object, params: object) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[])

    server = Server("events", on_list_tools=on_list_tools)
    app = server.streamable_http_app(retry_interval=RETRY_MS)
    store_per_session(server.session_manager, events.new)
    port = free_port()
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.serve)
        await until(lambda: http.started, "uvicorn to start")
        with deadline(30):
            async with mcp.Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp"), mode="legacy") as client:
                await client.list_tools()
                assert events.bytes > 0  # the answers to initialize and tools/list are kept
            await until(lambda: events.bytes == 0, "the ended session's events to go")
        http.should_exit = True


async def test_an_answer_routed_while_the_client_resumes_reaches_the_resumed_stream():
    """In-process, the SDK's transport with the hub's stores: the call's answer is released as the client's
    resume reaches the store, and routed before the SDK would register the resumed stream (as a loaded
    machine delays it). Handed back to the SDK, that answer was stored but sent nowhere: the stream waited
    for good."""
    go = anyio.Event()
    events = HubEvents()

    class Releasing(SessionEvents):
        async def replay_events_after(self, last_event_id: str, send_callback: object) -> str | None:
            go.set()
            stream = await super().replay_events_after(last_event_id, send_callback)  # type: ignore[arg-type]
            await anyio.sleep(0.2)  # a busy machine, between the replay and what the SDK does next
            return stream

    async def on_call_tool(ctx: object, params: object) -> types.CallToolResult:
        close = ctx.close_sse_stream  # type: ignore[attr-defined]
        assert close is not None
        await close()
        await go.wait()
        return types.CallToolResult(content=[types.TextContent(type="text", text="answered-in-the-gap")])

    server = Server("events", on_call_tool=on_call_tool)
    app = server.streamable_http_app(retry_interval=RETRY_MS)
    store_per_session(server.session_manager, lambda: Releasing(events))
    port = free_port()
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    rest: list[Event] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(http.serve)
        await until(lambda: http.started, "uvicorn to start")
        with deadline(30):
            url = f"http://127.0.0.1:{port}/mcp"
            async with _raw_session(url) as session:
                first = await _post_until_closed(session, _call("-"))
                assert first and not any("answered-in-the-gap" in e.data for e in first)
                rest = await _resume(session, first[-1].id or "", until="answered-in-the-gap")
        http.should_exit = True
    assert "answered-in-the-gap" in rest[-1].data
