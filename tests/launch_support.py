"""Run a bash command as the bash tool starts it, for the sandbox tests: through the bash zygote.

`run(policy, command)` starts `command` with `bash_process.open_bash` (the zygote wherever the plan
has namespaces, as in production), reads its output while it runs, and returns (exit status, output)
once it exited, after killing whatever it left running. `start(policy, command)` is the bare launch
(`zygote_client.start`) for tests that kill, or deliberately do not kill, what it leaves behind.
"""

from __future__ import annotations

import contextlib
import os
import signal

import anyio

from omega_mcp.builtin.bash_process import open_bash
from omega_mcp.sandbox import zygote_client
from omega_mcp.sandbox.confined import ConfinedProcess
from omega_mcp.sandbox.launch import bash_launch
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline

BOUND_SECONDS = 20.0


async def run_async(policy: SandboxPolicy, command: str, bound_seconds: float = BOUND_SECONDS) -> tuple[int, str]:
    code = -1
    chunks: list[bytes] = []
    eof = anyio.Event()
    async with open_bash(policy, command) as process:
        assert process.stdout is not None
        stdout = process.stdout

        async def pump() -> None:
            try:
                async for chunk in stdout:
                    chunks.append(chunk)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                eof.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(pump)
            with deadline(bound_seconds):
                code = await process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # leftovers too (they may hold the pipe)
            with anyio.move_on_after(5):
                await eof.wait()
            tasks.cancel_scope.cancel()
    return code, b"".join(chunks).decode(errors="replace")


def run(policy: SandboxPolicy, command: str, bound_seconds: float = BOUND_SECONDS) -> tuple[int, str]:
    """(exit status, combined output) of `command` run as the bash tool runs it."""
    return anyio.run(run_async, policy, command, bound_seconds)


def output(policy: SandboxPolicy, command: str) -> str:
    return run(policy, command)[1]


async def start(policy: SandboxPolicy, command: str) -> ConfinedProcess:
    """The command started through the zygote, not supervised: the caller waits, kills and closes it."""
    launch = bash_launch(policy, command)
    assert launch.zygote, "this machine gives bash no namespaces: the zygote is not used"
    return await zygote_client.start(launch)
