"""The aggregator: a supervisor holding one long-lived session per `[servers.NAME]` entry.

Every enabled server is connected in parallel by its own task, each attempt bounded by its
`connect_timeout`; one that fails to start, hangs or crashes is logged, marked down (its tools
leave the namespace, calls to them get an isError saying why and when omega retries) and retried
with exponential backoff (1 s doubling to 60 s, reset after 30 s up), while the others keep
working. Startup, decided: `initialize` is answered at once; a listing waits for the first round
(every server connected or failed) at most until `startup_wait_seconds` after the start (`serve`:
0, so `tools/list` answers at once whatever the servers do; by default the whole round, for the
agent and the one-shot commands); a call to a tool of a server still in its
first attempt waits for that server only (`starting`, `wait_settled`, bounded by its connect
timeout). Servers arriving later are announced with `notifications/tools/list_changed`, like every
change of the exported lists (version counters below; a downstream's list change is followed by a
re-list). Each downstream is spoken to in the era it speaks (session.py). Prompts and resources are
re-exported by the rules in catalog.py (`Downstreams.exports`), resource subscriptions kept by
subscriptions.py (`resources_updated` delivers the updates); the servers' own requests
(sampling, elicitation, roots) are routed by client_requests.py. While it runs, the SDK's HTTP and
SSE client transports log at debug level only (`quiet_transport_logs`): omega reports a failed
connection itself, once, in one line.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Self

import anyio
import anyio.abc
from anyio import AsyncContextManagerMixin
from mcp import types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from omega_mcp.calling import PROCESS, CallContext
from omega_mcp.config import ServersSection
from omega_mcp.errors import OAuthError, first_leaf
from omega_mcp.names import Route, server_prefixes
from omega_mcp.proxy.apps import client_uri
from omega_mcp.proxy.calls import forward_call
from omega_mcp.proxy.catalog import Exports
from omega_mcp.proxy.client_requests import ClientRequests
from omega_mcp.proxy.listing import relist
from omega_mcp.proxy.pins import Pins, held_message
from omega_mcp.proxy.pool import SessionServers
from omega_mcp.proxy.recursion import started_by_omega
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.spawn import EarlyStarts
from omega_mcp.proxy.spec import Catalog, DownstreamSpec, specs_from_config
from omega_mcp.proxy.status import Entry, ServerState, ServerStatus, down_message, lost_state, status_of
from omega_mcp.proxy.subscriptions import Subscriptions, UpdateSink
from omega_mcp.results import Wire, error_wire
from omega_mcp.sandbox.untrusted import LaunchGuard

__all__ = ["Catalog", "DownstreamSpec", "Downstreams", "ServerState", "ServerStatus"]

logger = logging.getLogger(__name__)

_NOTIFY_SECONDS = 2.0
_SETTLE_MARGIN_SECONDS = 5.0  # how long a wait for a first attempt may outlast its connect timeout


class _Demote(logging.Filter):
    """Turns the SDK client transports' own log records into debug records.

    They log every failed connection attempt as an error with its traceback; omega reports the
    reason itself, once, in one line ("server X is down: ..."), and retries.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


@contextmanager
def quiet_transport_logs() -> Generator[None]:
    """While entered, the SDK's HTTP and SSE client transports log at debug level only."""
    demote, names = _Demote(), ("mcp.client.sse", "mcp.client.streamable_http")
    for name in names:
        logging.getLogger(name).addFilter(demote)
    try:
        yield
    finally:
        for name in names:
            logging.getLogger(name).removeFilter(demote)


class Downstreams(AsyncContextManagerMixin):
    """The downstream servers of one omega process (implements `toolbox.DownstreamTools`).

    Use as an async context manager: entering starts every supervisor and returns at once;
    exiting stops them, and every downstream process with them.
    """

    def __init__(
        self,
        specs: Sequence[DownstreamSpec],
        *,
        startup_wait_seconds: float | None = None,
        backoff_seconds: float = 1.0,
        backoff_max_seconds: float = 60.0,
        stable_seconds: float = 30.0,
        early: EarlyStarts | None = None,
        one_shot: bool = False,
        client_requests: ClientRequests | None = None,
        pins: Pins | None = None,
    ) -> None:
        """`early` holds servers the CLI started before the SDK loaded; first connections adopt them.

        `one_shot` is for a command that looks once and exits: a server that is down says so, without
        announcing (in logs and call errors) a retry that will not happen before the command ends.
        `client_requests` routes the servers' sampling, elicitation and roots requests (by default
        to the MCP clients of omega, with no provider and no roots of omega's own).
        """
        self._early = early
        self.pins = pins
        """The pinned tool definitions (pins.py); None: nothing is pinned (tests, embedders)."""
        self._offered: dict[str, Catalog] = {}
        """Each server's catalog as it offers it, before its changed tools are held."""
        self.client_requests = client_requests if client_requests is not None else ClientRequests()
        self.client_requests.roots_listener = self.send_roots_list_changed
        self._one_shot = one_shot
        self._entries = {spec.server_name: self._entry(spec) for spec in specs}
        self._startup_wait = startup_wait_seconds
        self._started_at = 0.0
        self._backoff = (backoff_seconds, backoff_max_seconds, stable_seconds)
        self._versions = [0, 0, 0]
        self._changed = anyio.Event()
        self._settled = anyio.Event()
        self._tools_cache: tuple[tuple[str, types.Tool], ...] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._logged: set[tuple[str, str]] = set()
        self.exports = Exports(self._connected, self.client_requests.calling)
        """The connected servers' prompts and resources, re-exported (prompts/list, resources/read, ...)."""
        self.subscriptions = Subscriptions(self.exports.owner_of)
        """Who subscribed to which resource (resources/subscribe, subscriptions/listen filters)."""
        self.resources_updated: UpdateSink | None = None
        """Delivers a server's `resources/updated` to its subscribers (set by the MCP server)."""
        self.pool = SessionServers(self.client_requests)
        """Each client session's own connections to the `share = "session"` servers (pool.py)."""
        self.pool.task_only = self._task_only
        self._update_settled()

    @staticmethod
    def _entry(spec: DownstreamSpec) -> Entry:
        entry = Entry(spec, state="connecting" if spec.enabled else "disabled")
        refusal = spec.refusal(started_by_omega()) if spec.enabled else None
        if refusal is not None:
            entry.state, entry.reason, entry.settled, entry.refused = "failed", refusal, True, True
            logger.warning("server %s is not started: %s", spec.server_name, refusal)
        return entry

    @classmethod
    def from_config(cls, section: ServersSection, *, guard: LaunchGuard | None = None, **options: Any) -> Downstreams:
        """One spec per `[servers.NAME]` entry of the file's servers section (`Config.for_servers`), in
        config order (`spec.specs_from_config`), with their tools pinned under `$OMEGA_HOME/state/pins`
        (but those of `pin = false` servers)."""
        if "pins" not in options:
            unpinned = [name for name, server in section.servers.items() if not server.pin]
            options["pins"] = Pins(section.place.home / "state" / "pins", unpinned)
        return cls(specs_from_config(section, guard), **options)

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        with quiet_transport_logs():
            async with self.pool, self._supervisors():
                yield self

    @asynccontextmanager
    async def _supervisors(self) -> AsyncGenerator[None]:
        async with anyio.create_task_group() as task_group:
            for entry in self._entries.values():
                if entry.spec.enabled and not entry.refused:
                    task_group.start_soon(self._supervise, entry, name=f"omega downstream {entry.spec.server_name}")
            self._task_group, self._started_at = task_group, anyio.current_time()
            try:
                yield
            finally:
                self._task_group = None
                # Each session closes under its own shielded, bounded cleanup while this unwinds.
                task_group.cancel_scope.cancel()

    # -- supervision -------------------------------------------------------------------------

    async def _supervise(self, entry: Entry) -> None:
        if self._entries.get(entry.spec.server_name) is not entry:
            return  # removed by a reload before it started
        entry.scope, stopped = anyio.CancelScope(), anyio.Event()
        entry.stopped = stopped
        with entry.scope:
            try:
                await self._keep_up(entry)
            finally:
                stopped.set()

    async def _keep_up(self, entry: Entry) -> None:
        base, ceiling, stable = self._backoff
        failures = 0
        while True:
            connected_at, reason = await self._run_session(entry)
            now = anyio.current_time()
            if connected_at is not None and now - connected_at >= stable:
                failures = 0
            delay = min(base * 2**failures, ceiling)
            failures += 1
            entry.state = "failed" if entry.state in ("connecting", "failed") else lost_state(entry.spec)
            entry.reason, entry.retry_at = reason, now + delay
            self._log_down(entry, reason, delay)
            self._mark_settled(entry)
            await anyio.sleep(delay)
            entry.retry_at = None

    async def _run_session(self, entry: Entry) -> tuple[float | None, str]:
        """Connect, publish, follow notifications until the connection ends; returns why it ended."""
        spec = entry.spec
        requests = self.client_requests.for_server(spec.server_name, spec.timeout_seconds)
        session = entry.attempt = DownstreamSession(spec, warned=entry.warned, early=self._early, requests=requests)
        connected_at: float | None = None
        with anyio.CancelScope(deadline=anyio.current_time() + spec.connect_timeout_seconds) as connect_scope:
            try:
                async with session:
                    session.on_updated = self._updated
                    catalog = await session.catalog()
                    connect_scope.deadline = math.inf
                    connected_at = anyio.current_time()
                    self._publish(entry, session, catalog)
                    await self.subscriptions.reconnected(spec.server_name, session)
                    try:
                        await self._follow(entry, session)
                    finally:
                        self._unpublish(entry, session)
            except Exception as exc:  # any failure of one server is that server's state, not ours
                leaf = first_leaf(exc)  # an OAuth failure says it all (`needs login: run omega-mcp login NAME`)
                return connected_at, str(leaf) if isinstance(leaf, OAuthError) else session.failure(leaf)
        if connect_scope.cancelled_caught:
            return None, session.with_exit(f"no answer within connect_timeout ({spec.connect_timeout_seconds:g} s)")
        return connected_at, session.with_exit(session.close_reason or "the connection ended")

    async def _follow(self, entry: Entry, session: DownstreamSession) -> None:
        while True:
            kinds = await session.next_signals()
            if session.closed.is_set():
                return
            try:
                with anyio.fail_after(entry.spec.timeout_seconds):
                    catalog = await relist(session, entry.catalog, kinds)
            except (MCPError, TimeoutError, ValidationError) as exc:
                logger.warning("[%s] re-listing after list_changed failed: %s", entry.spec.server_name, exc)
                continue
            self._publish(entry, session, catalog, announce=kinds)  # passed on even when the list looks the same

    def _log_down(self, entry: Entry, reason: str, delay: float) -> None:
        name = entry.spec.server_name
        key = (name, reason)
        level = logging.DEBUG if key in self._logged else logging.WARNING
        self._logged.add(key)
        retry = "" if self._one_shot else f"; retrying in {delay:g} s"
        logger.log(level, "server %s is down: %s%s", name, reason, retry)

    # -- publication -------------------------------------------------------------------------

    def _publish(
        self, entry: Entry, session: DownstreamSession, catalog: Catalog, announce: set[str] | None = None
    ) -> None:
        if entry.session is not session:
            info = session.server_info
            logger.info(
                "server %s connected (%s): %d tools",
                entry.spec.server_name,
                f"{info.name} {info.version}" if info else "unnamed",
                len(catalog.tools),
            )
        entry.session, entry.state, entry.reason, entry.retry_at = session, "connected", None, None
        self._replace_catalog(entry, catalog, announce or set())
        self._mark_settled(entry)

    def _unpublish(self, entry: Entry, session: DownstreamSession) -> None:
        entry.session = None
        entry.state, entry.reason = lost_state(entry.spec), session.close_reason or "the connection ended"
        self._replace_catalog(entry, Catalog())

    def _replace_catalog(self, entry: Entry, catalog: Catalog, announce: set[str] | None = None) -> None:
        if self.pins is not None:
            self._offered[entry.spec.server_name] = catalog
            catalog = dataclasses.replace(catalog, tools=self.pins.apply(entry.spec.server_name, catalog.tools))
        old, entry.catalog = entry.catalog, catalog
        entry.tools_by_name = {t.name: t for t in catalog.tools}
        said = announce or set()
        changed = (
            old.tools != catalog.tools or "tools" in said,
            old.prompts != catalog.prompts or "prompts" in said,
            (old.resources, old.resource_templates) != (catalog.resources, catalog.resource_templates)
            or "resources" in said,
        )
        if not any(changed):
            return
        for i, flag in enumerate(changed):
            self._versions[i] += flag
        if changed[0]:
            self._tools_cache = None
        self._poke()

    def _mark_settled(self, entry: Entry) -> None:
        if not entry.settled:
            entry.settled = True
            self._poke()  # a call waiting for this server (`wait_settled`) goes on
        self._update_settled()

    def _update_settled(self) -> None:
        if not self._settled.is_set() and all(e.settled or not e.spec.enabled for e in self._entries.values()):
            self._settled.set()
            self._poke()

    def _poke(self) -> None:
        event, self._changed = self._changed, anyio.Event()
        event.set()

    # -- the change feed and readiness -------------------------------------------------------

    @property
    def version(self) -> int:
        """Changes whenever the set of exported tools changes."""
        return self._versions[0]

    def versions(self) -> tuple[int, int, int]:
        """Change counters of (tools, prompts, resources)."""
        return self._versions[0], self._versions[1], self._versions[2]

    async def wait_changed(self) -> None:
        """Return after the next change of any exported list."""
        await self._changed.wait()

    @property
    def ready(self) -> bool:
        """Whether every enabled server has connected or failed at least once."""
        return self._settled.is_set()

    async def wait_ready(self) -> None:
        """Wait until every server connected or failed once: for the whole round, or (when set) at most
        until `startup_wait_seconds` after the start, so that later listings do not wait at all."""
        timeouts = [e.spec.connect_timeout_seconds for e in self._entries.values()]
        bound = max(timeouts, default=0) + _SETTLE_MARGIN_SECONDS  # each attempt ends within its connect timeout
        deadline = anyio.current_time() + bound if self._startup_wait is None else self._started_at + self._startup_wait
        with anyio.CancelScope(deadline=deadline):
            while self._task_group is not None and not self._settled.is_set():
                await self._changed.wait()

    def starting(self, name: str) -> list[str]:
        """The servers in their first connection attempt whose tool (or prompt) `name` may be (by prefix)."""
        prefixed = [n for n, e in self._entries.items() if name.startswith(server_prefixes(n)) and e.spec.enabled]
        return [n for n in prefixed if not self._entries[n].settled]

    def unsettled(self) -> list[str]:
        """The enabled servers still in their first connection attempt, config order."""
        return [n for n, e in self._entries.items() if e.spec.enabled and not e.settled]

    async def wait_settled(self, server_names: Sequence[str]) -> None:
        """Wait until each of these servers connected or failed once (bounded: its connect timeout)."""
        entries = [self._entries[name] for name in server_names]
        bound = max((e.spec.connect_timeout_seconds for e in entries), default=0) + _SETTLE_MARGIN_SECONDS
        with anyio.move_on_after(bound):
            while self._task_group is not None and not all(e.settled for e in entries):
                await self._changed.wait()

    # -- reload (the rules are in reload.py) ---------------------------------------------------

    def specs(self) -> dict[str, DownstreamSpec]:
        """Every configured server's spec, config order."""
        return {name: entry.spec for name, entry in self._entries.items()}

    def add(self, spec: DownstreamSpec) -> None:
        """Start supervising a server (added by a reload); its tools are announced once it connects."""
        entry = self._entries[spec.server_name] = self._entry(spec)
        if self._task_group is not None and spec.enabled and not entry.refused:
            self._task_group.start_soon(self._supervise, entry, name=f"omega downstream {spec.server_name}")

    def respec(self, spec: DownstreamSpec) -> None:
        """Take a spec that differs from the running one only where no restart is needed (reload.py)."""
        self._entries[spec.server_name].spec = spec

    async def remove(self, server_name: str) -> None:
        """Stop a server (bounded) and take its tools out of the namespace (removed by a reload)."""
        entry = self._entries.pop(server_name)
        if entry.scope is not None and entry.stopped is not None:
            entry.scope.cancel()
            with anyio.move_on_after(_NOTIFY_SECONDS + 10):
                await entry.stopped.wait()
        self._replace_catalog(entry, Catalog())
        self._tools_cache = None
        self._versions[0] += 1
        self._poke()

    def order(self, server_names: Sequence[str]) -> None:
        """Put the servers in this (config) order."""
        entries = {name: self._entries[name] for name in server_names if name in self._entries}
        if list(entries) != list(self._entries):
            self._entries, self._tools_cache = entries, None
            self._versions[0] += 1
            self._poke()

    # -- tools -------------------------------------------------------------------------------

    def _check_pins(self) -> None:
        """Serve again what `omega-mcp tools --accept` accepted meanwhile (its pins file changed)."""
        if self.pins is not None and self.pins.refresh():
            for name, entry in self._entries.items():
                offered = self._offered.get(name)
                if offered is not None:
                    self._replace_catalog(entry, offered)

    def held(self, server_name: str, tool_name: str) -> bool:
        """Whether a tool is held: its definition changed since first seen and nobody accepted it."""
        self._check_pins()
        return self.pins is not None and self.pins.held(server_name, tool_name)

    def tools(self) -> Sequence[tuple[str, types.Tool]]:
        """Every exported tool as `(server_name, tool)`: config order, then each server's order."""
        self._check_pins()
        if self._tools_cache is None:
            self._tools_cache = tuple(
                (name, tool) for name, entry in self._entries.items() for tool in entry.catalog.tools
            )
        return self._tools_cache

    def get_tool(self, server_name: str, tool_name: str) -> types.Tool | None:
        """One exported tool by its route, or None."""
        entry = self._entries.get(server_name)
        return entry.tools_by_name.get(tool_name) if entry is not None and entry.tools_by_name else None

    def _task_only(self, server_name: str) -> frozenset[str]:
        entry = self._entries.get(server_name)
        return entry.session.task_only if entry is not None and entry.session is not None else frozenset()

    def connected(self, server_name: str) -> tuple[DownstreamSession, float] | None:
        """The live session of a server and its request timeout, or None while it is down."""
        entry = self._entries.get(server_name)
        if entry is None or entry.session is None:
            return None
        return entry.session, entry.spec.timeout_seconds

    def down_message(self, server_name: str) -> str:
        """Why a server's tools cannot be called right now, and when omega tries again."""
        entry = self._entries[server_name]
        retry_in = entry.retry_at - anyio.current_time() if entry.retry_at is not None else None
        final = self._one_shot or entry.refused
        return down_message(server_name, entry.state, entry.reason, retry_in, final=final)

    def unavailable(self, name: str, permits: Callable[[Route], bool] | None = None) -> str | None:
        """For a tool name that belongs to a server that is not connected, the reason; else None (also when
        `permits`, a hub client's, does not permit the name's route: to that client no such server is down)."""
        for server_name, entry in self._entries.items():
            if entry.session is not None:
                continue
            prefix = next((p for p in server_prefixes(server_name) if name.startswith(p)), None)
            if prefix is None:
                continue
            if permits is not None and not permits(Route(server_name, name[len(prefix) :])):
                return None
            return self.down_message(server_name)
        return None

    async def call_tool(
        self,
        server_name: str,
        tool_name: str,
        arguments: dict[str, Any],
        context: CallContext = PROCESS,
    ) -> Wire:
        """Forward one call and return the downstream's result as wire JSON, untouched.

        Failures (down server, timeout, lost connection) are isError results; a JSON-RPC error the
        server answered with raises `DownstreamRefusedError`. `context` (`calling.py`): what is passed
        on, whose client the server's requests go to, and (`share = "session"`) whose connection it is.
        """
        entry = self._entries.get(server_name)
        if entry is None:
            return error_wire(f"no downstream server named {server_name!r}")
        if entry.session is None:
            return error_wire(self.down_message(server_name))
        if self.held(server_name, tool_name):
            return error_wire(f"{held_message(server_name, tool_name)}: its definition changed since first seen")
        if entry.spec.share == "session" and context.session_key is not None:
            return await self.pool.call_tool(entry.spec, tool_name, arguments, context)
        # Its requests to the client go to this call's client.
        with self.client_requests.calling(server_name, context.caller):
            return await forward_call(entry.session, tool_name, arguments, context)

    async def send_roots_list_changed(self) -> None:
        """Send `notifications/roots/list_changed` to every connected server (bounded, best effort)."""
        for name, entry in list(self._entries.items()):
            if entry.session is None:
                continue
            with anyio.move_on_after(_NOTIFY_SECONDS):
                try:
                    await entry.session.notify_roots_changed()
                except Exception as exc:  # boundary: one server going away must not stop the others
                    logger.debug("[%s] roots/list_changed not delivered: %s", name, exc)

    # -- resource subscriptions (rules in subscriptions.py) ----------------------------------

    async def _updated(self, server_name: str, uri: str) -> None:
        sink = self.resources_updated
        uri = client_uri(server_name, uri)  # a `ui://` URI in its namespace form (apps.py)
        subscribers = self.subscriptions.subscribers(server_name, uri)
        if sink is not None and subscribers:
            await sink(uri, subscribers)

    # -- prompts and resources (rules in catalog.py) ------------------------------------------

    def _connected(self) -> list[tuple[str, Catalog, DownstreamSession]]:
        return [(n, e.catalog, e.session) for n, e in self._entries.items() if e.session is not None]

    # -- status ------------------------------------------------------------------------------

    def statuses(self) -> list[ServerStatus]:
        """Every configured server, config order, with its state and exported tool names."""
        now = anyio.current_time() if self._task_group is not None else None
        return [status_of(entry, now) for entry in self._entries.values()]
