"""The `bash` built-in tool: run one command under the sandbox and return its combined output.

The command runs through `bash_process.open_bash` (own process group, stdin from /dev/null, one
output pipe into a bounded `OutputBuffer`). Every wait is bounded: the timeout kills the group
(TERM, grace, KILL; `sandbox/processes.py`); after bash exits, background children that still hold
the pipe get a short drain window and are then killed, so a call never hangs and never leaves
processes behind. `run_in_background` hands the command to the background shells of `shells.py`.
With a `ProtectedTree` (`sandbox/tracker.py`) the protected names that exist are bound read-only
for the command, and what it created or replaced there anyway is undone when it ends: the result
says so (`notes.with_note`) and is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import mcp_types as types
from anyio.abc import Process

from omega_mcp.builtin.bash_process import DRAIN_SECONDS, REAP_SECONDS, describe_exit, open_bash, pump_output
from omega_mcp.builtin.notes import with_note
from omega_mcp.builtin.output import OutputBuffer
from omega_mcp.builtin.schemas import MAX_BASH_TIMEOUT_SECONDS, BashArgs
from omega_mcp.results import text_result
from omega_mcp.sandbox.confined import ConfinedProcess
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.processes import terminate_group, tree_alive
from omega_mcp.sandbox.tracker import ProtectedTree

if TYPE_CHECKING:
    from omega_mcp.builtin.shells import ShellRegistry

__all__ = ["run_bash"]


@dataclass(slots=True)
class _Outcome:
    returncode: int | None
    timed_out: bool
    lingering: bool
    launcher_died: bool = False


async def _supervise(process: Process, buffer: OutputBuffer, timeout_seconds: float) -> _Outcome:
    """Wait for bash within the timeout, drain its pipe (bounded) and kill whatever it left running."""
    eof = anyio.Event()
    timed_out = lingering = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_output, process, buffer, eof)
        with anyio.move_on_after(timeout_seconds):
            await process.wait()
        timed_out = process.returncode is None
        if timed_out:
            await terminate_group(process.pid)
        with anyio.move_on_after(DRAIN_SECONDS):
            await eof.wait()
        if not eof.is_set() or tree_alive(process):
            # Children outlived bash (or escaped the kill): stop them, take a last bounded read.
            lingering = not timed_out
            await terminate_group(process.pid)
            with anyio.move_on_after(DRAIN_SECONDS / 3):
                await eof.wait()
        if process.returncode is None:
            with anyio.move_on_after(REAP_SECONDS):
                await process.wait()
        tg.cancel_scope.cancel()
    buffer.close()
    died = isinstance(process, ConfinedProcess) and process.launcher_died
    return _Outcome(process.returncode, timed_out, lingering, died)


def _format(text: str, outcome: _Outcome, timeout_seconds: float) -> types.CallToolResult:
    notes: list[str] = []
    if outcome.launcher_died:
        notes.append("[the sandbox launcher died, and the command with it; the next bash call starts a new launcher]")
    if outcome.timed_out:
        notes.append(f"[timed out after {timeout_seconds:g} s; the process tree was killed]")
    elif outcome.lingering:
        notes.append(
            "[background processes still running after the command finished were terminated; "
            "use run_in_background for servers and long-running jobs]"
        )
    returncode = outcome.returncode
    failed = outcome.timed_out or returncode is None or returncode != 0
    if not outcome.timed_out:
        status = "exit status unknown" if returncode is None else describe_exit(returncode)
        if not text:
            notes.insert(0, status)  # SPEC: a silent command's text is `exit code N`
        elif failed:
            notes.append(status)  # so the model sees the status after the output
    if notes and text and not text.endswith("\n"):
        text += "\n"
    return text_result(text + "\n".join(notes), is_error=failed)


async def run_bash(
    policy: SandboxPolicy,
    args: BashArgs,
    shells: ShellRegistry,
    *,
    owner: object | None = None,
    tree: ProtectedTree | None = None,
) -> types.CallToolResult:
    """Run `args.command` with bash in the workspace; combined output, `isError` on failure or timeout.

    A background shell belongs to `owner` (see `shells.py`). `tree` guards the protected names.

    Raises:
        SandboxUnavailableError: the policy needs an OS sandbox this machine cannot give.
        ToolError: bash cannot be started, or a background shell cannot be added.
    """
    if args.run_in_background:
        shell_id, undone = await shells.start(
            policy, args.command, timeout_seconds=args.timeout, owner=owner, tree=tree
        )
        started = text_result(
            f"Started background shell {shell_id}. Read its new output with bash_output "
            f'(shell_id: "{shell_id}") and stop it with kill_shell (shell_id: "{shell_id}").'
        )
        return with_note(started, undone)
    timeout_seconds = min(args.timeout or policy.bash_timeout_seconds, MAX_BASH_TIMEOUT_SECONDS)
    buffer = OutputBuffer()
    if tree is None:
        async with open_bash(policy, args.command) as process:
            outcome = await _supervise(process, buffer, timeout_seconds)
        return _format(buffer.take(), outcome, timeout_seconds)
    run, undone = await anyio.to_thread.run_sync(tree.begin)
    try:
        async with open_bash(policy, args.command, run.binds) as process:
            outcome = await _supervise(process, buffer, timeout_seconds)
    finally:
        with anyio.CancelScope(shield=True):
            undone += await anyio.to_thread.run_sync(tree.end, run)
    return with_note(_format(buffer.take(), outcome, timeout_seconds), undone)
