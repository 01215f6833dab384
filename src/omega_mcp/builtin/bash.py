"""The `bash` built-in tool: run one command under the sandbox and return its combined output.

bash is started exactly as `sandbox.launch.bash_launch` says, in its own session (so its process
group is the kill unit), with stdin from /dev/null and stdout+stderr on one pipe (output stays in
order). Output streams into a bounded `OutputBuffer`. Every wait is bounded: the timeout kills the
group (TERM, grace, KILL); after bash exits, background children that still hold the pipe get a
short drain window and are then killed, so a call never hangs and never leaves processes behind.
The spawn/kill helpers here are shared with the background shells of `shells.py`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio.abc import Process
from mcp import types

from omega_mcp.builtin.output import OutputBuffer
from omega_mcp.builtin.schemas import MAX_BASH_TIMEOUT_SECONDS, BashArgs
from omega_mcp.errors import ToolError
from omega_mcp.sandbox.launch import bash_launch
from omega_mcp.sandbox.policy import SandboxPolicy

if TYPE_CHECKING:
    from omega_mcp.builtin.shells import ShellRegistry

__all__ = [
    "DRAIN_SECONDS",
    "TERMINATE_GRACE_SECONDS",
    "describe_exit",
    "group_alive",
    "open_bash",
    "pump_output",
    "run_bash",
    "terminate_group",
    "text_result",
]

TERMINATE_GRACE_SECONDS = 2.0
"""Between SIGTERM and SIGKILL of a process group."""

DRAIN_SECONDS = 1.5
"""How long output is still read after bash exited or was killed (children may hold the pipe)."""

_REAP_SECONDS = 2.0
"""For the event loop to observe the death of a killed leader."""

_HUGE_COMMAND_BYTES = 100 * 1024
"""Above this a command goes through a file: one argv string over 128 KiB fails with E2BIG."""

_GROUP_POLL_SECONDS = 0.02


def text_result(text: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


def describe_exit(returncode: int) -> str:
    """`exit code N`, or `killed by signal N (SIGNAME)` for a negative (signal) status."""
    if returncode >= 0:
        return f"exit code {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"killed by signal {number}"
    return f"killed by signal {number} ({name})"


def _live_member(pgid: int) -> bool:
    """Whether /proc lists a non-zombie process in group `pgid` (True when /proc cannot tell)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile, or unreadable
        # After the command name: state, ppid, pgrp.
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` still has a live (non-zombie) member.

    Zombies count as gone: an init that does not reap orphans (some containers) would otherwise
    keep every wait below running to its bound.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # EPERM proves nothing; ask /proc
    return _live_member(pgid)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to the group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # some member is not ours to signal; keep escalating for the rest
    return True


async def terminate_group(process: Process, grace_seconds: float = TERMINATE_GRACE_SECONDS) -> None:
    """SIGTERM the process group of `process`, wait at most `grace_seconds`, then SIGKILL what is left.

    The group id is the leader's pid (it was started in a new session); never `getpgid()`, which fails
    once the leader is reaped while members live on. Bounded; safe to call on a dead group.
    """
    pgid = process.pid
    if not _signal_group(pgid, signal.SIGTERM):
        return
    with anyio.move_on_after(grace_seconds):
        # No event tells us another process group died: poll it, bounded by the grace period.
        while group_alive(pgid):  # noqa: ASYNC110
            await anyio.sleep(_GROUP_POLL_SECONDS)
        return
    _signal_group(pgid, signal.SIGKILL)


async def pump_output(process: Process, buffer: OutputBuffer, eof: anyio.Event) -> None:
    """Read the process's combined output into `buffer` until end of file, then set `eof`."""
    assert process.stdout is not None, "bash is started with stdout=PIPE"
    try:
        async for chunk in process.stdout:
            buffer.feed(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass  # our end was closed by the cleanup: nothing more to read
    finally:
        eof.set()


@asynccontextmanager
async def _command_file(policy: SandboxPolicy, command: str) -> AsyncGenerator[Path]:
    """A 0600 file holding `command`, in a private 0700 directory under the scratch dir; removed on exit."""
    try:
        policy.scratch_dir.mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix="omega-cmd-", dir=policy.scratch_dir))
    except OSError as exc:
        raise ToolError(
            f"The command is too long to pass as an argument ({len(command.encode())} bytes) and writing it to "
            f"a file under {policy.scratch_dir} failed: {exc.strerror or exc}. Shorten the command or write "
            "the script with the write tool and run it with bash."
        ) from exc
    try:
        path = directory / "command.sh"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as file:
            file.write(command)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@asynccontextmanager
async def _launch_argv(
    policy: SandboxPolicy, command: str
) -> AsyncGenerator[tuple[tuple[str, ...], dict[str, str], Path]]:
    if len(command.encode("utf-8", "surrogateescape")) <= _HUGE_COMMAND_BYTES:  # checked encodable
        launch = bash_launch(policy, command)
        yield launch.argv, launch.env, launch.cwd
        return
    async with _command_file(policy, command) as path:
        launch = bash_launch(policy, command)
        argv = launch.argv
        if argv[-2:] == ("-c", command):
            argv = (*argv[:-2], str(path))  # `bash [options] FILE` runs the script file
        else:
            # An argv shape we do not know (e.g. a wrapper): let the shell source the file instead.
            launch = bash_launch(policy, f". {shlex.quote(str(path))}")
            argv = launch.argv
        yield argv, launch.env, launch.cwd


def _check_command(command: str) -> None:
    """Refuse what cannot become an argv string, with a message instead of a traceback."""
    if "\x00" in command:
        raise ToolError("The command contains a NUL character (\\x00), which cannot be passed to bash; remove it.")
    try:
        command.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"The command contains text that cannot be encoded as UTF-8 (position {exc.start}: a lone surrogate "
            "code point); remove or replace it."
        ) from exc


@asynccontextmanager
async def open_bash(policy: SandboxPolicy, command: str) -> AsyncGenerator[Process]:
    """Start `command` as the sandbox says, in a new session; on exit kill its group and release it.

    The cleanup runs shielded with every step bounded, so a cancelled caller leaves no process behind.

    Raises:
        SandboxUnavailableError: the policy needs an OS sandbox this machine cannot give.
        ToolError: the command is not valid text, the workspace cannot be created or bash cannot be started.
    """
    _check_command(command)
    try:
        policy.workspace.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(
            f"Cannot create the workspace directory {policy.workspace}: {exc.strerror or exc}. "
            "Check the configured workspace path."
        ) from exc
    async with _launch_argv(policy, command) as (argv, env, cwd):
        try:
            process = await anyio.open_process(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"Could not start bash ({argv[0]}) in {cwd}: {exc.strerror or exc}.") from exc
        try:
            yield process
        finally:
            with anyio.CancelScope(shield=True):
                await terminate_group(process)
                with anyio.move_on_after(_REAP_SECONDS):
                    # Closes our pipe end too, so a kill survivor holding it cannot block us.
                    await process.aclose()


@dataclass(slots=True)
class _Outcome:
    returncode: int | None
    timed_out: bool
    lingering: bool


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
            await terminate_group(process)
        with anyio.move_on_after(DRAIN_SECONDS):
            await eof.wait()
        if not eof.is_set() or group_alive(process.pid):
            # Children outlived bash (or escaped the kill): stop them, take a last bounded read.
            lingering = not timed_out
            await terminate_group(process)
            with anyio.move_on_after(DRAIN_SECONDS / 3):
                await eof.wait()
        if process.returncode is None:
            with anyio.move_on_after(_REAP_SECONDS):
                await process.wait()
        tg.cancel_scope.cancel()
    buffer.close()
    return _Outcome(process.returncode, timed_out, lingering)


def _format(text: str, outcome: _Outcome, timeout_seconds: float) -> types.CallToolResult:
    notes: list[str] = []
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


async def run_bash(policy: SandboxPolicy, args: BashArgs, shells: ShellRegistry) -> types.CallToolResult:
    """Run `args.command` with bash in the workspace; combined output, `isError` on failure or timeout.

    Raises:
        SandboxUnavailableError: the policy needs an OS sandbox this machine cannot give.
        ToolError: bash cannot be started, or a background shell cannot be added.
    """
    if args.run_in_background:
        shell_id = await shells.start(policy, args.command, timeout_seconds=args.timeout)
        return text_result(
            f"Started background shell {shell_id}. Read its new output with bash_output "
            f'(shell_id: "{shell_id}") and stop it with kill_shell (shell_id: "{shell_id}").'
        )
    timeout_seconds = min(args.timeout or policy.bash_timeout_seconds, MAX_BASH_TIMEOUT_SECONDS)
    buffer = OutputBuffer()
    async with open_bash(policy, args.command) as process:
        outcome = await _supervise(process, buffer, timeout_seconds)
    return _format(buffer.take(), outcome, timeout_seconds)
