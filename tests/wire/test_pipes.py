"""The pipe streams on real pipes: what `take` handles in the readiness callback, what the SDK gets,
in which order, and a writer behind a full pipe."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.message import SessionMessage

from omega_mcp._sdk import SESSION_MESSAGES
from omega_mcp.wire.pipes import PipeReader, PipeWriter
from waits import deadline


@contextmanager
def _pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    try:
        yield read_fd, write_fd
    finally:
        for fd in (read_fd, write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _call(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "t"}}


def _ping(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


def _id(message: SessionMessage | Exception) -> object:
    assert isinstance(message, SessionMessage)
    return message.message.model_dump()["id"]


async def test_take_handles_messages_as_they_arrive_without_anyone_receiving() -> None:
    taken: list[object] = []
    both = anyio.Event()

    def take(message: dict[str, Any]) -> bool:
        taken.append(message["id"])
        if len(taken) == 2:
            both.set()
        return True

    with _pipe() as (read_fd, write_fd):
        reader = PipeReader(read_fd, SESSION_MESSAGES, label="t")
        reader.take = take
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.receive)  # parks: the callback is watching from now on
            await anyio.sleep(0.05)
            os.write(write_fd, _line(_call(1)) + _line(_call(2)))
            with deadline(5):
                await both.wait()
            tg.cancel_scope.cancel()
        reader.detach()
    assert taken == [1, 2]


async def test_a_message_take_leaves_holds_back_the_ones_after_it_until_the_sdk_has_it() -> None:
    taken: list[object] = []
    with _pipe() as (read_fd, write_fd):
        reader = PipeReader(read_fd, SESSION_MESSAGES, label="t")

        def take(message: dict[str, Any]) -> bool:
            if message["method"] != "tools/call":
                return False
            taken.append(message["id"])
            return True

        reader.take = take
        os.write(write_fd, _line(_call(1)) + _line(_ping(2)) + _line(_call(3)) + _line(_ping(4)))
        with deadline(5):
            first = await reader.receive()
            assert taken == [1]  # 3 waits behind the ping the SDK has not had yet
            second = await reader.receive()
        assert [_id(first), _id(second)] == [2, 4]
        assert taken == [1, 3]
        reader.detach()


async def test_lines_that_are_not_json_rpc_reach_the_sdk_as_errors_and_the_rest_goes_on() -> None:
    with _pipe() as (read_fd, write_fd):
        reader = PipeReader(read_fd, SESSION_MESSAGES, label="t")
        reader.take = lambda message: False
        os.write(write_fd, b"not json\n" + _line({"jsonrpc": "2.0", "no": "method"}) + _line(_ping(7)))
        with deadline(5):
            received = [await reader.receive() for _ in range(3)]
        assert isinstance(received[0], Exception) and isinstance(received[1], Exception)
        assert _id(received[2]) == 7
        reader.detach()


async def test_a_line_nested_too_deeply_is_told_to_unreadable_and_reading_goes_on() -> None:
    """Before, the decoder's RecursionError escaped the readiness callback and nothing was read again."""
    deep = b"[" * 100_000 + b"]" * 100_000
    unreadable: list[str] = []
    taken: list[object] = []

    def take(message: dict[str, Any]) -> bool:
        if message.get("method") != "tools/call":
            return False
        taken.append(message["id"])
        return True

    def write_all(data: bytes, fd: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    with _pipe() as (read_fd, write_fd):
        reader = PipeReader(read_fd, SESSION_MESSAGES, label="t")
        reader.take, reader.unreadable = take, unreadable.append
        data = deep + b"\n" + b"[1, 2]\n" + _line(_call(1)) + _line(_ping(2))
        got: list[SessionMessage | Exception] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, write_all, data, write_fd)  # more than the pipe holds
            with deadline(10):
                got.append(await reader.receive())
        received = got[0]
        assert _id(received) == 2
        assert taken == [1]
        assert unreadable == ["not JSON (nested too deeply)", "not a JSON object"]
        reader.detach()


async def test_a_failing_take_hook_passes_the_message_to_the_sdk() -> None:
    with _pipe() as (read_fd, write_fd):
        reader = PipeReader(read_fd, SESSION_MESSAGES, label="t")

        def broken(message: dict[str, Any]) -> bool:
            raise RuntimeError("bug")

        reader.take = broken
        os.write(write_fd, _line(_ping(3)))
        with deadline(5):
            assert _id(await reader.receive()) == 3
        reader.detach()


async def test_end_of_stream_after_the_last_line_even_without_a_newline() -> None:
    with _pipe() as (read_fd, write_fd):
        reader = PipeReader(read_fd, SESSION_MESSAGES, label="t")
        os.write(write_fd, _line(_ping(1)) + json.dumps(_ping(2)).encode())
        os.close(write_fd)
        with deadline(5):
            assert [_id(await reader.receive()), _id(await reader.receive())] == [1, 2]
            with pytest.raises(anyio.EndOfStream):
                await reader.receive()
        assert reader.at_eof


async def test_abort_delivers_what_is_in_the_pipe_then_ends_a_parked_receive() -> None:
    with _pipe() as (read_fd, write_fd):
        reader = PipeReader(read_fd, SESSION_MESSAGES, label="t")
        got: list[object] = []
        first, ended = anyio.Event(), anyio.Event()

        async def receive_all() -> None:
            try:
                while True:
                    got.append(_id(await reader.receive()))
                    first.set()
            except anyio.EndOfStream:
                ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive_all)
            await anyio.sleep(0.05)
            os.write(write_fd, _line(_ping(1)))
            with deadline(5):
                await first.wait()
            # The writer is gone without closing its end (a process that died with children keeping it).
            os.write(write_fd, _line(_ping(2)))
            reader.abort()
            with deadline(5):
                await ended.wait()
        assert got == [1, 2]
        assert not reader.at_eof  # ended by us, not by the other side


async def test_a_regular_file_is_read_though_it_cannot_be_polled(tmp_path: Path) -> None:
    path = tmp_path / "input"
    path.write_bytes(_line(_ping(1)) + _line(_ping(2)))
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = PipeReader(fd, SESSION_MESSAGES, label="t")
        reader.take = lambda message: message["id"] == 1
        with deadline(5):
            assert _id(await reader.receive()) == 2
            with pytest.raises(anyio.EndOfStream):
                await reader.receive()
    finally:
        os.close(fd)


async def test_a_writer_behind_a_full_pipe_delivers_everything_in_order() -> None:
    with _pipe() as (read_fd, write_fd):
        writer = PipeWriter(write_fd, SESSION_MESSAGES, label="t")
        messages = [_line({"jsonrpc": "2.0", "method": "n", "params": {"i": i, "pad": "x" * 1000}}) for i in range(300)]
        for data in messages:  # about 300 KB: far more than a pipe holds
            writer.send_nowait(data)
        received = bytearray()
        os.set_blocking(read_fd, False)
        with deadline(10):
            while len(received) < sum(map(len, messages)):
                try:
                    received += os.read(read_fd, 1 << 16)
                except BlockingIOError:
                    await anyio.sleep(0.005)  # the writability callback writes the rest meanwhile
        assert bytes(received) == b"".join(messages)
        writer.detach()


async def test_a_writer_whose_reader_is_gone_raises_and_then_stays_closed() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    try:
        writer = PipeWriter(write_fd, SESSION_MESSAGES, label="t")
        with pytest.raises(anyio.BrokenResourceError):
            writer.send_nowait(_line(_ping(1)))
        with pytest.raises(anyio.ClosedResourceError):
            await writer.send_raw(_line(_ping(2)))
    finally:
        os.close(write_fd)


async def test_take_stops_reading_while_where_it_writes_is_congested() -> None:
    """Backpressure: a reader whose `take` writes to a pipe nobody reads stops reading its own pipe
    (the sender blocks) instead of queueing everything in memory; all of it arrives, in order, once
    the far end reads."""
    messages = [
        _line({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"pad": "x" * 2000}}) for i in range(3000)
    ]
    with _pipe() as (in_read, in_write), _pipe() as (out_read, out_write):
        reader, writer = (
            PipeReader(in_read, SESSION_MESSAGES, label="in"),
            PipeWriter(out_write, SESSION_MESSAGES, label="out"),
        )
        reader.take = lambda message: writer.send_nowait(json.dumps(message).encode() + b"\n") is None
        reader.congested = lambda: writer if writer.congested else None
        fed = anyio.Event()
        received = bytearray()

        def feed() -> None:
            with open(in_write, "wb", closefd=False) as pipe:  # blocking writes: the sender blocks when omega stops
                for data in messages:
                    pipe.write(data)

        async def feeder() -> None:
            await anyio.to_thread.run_sync(feed)
            fed.set()

        async def drive() -> None:
            with pytest.raises(anyio.EndOfStream):
                await reader.receive()  # everything is taken: it only waits, or waits for the writer to drain

        async with anyio.create_task_group() as tg:
            tg.start_soon(feeder)
            tg.start_soon(drive)
            await anyio.sleep(0.5)
            assert not fed.is_set()  # 6 MB did not all go into memory: the reader stopped reading
            expected = sum(map(len, messages))
            os.set_blocking(out_read, False)
            with deadline(30):
                while len(received) < expected:
                    try:
                        received += os.read(out_read, 1 << 16)
                    except BlockingIOError:
                        await anyio.sleep(0.002)
                await fed.wait()
            os.close(in_write)
        assert [json.loads(line)["id"] for line in bytes(received).splitlines()] == list(range(3000))
        reader.detach()
        writer.detach()
