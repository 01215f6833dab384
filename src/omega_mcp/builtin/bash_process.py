"""One bash process under the sandbox, shared by the `bash` tool (`bash.py`) and background shells (`shells.py`).

bash is started exactly as `sandbox.launch.bash_launch` says (through the bash zygote where the
plan has namespaces, `sandbox/zygote_client.py`, else through the trampoline), in its own session
(so its process group is the kill unit, see `sandbox/processes.py`), with stdin from /dev/null and
stdout+stderr on one pipe (output stays in order); `pump_output` streams that pipe into a bounded `OutputBuffer`.
Leaving `open_bash` kills the group and reaps bash, shielded and with every step bounded, so a
cancelled caller never leaves processes behind. A command too long for one argv string runs from a
private 0600 file instead.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import anyio
from anyio.abc import Process

from omega_mcp.builtin.output import OutputBuffer
from omega_mcp.errors import ToolError
from omega_mcp.sandbox import zygote_client
from omega_mcp.sandbox.launch import BashLaunch, bash_launch
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.processes import open_group, terminate_tree

__all__ = ["DRAIN_SECONDS", "REAP_SECONDS", "describe_exit", "open_bash", "pump_output"]

DRAIN_SECONDS = 1.5
"""How long output is still read after bash exited or was killed (children may hold the pipe)."""

REAP_SECONDS = 2.0
"""For the event loop to observe the death of a killed leader."""

_HUGE_COMMAND_BYTES = 100 * 1024
"""Above this a command goes through a file: one argv string over 128 KiB fails with E2BIG."""


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
async def _launch(policy: SandboxPolicy, command: str, protected: Sequence[str]) -> AsyncGenerator[BashLaunch]:
    if len(command.encode("utf-8", "surrogateescape")) <= _HUGE_COMMAND_BYTES:  # checked encodable
        yield bash_launch(policy, command, protected)
        return
    async with _command_file(policy, command) as path:
        launch = bash_launch(policy, command, protected)
        if launch.argv[-2:] == ("-c", command) and launch.program[-2:] == ("-c", command):
            # `bash [options] FILE` runs the script file
            launch = replace(launch, argv=(*launch.argv[:-2], str(path)), program=(*launch.program[:-2], str(path)))
        else:
            # An argv shape we do not know (e.g. a wrapper): let the shell source the file instead.
            launch = bash_launch(policy, f". {shlex.quote(str(path))}", protected)
        yield launch


async def _start(launch: BashLaunch) -> Process:
    """Through the bash zygote when the plan allows it (namespaces), else through the trampoline."""
    if launch.zygote:
        return await zygote_client.start(launch)
    try:
        return await open_group(
            launch.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=launch.env,
            cwd=launch.cwd,
        )
    except OSError as exc:
        raise ToolError(f"Could not start bash ({launch.argv[0]}) in {launch.cwd}: {exc.strerror or exc}.") from exc


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
async def open_bash(policy: SandboxPolicy, command: str, protected: Sequence[str] = ()) -> AsyncGenerator[Process]:
    """Start `command` as the sandbox says, in a new session; on exit kill its group and release it.
    `protected` paths are bound read-only for it (`sandbox/tracker.py`).

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
    async with _launch(policy, command, protected) as launch:
        process = await _start(launch)
        try:
            yield process
        finally:
            with anyio.CancelScope(shield=True):
                await terminate_tree(process)  # the leader's pid is the group id (new session)
                with anyio.move_on_after(REAP_SECONDS):
                    # Closes our pipe end too, so a kill survivor holding it cannot block us.
                    await process.aclose()
