"""Background shells: `bash` with `run_in_background`, polled by `bash_output`, stopped by `kill_shell`.

`ShellRegistry` is an async context manager owned by the Toolbox for the server's lifetime; each
shell is a supervisor task in the registry's task group that reads output continuously into a
bounded `OutputBuffer` (memory stays bounded for chatty shells) and kills the process group once
bash is done. `bash_output` returns only output not returned before. At most `MAX_RUNNING_SHELLS` run
per owner (one client cannot take every slot), each is killed after the policy's `[sandbox]
shell_lifetime`, and leaving the registry kills every shell's process group (shielded, bounded): no
orphans. With a `ProtectedTree` a shell's protected names are bound read-only for it, and what it
created there anyway is undone at the latest on its next `bash_output` or when it ends.

Ownership, decided: every shell belongs to the owner that started it (the MCP server passes the
client's connection; the agent loop and the CLI pass None, the process itself). An owner sees only
its own shells: another owner's id gets exactly the error of an unknown id, and error texts list
only the caller's shells. Ids are `shell_` plus 12 random hex digits, so none can be guessed.
`close_owner()` kills an owner's shells when its session ends. `NO_SESSION` is the owner of a
request that has no session (a stateless 2026-era HTTP request): nothing would ever end its shells
and the hub's one token names no client, so it may not start any.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Self

import anyio
import mcp_types as types
from anyio import AsyncContextManagerMixin
from anyio.abc import Process, TaskGroup, TaskStatus

from omega_mcp.builtin.bash_process import DRAIN_SECONDS, describe_exit, open_bash, pump_output
from omega_mcp.builtin.notes import with_note
from omega_mcp.builtin.output import OutputBuffer
from omega_mcp.builtin.schemas import BashOutputArgs, KillShellArgs
from omega_mcp.errors import ToolError
from omega_mcp.results import text_result
from omega_mcp.sandbox.confined import ConfinedProcess
from omega_mcp.sandbox.policy import HUB_CLIENT, MAX_SHELLS_PER_CLIENT, MAX_SHELLS_PER_SESSION, SandboxPolicy
from omega_mcp.sandbox.processes import terminate_group, tree_alive
from omega_mcp.sandbox.tracker import ProtectedTree, Run, Undone

__all__ = ["MAX_RUNNING_SHELLS", "NO_SESSION", "ShellRegistry", "bash_output", "kill_shell"]

MAX_RUNNING_SHELLS = MAX_SHELLS_PER_SESSION
"""Per owner (client session)."""
_MAX_KEPT_SHELLS = 64
"""Finished shells are kept (for their last output and status) up to this many entries in all."""

_SHUTDOWN_SECONDS = 8.0
"""Bound on leaving the registry: parallel TERM, grace, KILL, reap of every shell."""

_KILL_WAIT_SECONDS = 5.0


class _NoSession:
    def __repr__(self) -> str:
        return "NO_SESSION"


NO_SESSION: object = _NoSession()
"""The owner of a call that has no session (a stateless 2026-era request): it cannot start shells."""


@dataclass(slots=True, eq=False)
class _Shell:
    shell_id: str
    owner: object | None
    command: str
    timeout_seconds: float | None
    lifetime_seconds: float = math.inf
    client: str = HUB_CLIENT
    """The client whose session started it (`SandboxPolicy.client`): a hub client's cap is over all its sessions."""
    buffer: OutputBuffer = field(default_factory=OutputBuffer)
    process: Process | None = None
    returncode: int | None = None
    timed_out: bool = False
    expired: bool = False
    killed: bool = False
    lingering: bool = False
    done: anyio.Event = field(default_factory=anyio.Event)
    undone: list[Undone] = field(default_factory=list[Undone])
    """What omega undid of this shell's changes to protected names, not reported yet."""

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def status(self) -> str:
        if self.running:
            return "running"
        if self.killed:
            return "killed by kill_shell"
        if self.expired:
            return (
                f"killed after {self.lifetime_seconds:g} s, its [sandbox] shell_lifetime; the process tree was killed"
            )
        if self.timed_out:
            return f"timed out after {self.timeout_seconds:g} s; the process tree was killed"
        if isinstance(self.process, ConfinedProcess) and self.process.launcher_died:
            return "killed: the sandbox launcher died (the next bash call starts a new one)"
        if self.returncode is None:
            return "exited (status unknown)"
        if self.returncode < 0:
            return describe_exit(self.returncode)
        return f"exited with code {self.returncode}"

    def failed(self) -> bool:
        return not self.running and not self.killed and (self.timed_out or self.expired or self.returncode != 0)


class ShellRegistry(AsyncContextManagerMixin):
    """The background shells of one server; enter it for the server's lifetime.

    Raises (from its methods):
        ToolError: unknown shell id, too many running shells, or the registry is not running.
    """

    def __init__(self, *, max_running: int = MAX_RUNNING_SHELLS) -> None:
        self.max_running = max_running
        self._shells: dict[str, _Shell] = {}
        self._task_group: TaskGroup | None = None

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            try:
                yield self
            finally:
                self._task_group = None
                with anyio.CancelScope(shield=True):
                    running = [shell for shell in self._shells.values() if shell.running and shell.process]
                    with anyio.move_on_after(_SHUTDOWN_SECONDS):
                        async with anyio.create_task_group() as killers:
                            for shell in running:
                                shell.killed = True
                                killers.start_soon(_kill_and_wait, shell)
                    task_group.cancel_scope.cancel()

    def _running(self) -> list[_Shell]:
        return [shell for shell in self._shells.values() if shell.running]

    def _owned(self, owner: object | None) -> list[_Shell]:
        return [shell for shell in self._shells.values() if shell.owner is owner]

    async def start(
        self,
        policy: SandboxPolicy,
        command: str,
        *,
        timeout_seconds: float | None = None,
        owner: object | None = None,
        tree: ProtectedTree | None = None,
    ) -> tuple[str, list[Undone]]:
        """Start `command` in the background for `owner`; return its shell id once the process runs, and
        what `tree` undid before it started (another shell's doing).

        Raises:
            SandboxUnavailableError: the policy needs an OS sandbox this machine cannot give.
            ToolError: too many running shells, bash cannot start, the owner has no session, or the
                registry is not running.
        """
        if owner is NO_SESSION:
            raise ToolError(
                "Background shells need a session: this request has none (a stateless 2026-07-28 request), "
                "so nothing could poll, stop or clean up the shell. Run the command without "
                "run_in_background, or connect with the initialize handshake."
            )
        if self._task_group is None:
            raise ToolError("Background shells are not available: the shell registry is not running.")
        mine = [shell.shell_id for shell in self._running() if shell.owner is owner]
        if len(mine) >= self.max_running:
            raise ToolError(
                f"Too many background shells are running in this session ({len(mine)} of {self.max_running}: "
                f"{', '.join(mine)}). Stop one with kill_shell first."
            )
        if policy.client != HUB_CLIENT:  # a [hub.clients] token: its sessions share one cap
            theirs = [shell for shell in self._running() if shell.client == policy.client]
            if len(theirs) >= MAX_SHELLS_PER_CLIENT:
                raise ToolError(
                    f"Too many background shells are running for client {policy.client} ({len(theirs)} of "
                    f"{MAX_SHELLS_PER_CLIENT} per client, over all its sessions). Stop one with kill_shell in the "
                    "session that started it, or end that session; the limit is fixed (a client that needs "
                    "more shells at once needs a [hub.clients] token of its own)."
                )
        shell = _Shell(
            _new_id(self._shells), owner, command, timeout_seconds, policy.shell_lifetime_seconds, policy.client
        )
        self._shells[shell.shell_id] = shell  # counted against the cap while it starts
        undone: list[Undone] = []
        run: Run | None = None
        try:
            if tree is not None:
                run, undone = await anyio.to_thread.run_sync(tree.begin)
            await self._task_group.start(self._supervise, shell, policy, tree, run)
        except BaseException:
            del self._shells[shell.shell_id]
            if tree is not None and run is not None and shell.process is None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(tree.end, run)
            raise
        self._forget_old(owner)
        return shell.shell_id, undone

    def _forget_old(self, owner: object | None) -> None:
        owned = self._owned(owner)
        finished = [shell.shell_id for shell in owned if not shell.running]
        for shell_id in finished[: max(0, len(owned) - _MAX_KEPT_SHELLS)]:
            del self._shells[shell_id]

    async def close_owner(self, owner: object | None) -> None:
        """Kill every running shell of `owner` (whole process trees, bounded) and forget its shells.

        For the end of an owner's session; shielded, so a cancelled session still cleans up. A shell
        still starting (or not dead within the bound) stays registered, so leaving the registry kills it.
        """
        owned = self._owned(owner)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_SHUTDOWN_SECONDS):
            async with anyio.create_task_group() as killers:
                for shell in owned:
                    if shell.running and shell.process is not None:
                        shell.killed = True
                        killers.start_soon(_kill_and_wait, shell)
        for shell in owned:
            if not shell.running:
                self._shells.pop(shell.shell_id, None)

    async def _supervise(
        self,
        shell: _Shell,
        policy: SandboxPolicy,
        tree: ProtectedTree | None,
        run: Run | None,
        *,
        task_status: TaskStatus[None],
    ) -> None:
        try:
            async with open_bash(policy, shell.command, run.binds if run is not None else ()) as process:
                shell.process = process
                task_status.started()
                await _follow(shell, process)
        finally:
            if tree is not None and run is not None and shell.process is not None:
                with anyio.CancelScope(shield=True):
                    shell.undone += await anyio.to_thread.run_sync(tree.end, run)
            shell.buffer.close()
            shell.done.set()

    def _get(self, shell_id: str, owner: object | None) -> _Shell:
        shell = self._shells.get(shell_id.strip())
        if shell is None or shell.owner is not owner:  # another owner's shell does not exist for this one
            owned = self._owned(owner)
            if not owned:
                raise ToolError(
                    f"Unknown shell id {shell_id!r}: there are no background shells. "
                    "Start one with bash and run_in_background: true."
                )
            known = ", ".join(f"{s.shell_id} ({s.status()})" for s in owned)
            raise ToolError(f"Unknown shell id {shell_id!r}. Known shells: {known}.")
        return shell

    async def output(
        self, shell_id: str, *, owner: object | None = None, tree: ProtectedTree | None = None
    ) -> types.CallToolResult:
        """Output of `owner`'s shell since the last call, then its status (`running` / `exited with code N`),
        and what `tree` undid of the changes running shells made to protected names.

        Raises:
            ToolError: unknown shell id (or another owner's).
        """
        shell = self._get(shell_id, owner)
        undone = await anyio.to_thread.run_sync(tree.check) if tree is not None and shell.running else []
        undone, shell.undone = [*shell.undone, *undone], []
        text = shell.buffer.take()
        result = text_result(_with_status(text, shell), is_error=shell.failed())
        return with_note(result, undone)

    async def kill(self, shell_id: str, *, owner: object | None = None) -> types.CallToolResult:
        """Kill `owner`'s shell's whole process group (TERM, bounded grace, KILL); report its last output.

        Raises:
            ToolError: unknown shell id (or another owner's).
        """
        shell = self._get(shell_id, owner)
        if not shell.running:
            text = shell.buffer.take()
            result = text_result(_with_status(text, shell, prefix=f"{shell.shell_id} had already finished: "))
        else:
            shell.killed = True
            await _kill_and_wait(shell)
            text = shell.buffer.take()
            if shell.running:
                prefix = f"{shell.shell_id} was signalled but has not exited yet: "
                return text_result(_with_status(text, shell, prefix=prefix), is_error=True)
            prefix = f"{shell.shell_id} and its process group were killed: "
            result = text_result(_with_status(text, shell, prefix=prefix))
        undone, shell.undone = shell.undone, []  # what its end undid, not reported by bash_output yet
        return with_note(result, undone)


def _new_id(taken: dict[str, _Shell]) -> str:
    while True:
        shell_id = f"shell_{secrets.token_hex(6)}"
        if shell_id not in taken:
            return shell_id


def _with_status(text: str, shell: _Shell, *, prefix: str = "") -> str:
    if not text:
        text = "(no new output)\n"
    elif not text.endswith("\n"):
        text += "\n"
    return f"{text}[{prefix}{shell.status()}]"


async def _kill_and_wait(shell: _Shell) -> None:
    if shell.process is not None:
        await terminate_group(shell.process.pid)
    with anyio.move_on_after(_KILL_WAIT_SECONDS):
        await shell.done.wait()


async def _follow(shell: _Shell, process: Process) -> None:
    """Read output until bash ends (or times out); then drain briefly and kill what it left behind."""
    eof = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_output, process, shell.buffer, eof)
        timeout = shell.timeout_seconds if shell.timeout_seconds is not None else math.inf
        with anyio.move_on_after(min(timeout, shell.lifetime_seconds)):
            await process.wait()
        if process.returncode is None and not shell.killed:
            if timeout <= shell.lifetime_seconds:
                shell.timed_out = True
            else:
                shell.expired = True
            await terminate_group(process.pid)
        with anyio.move_on_after(DRAIN_SECONDS):
            await eof.wait()
        if not eof.is_set() or tree_alive(process):
            shell.lingering = True
            await terminate_group(process.pid)
        with anyio.move_on_after(DRAIN_SECONDS):
            await process.wait()
        shell.returncode = process.returncode
        tg.cancel_scope.cancel()


async def bash_output(
    shells: ShellRegistry, args: BashOutputArgs, *, owner: object | None = None
) -> types.CallToolResult:
    """The `bash_output` tool: new output of one of `owner`'s background shells and its status."""
    return await shells.output(args.shell_id, owner=owner)


async def kill_shell(
    shells: ShellRegistry, args: KillShellArgs, *, owner: object | None = None
) -> types.CallToolResult:
    """The `kill_shell` tool: stop one of `owner`'s background shells and its whole process tree."""
    return await shells.kill(args.shell_id, owner=owner)
