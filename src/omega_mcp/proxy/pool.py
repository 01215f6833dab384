"""Servers with `share = "session"`: one connection (one process of a stdio server) per client session.

A server that keeps state for its client (a browser, a memory graph, a checkout) would leak it from
one client to the next if every client shared its one process. For such a server the supervisor's
own connection only lists what it offers (tools, prompts, resources, list changes); each client
session that calls one of its tools gets a connection of its own, started at its first call from
the same spec (same command, confinement and era), and stopped when that session ends (`end`) or
after `IDLE_SECONDS` without a call. The session is the call context's `session_key`, which the
MCP server sets: an HTTP session's connection, or for 2026-era requests (which have no session) the
client token's name; with none (stdio, the agent, `omega-mcp call`) the call goes to the shared
connection, since there is only one client. A connection that dies is forgotten (its call fails as
a call to a shared server would) and the session's next call starts a new one. Prompts, resources
and subscriptions of such a server are still served by its listing connection. Tasks a session
creates run on its own connection (`connection`; their requests keep it in use, `in_use`); a
connection omega stops is lost with the reason why (idle, session ended, reload) before it closes,
and `on_stopped` is told once it has, so its tasks end with that reason (server/tasks.py).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import secrets
import shutil
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Hashable
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import anyio
import anyio.abc
from anyio import AsyncContextManagerMixin

from omega_mcp.calling import CallContext, SessionDirs
from omega_mcp.errors import DownstreamError, first_leaf
from omega_mcp.proxy.calls import forward_call
from omega_mcp.proxy.client_requests import ClientRequests
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.spec import DownstreamSpec
from omega_mcp.results import Wire, error_wire

__all__ = ["IDLE_SECONDS", "SessionServers"]

logger = logging.getLogger(__name__)

IDLE_SECONDS = 600.0
"""How long a session's own connection may go without a call before it is stopped."""
_STOP_SECONDS = 10.0
_TELL_SECONDS = 5.0


@dataclass(eq=False)
class _Instance:
    """One session's connection to one server."""

    spec: DownstreamSpec
    key: Hashable
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ready: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    session: DownstreamSession | None = None
    failure: str | None = None
    busy: int = 0
    last_used: float = 0.0


class SessionServers(AsyncContextManagerMixin):
    """The per-session connections of every `share = "session"` server of one omega."""

    def __init__(
        self, requests: ClientRequests, *, idle_seconds: float = IDLE_SECONDS, default_root: Path | None = None
    ) -> None:
        self._requests = requests
        self.idle_seconds = idle_seconds
        self.default_root = default_root
        """Where session directories go for a call whose context names no `session_dirs` (None: they get none)."""
        self._instances: dict[tuple[str, Hashable], _Instance] = {}
        self._dirs: dict[tuple[str, Hashable], Path] = {}
        """Each (server, session)'s own directory: kept across idle restarts, removed when the session ends."""
        self._task_group: anyio.abc.TaskGroup | None = None
        self.task_only: Callable[[str], frozenset[str]] = lambda server_name: frozenset()
        """A server's tools that run only as tasks, from its shared listing (set by `Downstreams`): a
        session's connection never lists, and its plain calls of them are run as tasks too (tasks.py)."""
        self.on_stopped: Callable[[str, DownstreamSession], Awaitable[None]] | None = None
        """Told (server name, connection) when a session's connection has closed, for whatever reason (its
        `close_reason` says which); bounded. Set by the MCP server's task handlers."""

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_group.start_soon(self._reap_idle, name="omega session servers: idle")
            try:
                yield self
            finally:
                self._task_group = None
                task_group.cancel_scope.cancel()  # every connection closes under its own bounded cleanup

    # -- what the hub asks -------------------------------------------------------------------

    def running(self, server_name: str | None = None) -> list[tuple[Hashable, DownstreamSession]]:
        """The live connections (of one server), as (session, connection)."""
        return [
            (inst.key, inst.session)
            for (name, _), inst in self._instances.items()
            if inst.session is not None and (server_name is None or name == server_name)
        ]

    async def call_tool(
        self,
        spec: DownstreamSpec,
        tool_name: str,
        arguments: dict[str, Any],
        context: CallContext,
    ) -> Wire:
        """Forward one call on the own connection of `context.session_key` to the server (started now if
        it has none; its directory below `context.session_dirs`)."""
        key = context.session_key
        assert key is not None  # the supervisor sends only a session's calls here
        try:
            async with self.connection(spec, key, context.session_dirs) as session:
                with self._requests.calling(spec.server_name, context.caller):
                    return await forward_call(session, tool_name, arguments, context)
        except DownstreamError as exc:
            return error_wire(str(exc))

    @asynccontextmanager
    async def connection(
        self, spec: DownstreamSpec, key: Hashable, dirs: SessionDirs | None
    ) -> AsyncGenerator[DownstreamSession]:
        """The own connection of session `key` to the server (started now if it has none; its directory
        below `dirs`), kept from the idle reaper while the caller uses it.

        Raises:
            DownstreamError: it could not be started (why).
        """
        instance = await self._instance(spec, key, dirs)  # busy from here: the reaper leaves it
        try:
            await instance.ready.wait()  # bounded: `_run` gives up connecting after the connect timeout
            if instance.session is None:
                why = instance.failure or "it stopped"
                raise DownstreamError(f"server {spec.server_name} could not be started for this session: {why}")
            instance.session.task_only = self.task_only(spec.server_name)
            yield instance.session
        finally:
            instance.busy -= 1
            instance.last_used = anyio.current_time()

    @contextmanager
    def in_use(self, connection: object) -> Generator[None]:
        """While a request to `connection` runs (a task's), the idle reaper leaves it; its idle time starts
        again after. Nothing for a connection that is no session's (a shared one) or is gone."""
        instance = next((i for i in self._instances.values() if i.session is connection), None)
        if instance is not None:
            instance.busy += 1
        try:
            yield
        finally:
            if instance is not None:
                instance.busy -= 1
                instance.last_used = anyio.current_time()

    async def end(self, key: Hashable) -> None:
        """The session `key` ended: stop its connections (bounded) and remove their directories."""
        await self._stop([inst for inst in self._instances.values() if inst.key == key], "its client session ended")
        for slot in [slot for slot in self._dirs if slot[1] == key]:
            directory = self._dirs.pop(slot)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, directory, ignore_errors=True))

    def _session_spec(self, spec: DownstreamSpec, key: Hashable, dirs: SessionDirs | None) -> DownstreamSpec:
        """`spec` with its own directory for `key` (made now, 0700) below the client's `dirs` (else below
        `default_root`; none when that is None too)."""
        client, root = (dirs.client, dirs.root) if dirs is not None else (None, self.default_root)
        if root is None:
            return spec
        slot = (spec.server_name, key)
        directory = self._dirs.get(slot)
        if directory is None:
            directory = root / f"{spec.server_name}-{os.getpid()}-{secrets.token_hex(6)}"
            try:
                directory.mkdir(mode=0o700, parents=True)
            except OSError as exc:
                logger.warning("server %s: no session directory at %s: %s", spec.server_name, directory, exc)
                return spec
            self._dirs[slot] = directory
        return spec.for_session(directory, client)

    async def stop_server(self, server_name: str) -> None:
        """Stop every session's connection to a server (removed or changed by a reload)."""
        stopping = [inst for (name, _), inst in self._instances.items() if name == server_name]
        await self._stop(stopping, "its configuration changed or it was removed (reload)")

    # -- the connections ---------------------------------------------------------------------

    async def _instance(self, spec: DownstreamSpec, key: Hashable, dirs: SessionDirs | None) -> _Instance:
        """`key`'s connection to the server, started if it has none, counted busy (the caller's `finally` uncounts)."""
        slot = (spec.server_name, key)
        instance = self._instances.get(slot)
        # Replaced: one whose spec changed (a reload), or one on its way out (stopped as idle, or its
        # server gone: ready, but no longer connected), which would answer "it stopped".
        stale = instance is not None and (
            instance.spec is not spec or (instance.ready.is_set() and not instance.session)
        )
        if instance is None or stale:
            if instance is not None:
                await self._stop([instance], "its configuration changed (reload)")
            if self._task_group is None:
                raise RuntimeError("SessionServers used outside its context")
            instance = self._instances[slot] = _Instance(spec, key, last_used=anyio.current_time())
            own = self._session_spec(spec, key, dirs)
            self._task_group.start_soon(self._run, instance, own, name=f"omega session server {spec.server_name}")
        instance.busy += 1
        return instance

    async def _run(self, instance: _Instance, spec: DownstreamSpec) -> None:
        requests = self._requests.for_server(spec.server_name, spec.timeout_seconds)
        session = DownstreamSession(spec, requests=requests)
        try:
            with instance.scope:
                deadline = anyio.current_time() + spec.connect_timeout_seconds
                with anyio.CancelScope(deadline=deadline) as connecting:
                    async with session:
                        connecting.deadline = math.inf
                        instance.session = session
                        instance.ready.set()
                        logger.info("server %s started for a session (%d running)", spec.server_name, self._count())
                        try:
                            await session.closed.wait()
                        finally:
                            instance.session = None
                    logger.info("server %s of a session stopped: %s", spec.server_name, session.close_reason)
                if connecting.cancelled_caught:
                    instance.failure = f"no answer within connect_timeout ({spec.connect_timeout_seconds:g} s)"
        except Exception as exc:  # one session's server failing is that call's error, not the hub's
            instance.failure = session.failure(first_leaf(exc))
            logger.warning("server %s could not start for a session: %s", spec.server_name, instance.failure)
        finally:
            instance.ready.set()
            slot = (instance.spec.server_name, instance.key)
            if self._instances.get(slot) is instance:
                del self._instances[slot]
            if session.closed.is_set():  # it was open (a failed start never is): its tasks end now
                await self._tell_stopped(spec.server_name, session)
            instance.done.set()

    async def _tell_stopped(self, server_name: str, session: DownstreamSession) -> None:
        told = self.on_stopped
        if told is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(_TELL_SECONDS):
            try:
                await told(server_name, session)
            except Exception as exc:  # boundary: telling is best effort; the connection is gone either way
                logger.debug("server %s: a stopped session connection's listener failed: %s", server_name, exc)

    def _count(self) -> int:
        return sum(1 for inst in self._instances.values() if inst.session is not None)

    async def _stop(self, instances: list[_Instance], why: str) -> None:
        for instance in instances:
            if instance.session is not None:
                instance.session.lose(f"omega stopped it: {why}")  # what its tasks end with (server/tasks.py)
            instance.scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_SECONDS):
            for instance in instances:
                await instance.done.wait()

    async def _reap_idle(self) -> None:
        while True:
            await anyio.sleep(min(60.0, self.idle_seconds / 4))
            now = anyio.current_time()
            idle = [
                inst
                for inst in self._instances.values()
                if inst.busy == 0 and inst.ready.is_set() and now - inst.last_used >= self.idle_seconds
            ]
            for inst in idle:
                logger.info(
                    "server %s of a session idle for %g s: stopping it", inst.spec.server_name, self.idle_seconds
                )
            await self._stop(idle, f"no call for {self.idle_seconds:g} s")
