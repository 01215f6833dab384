"""The suite's one way to wait: bounded, generous, and scaled by one factor.

A bound in a test is there to turn a hang into a failure, never to race the clock, so every bound
is multiplied by `FACTOR` (`OMEGA_TEST_TIME_FACTOR`, default 3): a passing test never waits for it,
and a loaded machine (a busy 2-core CI runner at load 12) gets room instead of spurious timeouts.
`deadline` replaces `anyio.fail_after` in tests; `until` / `until_sync` poll process-level state that
has no event to wait on (prefer an `anyio.Event` where there is one). Bounds that must stay short
because the test asserts that something does *not* happen use `anyio.move_on_after` unscaled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager

import anyio

__all__ = ["FACTOR", "deadline", "scaled", "until", "until_sync"]


def _factor() -> float:
    raw = os.environ.get("OMEGA_TEST_TIME_FACTOR", "3")
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"OMEGA_TEST_TIME_FACTOR must be a number, not {raw!r}") from None
    return max(value, 1.0)


FACTOR = _factor()


def scaled(seconds: float) -> float:
    """A bound of `seconds` on an idle machine, stretched by the suite's factor."""
    return seconds * FACTOR


def deadline(seconds: float) -> AbstractContextManager[anyio.CancelScope]:
    """`anyio.fail_after` with the bound scaled: fails the test (TimeoutError) instead of hanging."""
    return anyio.fail_after(scaled(seconds))


async def until(
    check: Callable[[], bool] | Callable[[], Awaitable[bool]],
    what: str = "condition",
    seconds: float = 10.0,
    interval: float = 0.02,
) -> None:
    """Poll `check` (sync or async) until it is true; a bound turns a hang into a failure naming `what`."""
    try:
        with deadline(seconds):
            while True:
                result = check()
                if not isinstance(result, bool):
                    result = await result
                if result:
                    return
                await anyio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"timed out after {scaled(seconds):g} s waiting for {what}") from None


def until_sync(
    check: Callable[[], bool], what: str = "condition", seconds: float = 10.0, interval: float = 0.02
) -> None:
    """`until` for synchronous tests (subprocess state, files a child writes)."""
    end = time.monotonic() + scaled(seconds)
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {scaled(seconds):g} s waiting for {what}")
        time.sleep(interval)
