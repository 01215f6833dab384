"""Taking a new `[servers]` while serving (SIGHUP): start what was added, stop what was removed.

A server whose entry is unchanged keeps its connection (and its clients' calls, sessions and
session servers) as it is; one that was added is started; one that was removed is stopped and its
tools leave the namespace; one whose entry changed in any way (command, arguments, environment,
URL, confinement, era, share, ...) is stopped and started again from the new entry. The launch
guard is no part of an entry: adding or removing a hub client (or an attached window) widens or
narrows it for every server, and restarted them all; a server whose entry is the same takes the new
guard in place (its next start asks it), unless the new guard refuses it (its `problem` differs,
so the entry changed). The servers then take the new file's order. Every change of the tool set
moves the supervisor's version, so the MCP server sends `notifications/tools/list_changed` as for
any other change.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from omega_mcp.proxy.spec import DownstreamSpec
from omega_mcp.proxy.supervisor import Downstreams

__all__ = ["Reloaded", "reconfigure"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload did to the servers, by name."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def __str__(self) -> str:
        parts = [f"{what} {', '.join(names)}" for what, names in self._parts() if names]
        return "; ".join(parts) or "no server changed"

    def _parts(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return (("added", self.added), ("removed", self.removed), ("restarted", self.changed))


def _entry(spec: DownstreamSpec) -> DownstreamSpec:
    """The spec as its servers.toml entry makes it: without the launch guard, which the clients shape."""
    return replace(spec, guard=None)


async def reconfigure(downstreams: Downstreams, specs: Sequence[DownstreamSpec]) -> Reloaded:
    """Make the running servers those of `specs` (the new config's, in its order)."""
    old = downstreams.specs()
    new = {spec.server_name: spec for spec in specs}
    removed = tuple(name for name in old if name not in new)
    added = tuple(name for name in new if name not in old)
    changed = tuple(name for name in new if name in old and _entry(new[name]) != _entry(old[name]))
    for name, spec in new.items():
        if name in old and name not in changed and spec != old[name]:
            downstreams.respec(spec)  # only the guard moved: the running process stays
    for name in (*removed, *changed):
        await downstreams.pool.stop_server(name)
        await downstreams.remove(name)
    for name in (*changed, *added):
        downstreams.add(new[name])
    downstreams.order(list(new))
    return Reloaded(added, removed, changed)
