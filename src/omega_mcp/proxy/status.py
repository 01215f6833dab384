"""What `omega-mcp tools` (and call errors) say of a downstream server: its state and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from omega_mcp.proxy.spec import DownstreamSpec

__all__ = ["ServerState", "ServerStatus", "lost_state"]

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
