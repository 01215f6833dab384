"""Where built-in calls run: a sandbox policy with its sessions' private /tmp and its protected names.

The Toolbox has one `Workplace` for its own policy and one per other policy a caller brings (a hub
client's profile with its own workspace or mode, `server/profiles.py`): each keeps every guarantee
of the hostile-workspace design for its roots — a private /tmp per client session (`Worlds`,
removed when the session ends) and the protected names of its write roots bound read-only for bash
and undone when created (`ProtectedTree`). A workplace is made on its first call and closed with
the Toolbox. Blocking work (the trees' first walk, removing directories) runs off the event loop.
"""

from __future__ import annotations

import threading

import anyio

from omega_mcp.sandbox.paths import remember_hidden
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.tracker import ProtectedTree
from omega_mcp.sandbox.world import Worlds, remove_tree

__all__ = ["Workplace", "Workplaces"]


def _protected_tree(policy: SandboxPolicy) -> ProtectedTree | None:
    """The protected names of bash's write roots (the workspace and `write_roots`), in sandbox and rx
    modes: the private /tmp and `$OMEGA_HOME/scratch` are bash's own, and rwx confines nothing."""
    if policy.mode == "rwx" or not policy.protected_names:
        return None
    roots = [policy.pinned_roots.get(r, r) for r in (policy.workspace, *policy.write_roots)]
    return ProtectedTree(roots, policy.protected_names, policy.quarantine_dir, skip=policy.hidden_paths)


class Workplace:
    """One policy's private worlds and protected-name tracker."""

    def __init__(self, policy: SandboxPolicy) -> None:
        self.policy = policy
        self.worlds = Worlds(policy)
        self.tree = _protected_tree(policy)
        remember_hidden(policy)  # `read` knows each secret by identity too, from the start

    def prime(self) -> None:
        """Walk the write roots once in the background, so the first bash call does not."""
        if self.tree is not None:
            threading.Thread(target=self.tree.prime, name="omega-protected-names", daemon=True).start()

    def close(self) -> None:
        """Remove every session's private /tmp and stop watching the roots (blocking)."""
        self.worlds.close_all()
        if self.tree is not None:
            self.tree.close()


class Workplaces:
    """The Toolbox's own workplace and those of the policies its callers bring, made on first use."""

    def __init__(self, policy: SandboxPolicy) -> None:
        self.own = Workplace(policy)
        self._others: dict[int, Workplace] = {}

    def of(self, policy: SandboxPolicy | None) -> Workplace:
        """The workplace of `policy` (None or the Toolbox's own: its own workplace)."""
        if policy is None or policy is self.own.policy:
            return self.own
        found = self._others.get(id(policy))
        if found is None or found.policy is not policy:
            found = self._others[id(policy)] = Workplace(policy)
            found.prime()
        return found

    def all(self) -> list[Workplace]:
        return [self.own, *self._others.values()]

    async def end_session(self, owner: object) -> None:
        """Remove `owner`'s private /tmp in every workplace (bounded cleanup, shielded)."""
        with anyio.CancelScope(shield=True):
            for workplace in self.all():
                directory = workplace.worlds.release(owner)
                if directory is not None:
                    await anyio.to_thread.run_sync(remove_tree, directory)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for workplace in self.all():
                await anyio.to_thread.run_sync(workplace.close)
