"""The stdio transport for downstream servers: one subprocess, newline-delimited JSON-RPC on its pipes.

It does what the SDK's `stdio_client` does (the server runs in its own process group, env is the
SDK's safe default environment plus the server's `env`, shutdown closes stdin, waits, then
SIGTERMs and SIGKILLs the group, under a shielded scope with every step bounded; processes are
started by `spawn.py`, which may have done so before the SDK was even imported), but talks to
the pipes through `wire.pipes.PipeReader` / `PipeWriter` (no relay tasks on the hot path) and keeps
what a supervisor needs: the pid, the exit status and the last lines of stderr, so "server X is
down" can say why (`decisive_lines`: the error lines among them, not only the last line, which is
often a hint or where a log went). omega never buffers more than `[hub] max_message_mb` of one
message. The server's stderr goes to our log, line by line. A crash is noticed by the exit status as
well as by EOF: a grandchild that inherited stdout can keep the pipe open. An answer longer than `[hub]
max_message_mb` is dropped as it is read and fails that request only (`wire/oversize.py`); only a long
line that names no request it answers ends the connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio import AsyncContextManagerMixin
from mcp.client.stdio import StdioServerParameters

from omega_mcp._sdk import SESSION_MESSAGES
from omega_mcp.proxy.spawn import EarlyStarts, Spawned, spawn
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.processes import terminate_group
from omega_mcp.sandbox.servers import explain_denial, offline_launcher
from omega_mcp.sandbox.untrusted import LaunchGuard
from omega_mcp.wire.oversize import Oversize, limit_text, too_large_error
from omega_mcp.wire.pipes import PipeReader, PipeWriter

__all__ = ["StdioTransport"]

logger = logging.getLogger(__name__)

_EXIT_GRACE_SECONDS = 2.0
"""How long a server gets to exit by itself after its stdin closes."""
_KILL_GRACE_SECONDS = 2.0
"""SIGTERM → SIGKILL escalation delay for the process group."""
_POLL_SECONDS = 0.01
_EXIT_WATCH_SECONDS = 0.2
_STDERR_TAIL_LINES = 20
_STDERR_LINE_LIMIT = 8192


class StdioTransport(AsyncContextManagerMixin):
    """An async context manager yielding `(read_stream, write_stream)` for one server process.

    Raises on enter:
        OSError: the command cannot be started (not found, not executable, bad cwd).
    """

    def __init__(
        self,
        params: StdioServerParameters,
        *,
        server_name: str,
        early: EarlyStarts | None = None,
        confinement: SandboxPolicy | None = None,
        guard: LaunchGuard | None = None,
        max_message_bytes: int | None = None,
    ) -> None:
        self._early = early
        self._guard = guard
        self._max_message_bytes = max_message_bytes
        self._reader: PipeReader[Any] | None = None
        self.confinement = confinement
        self.params = params
        self.server_name = server_name
        self.label = f"[{server_name}]"
        self.pid: int | None = None
        self.returncode: int | None = None
        self.stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self.exited_by_itself = False
        """Whether the server exited (or closed stdout) before omega asked it to stop."""
        self.early_asked: tuple[str, ...] = ()
        """What `EarlyStarts.start` already asked (`discover`, `initialize`): their answers are read first."""
        self._stopping = False
        self._stopped = False
        self._open_fds: set[int] = set()

    def _spawn(self) -> Spawned:
        params = self.params
        env = params.env or None
        spawned = None
        if self._early is not None:
            spawned = self._early.adopt(
                self.server_name, params.command, params.args, env, params.cwd, confinement=self.confinement
            )
        if spawned is None:
            guard = (self._guard, self.server_name) if self._guard is not None else None
            spawned = spawn(params.command, params.args, env, params.cwd, confinement=self.confinement, guard=guard)
        self.early_asked = spawned.asked
        self._open_fds = {spawned.stdin, spawned.stdout, spawned.stderr}
        return spawned

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[tuple[PipeReader[Any], PipeWriter[Any]]]:
        spawned = self._spawn()
        # No await between the spawn and the try below: a cancellation there would leak the process.
        process = spawned.process
        self.pid = process.pid
        reader = self._reader = PipeReader(
            spawned.stdout, SESSION_MESSAGES, label=self.label, max_message_bytes=self._max_message_bytes
        )
        reader.oversize = self._oversized
        writer = PipeWriter(spawned.stdin, SESSION_MESSAGES, label=self.label)
        try:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(self._read_stderr, spawned.stderr)
                task_group.start_soon(self._watch_exit, process, reader)
                try:
                    yield reader, writer
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(process, reader, writer)
                    task_group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if not self._stopped:  # we never got as far as the shutdown above
                    await self._stop(process, reader, writer)
            self._close_fds()

    async def _oversized(self, oversize: Oversize) -> dict[str, object] | None:
        """An answer over the bound fails its request; a request or notification is dropped; a line
        that names nothing ends the connection (the server would wait on an answer forever)."""
        limit = self._max_message_bytes
        assert limit is not None and self._reader is not None
        request_id = oversize.request_id
        what = f"a message of {oversize.size} bytes, longer than {limit_text(limit)}"
        if oversize.has_method:
            logger.warning("%s dropped %s (a request or notification)", self.label, what)
            return None
        if request_id is None:
            self._reader.stop(f"a message exceeded {limit_text(limit)}")
            return None
        logger.warning("%s dropped %s: the request it answers fails", self.label, what)
        return {"jsonrpc": "2.0", "id": request_id, "error": too_large_error(limit, oversize.size)}

    @property
    def overflow(self) -> str | None:
        """Why omega stopped reading the server (a message over `[hub] max_message_mb`), or None."""
        return self._reader.overflow if self._reader is not None else None

    def _close_fd(self, fd: int) -> None:
        if fd in self._open_fds:
            self._open_fds.discard(fd)
            anyio.notify_closing(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def _close_fds(self) -> None:
        if self._reader is not None:
            self._reader.detach()
        for fd in list(self._open_fds):
            self._close_fd(fd)

    async def _stop(self, process: subprocess.Popen[bytes], reader: PipeReader[Any], writer: PipeWriter[Any]) -> None:
        """Close stdin, wait for a voluntary exit, then kill the whole group (every step bounded)."""
        if self.overflow is None and (reader.at_eof or process.poll() is not None):
            self.exited_by_itself = True  # it went away before we asked
        self._stopping = True
        writer.abort()
        self._close_fd(writer.fd)  # EOF on the server's stdin: the spec's polite "please exit"
        if self.overflow is None:  # one still writing a message too long to read gets no grace
            await self._wait_exit(process, _EXIT_GRACE_SECONDS)
        # Even after a clean exit, children it left in its group (npx → node) must go too. Its pid is the
        # group id (a new session), even once it is reaped; polling reaps it, or it would linger as a zombie.
        await terminate_group(
            process.pid, _KILL_GRACE_SECONDS, kill_wait_seconds=_KILL_GRACE_SECONDS, reap=process.poll
        )
        if not await self._wait_exit(process, _KILL_GRACE_SECONDS):
            logger.warning("%s: process %s survived SIGKILL; abandoning it", self.label, process.pid)
        self._stopped = True

    async def _wait_exit(self, process: subprocess.Popen[bytes], seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            while process.poll() is None:  # noqa: ASYNC110 - an exit status has no event to wait on
                await anyio.sleep(_POLL_SECONDS)
        self.returncode = process.returncode
        return process.returncode is not None

    async def _watch_exit(self, process: subprocess.Popen[bytes], reader: PipeReader[Any]) -> None:
        while process.poll() is None:  # noqa: ASYNC110 - an exit status has no event to wait on
            await anyio.sleep(_EXIT_WATCH_SECONDS)
        self.returncode = process.returncode
        self.exited_by_itself = self.exited_by_itself or not self._stopping
        reader.abort()  # deliver what it wrote before dying, then end the stream

    async def _read_stderr(self, fd: int) -> None:
        os.set_blocking(fd, False)
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                try:
                    await anyio.wait_readable(fd)
                except anyio.ClosedResourceError:
                    break
                continue
            except OSError:
                break
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._stderr_line(line)
            if len(pending) > _STDERR_LINE_LIMIT:  # a server writing without newlines must not grow us unbounded
                self._stderr_line(pending)
                pending = b""
        if pending:
            self._stderr_line(pending)

    def _stderr_line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            self.stderr_tail.append(line)
            logger.info("%s: %s", self.label, line)

    def confinement_hint(self) -> str | None:
        """What the sandbox may be refusing a confined server that hangs (None when unconfined)."""
        if self.confinement is None:
            return None
        return explain_denial(self.confinement, self.stderr_tail) or offline_launcher(
            self.confinement, self.params.command
        )

    def exit_detail(self) -> str:
        """How the process ended, with the stderr lines that say why: `exit status 1: ModuleNotFoundError: ...`."""
        code = self.returncode
        if code is None:
            status = "process still running"
        elif code < 0:
            status = f"killed by signal {-code}"
        else:
            status = f"exit status {code}"
        if self.confinement is not None and code:
            denied = explain_denial(self.confinement, self.stderr_tail)
            if denied is not None:
                return f"{status}: {denied}"
        why = decisive_lines(self.stderr_tail)
        return f"{status}: {why}" if why else status


# What an error line looks like, in the words of Python, Node/npm, uv, Go and the C library (uv marks
# its error with a multiplication sign); npm starts every line with "npm error", which says nothing.
_ERROR_LINE = re.compile(
    r"\b(error|exception|fatal|panic|fail(ed|ure|s)?|denied|refused|cannot|can't|unable|invalid|not found|"
    r"no such|no module|unknown|unreachable|timed? ?out)\b|^\W*[\u00d7\u2716\u2717]",
    re.IGNORECASE,
)
_TOOL_PREFIX = re.compile(r"^(npm (error|ERR!|warn)|pnpm|yarn)\b\s*", re.IGNORECASE)
_HINT_LINE = re.compile(r"^\W*(help|hint|tip|try|consider|did you mean)\b", re.IGNORECASE)
# Lines that never say why: a traceback's header, where a log went.
_NOISE_LINE = re.compile(r"traceback \(most recent call last\)|a complete log of this run", re.IGNORECASE)
_DECISIVE_WINDOW = 12
_DECISIVE_LINE_CHARS = 300


def decisive_lines(lines: Sequence[str]) -> str:
    """The lines of a stderr tail that say why a server ended, as one line: the first and the last line
    that read like an error (among the last few), then the last line when it is a hint (uv's `help:`),
    without repeats; the last line alone when none reads like an error."""
    window = [line.strip() for line in list(lines)[-_DECISIVE_WINDOW:] if line.strip()]
    kept = [line for line in window if not _NOISE_LINE.search(line)] or window[-1:]
    errors = [line for line in kept if _ERROR_LINE.search(_TOOL_PREFIX.sub("", line))]
    hint = [line for line in kept[-1:] if _HINT_LINE.search(line) or not errors]
    chosen = dict.fromkeys([*errors[:1], *errors[-1:], *hint])
    return " … ".join(
        line if len(line) <= _DECISIVE_LINE_CHARS else line[: _DECISIVE_LINE_CHARS - 1] + "…" for line in chosen
    )
