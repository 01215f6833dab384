"""A downstream server as the supervisor keeps it (`Entry`), and what `omega-mcp tools` (and call
errors) say of it: its state and why."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import anyio
from mcp import types

from omega_mcp.proxy.oauth import step_up_needed
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.spec import Catalog, DownstreamSpec

__all__ = ["Entry", "ServerState", "ServerStatus", "down_message", "lost_state", "status_of"]

ServerState = Literal["connecting", "connected", "failed", "restarting", "reconnecting", "disabled"]


def lost_state(spec: DownstreamSpec) -> ServerState:
    """What a server that was connected is doing now: a process is restarted, a URL reconnected."""
    return "reconnecting" if isinstance(spec.target, str) else "restarting"


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """One server as `omega-mcp tools` shows it."""

    server_name: str
    state: ServerState
    reason: str | None
    retry_in_seconds: float | None
    tools: tuple[str, ...]
    pid: int | None = None


def down_message(
    server_name: str, state: ServerState, reason: str | None, retry_in: float | None, *, final: bool
) -> str:
    """Why a server's tools cannot be called right now, and when omega tries again (`retry_in`
    seconds; None: reconnecting now). `final`: no retry will come (a one-shot command, a refused start)."""
    if state == "disabled":
        return f"server {server_name} is disabled (enabled = false in servers.toml)"
    if state == "connecting":
        return f"server {server_name} is still starting; try again in a moment"
    reason = reason or "not connected"
    if final:
        return f"server {server_name} is down: {reason}"
    if retry_in is None:
        return f"server {server_name} is down: {reason}; omega is reconnecting now"
    return f"server {server_name} is down: {reason}; omega will retry in {max(0, math.ceil(retry_in))} s"


@dataclass(slots=True)
class Entry:
    """One configured server as the supervisor keeps it: its spec, its state and its live session."""

    spec: DownstreamSpec
    state: ServerState = "connecting"
    reason: str | None = None
    retry_at: float | None = None
    session: DownstreamSession | None = None
    attempt: DownstreamSession | None = None
    catalog: Catalog = field(default_factory=Catalog)
    tools_by_name: Mapping[str, types.Tool] | None = None
    settled: bool = False
    warned: set[str] = field(default_factory=set[str])
    """Problems with this server's tool list already logged (once each, across restarts)."""
    refused: bool = False
    """Never started: a config problem (an unset variable), or it would be omega running itself."""
    scope: anyio.CancelScope | None = None
    """Its supervision, once it runs (cancelled when a reload removes the server)."""
    stopped: anyio.Event | None = None
    """Set when its supervision ended (None: it never ran)."""


def status_of(entry: Entry, now: float | None) -> ServerStatus:
    """How `omega-mcp tools` shows one server (`now`: the clock, None once the supervisors stopped)."""
    retry = max(0.0, entry.retry_at - now) if entry.retry_at is not None and now is not None else None
    stdio = entry.session.stdio if entry.session is not None else None
    pid = stdio.pid if stdio is not None else None
    reason = entry.reason
    if entry.state == "connected" and entry.spec.oauth is not None:
        reason = step_up_needed(entry.spec.oauth)  # connected, but some requests need a login
    tools = tuple(t.name for t in entry.catalog.tools)
    return ServerStatus(entry.spec.server_name, entry.state, reason, retry, tools, pid)
