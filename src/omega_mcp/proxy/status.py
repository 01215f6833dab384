"""What `omega-mcp tools` (and call errors) say of a downstream server: its state and why."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from omega_mcp.proxy.spec import DownstreamSpec

__all__ = ["ServerState", "ServerStatus", "down_message", "lost_state"]

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
