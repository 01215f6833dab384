"""SignalGuard in-process: held signals are noted per guard, and a receiver acts on a held one at once."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import anyio
import pytest

from omega_mcp.cli.signals import SignalGuard
from waits import deadline


@pytest.fixture(autouse=True)
def _restore_handlers() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_held_signal_is_noted_by_its_own_guard_only():
    guard, other = SignalGuard(), SignalGuard()
    other.hold()
    guard.hold()
    signal.raise_signal(signal.SIGTERM)
    assert guard.held == (signal.SIGTERM,)
    assert other.held == ()


async def test_a_signal_held_during_startup_cancels_as_soon_as_a_receiver_listens():
    guard = SignalGuard()
    guard.hold()
    signal.raise_signal(signal.SIGINT)
    received: list[int] = []
    with deadline(5):
        async with anyio.create_task_group() as tg:
            await tg.start(guard.until_signalled, tg.cancel_scope, received)
            await anyio.sleep_forever()
    assert received == [signal.SIGINT]
    signal.raise_signal(signal.SIGTERM)  # during cleanup: held again, not fatal
    assert guard.held == (signal.SIGINT, signal.SIGTERM)


async def test_a_signal_while_listening_cancels_the_scope_and_is_then_held_again():
    guard = SignalGuard()
    guard.hold()
    received: list[int] = []
    with deadline(5):
        async with anyio.create_task_group() as tg:
            await tg.start(guard.until_signalled, tg.cancel_scope, received)
            signal.raise_signal(signal.SIGTERM)
            await anyio.sleep_forever()
    assert received == [signal.SIGTERM]
    assert guard.held == ()
    signal.raise_signal(signal.SIGINT)
    assert guard.held == (signal.SIGINT,)
