"""sandbox/processes.py on real process groups: liveness (zombie-aware) and bounded termination."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import anyio
import pytest
from anyio.abc import ByteReceiveStream

from omega_mcp.sandbox.processes import group_alive, open_group, popen_group, terminate_group
from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


async def _first_line(stream: ByteReceiveStream) -> bytes:
    data = b""
    while b"\n" not in data:
        data += await stream.receive()
    return data.split(b"\n", 1)[0]


async def test_a_group_whose_leader_exited_but_a_child_lives_is_alive() -> None:
    # The leader prints its background child's pid and exits; the child keeps the group.
    process = await open_group(
        ["sh", "-c", "sleep 60 </dev/null >/dev/null 2>&1 & echo $!"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=None,
        cwd=None,
    )
    try:
        with deadline(10):
            assert process.stdout is not None
            child = int(await _first_line(process.stdout))
            await process.wait()
        assert os.getpgid(child) == process.pid  # the group id is the leader's pid, even once it is reaped
        assert group_alive(process.pid)
    finally:
        with deadline(10):
            await terminate_group(process.pid, kill_wait_seconds=5)
            await process.aclose()
    assert not group_alive(process.pid)


async def test_a_group_of_only_zombies_is_dead() -> None:
    process = popen_group(
        ["true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=None, cwd=None
    )
    try:
        with deadline(10):
            # Wait for the exit without reaping it: the leader stays a zombie, its group still exists.
            await anyio.to_thread.run_sync(
                lambda: os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT), abandon_on_cancel=True
            )
        os.killpg(process.pid, 0)  # the kernel still knows the group (no ProcessLookupError) ...
        assert not group_alive(process.pid)  # ... but nothing in it can run
    finally:
        process.wait(timeout=10)
    assert process.returncode == 0


async def test_terminate_group_kills_members_that_ignore_sigterm() -> None:
    # Both the leader and its child ignore SIGTERM (an ignored signal stays ignored across fork and exec).
    process = await open_group(
        ["sh", "-c", "trap '' TERM; sleep 60 </dev/null >/dev/null 2>&1 & echo $!; wait"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=None,
        cwd=None,
    )
    try:
        with deadline(10):
            assert process.stdout is not None
            child = int(await _first_line(process.stdout))
            assert os.getpgid(child) == process.pid
            await terminate_group(process.pid, grace_seconds=0.2, kill_wait_seconds=5)
            assert not group_alive(process.pid)
            await process.wait()
        assert process.returncode == -signal.SIGKILL
    finally:
        with deadline(10):
            await terminate_group(process.pid, grace_seconds=0.2, kill_wait_seconds=5)
            await process.aclose()
