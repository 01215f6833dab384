"""Each client session's private /tmp: a directory in `$OMEGA_HOME/clients/<client>/tmp`, gone with the session.

bash sees its session's directory at `tmp_dir` (`/tmp`), bound there in its mount namespace, and the
file tools map `tmp_dir/...` into it (`SandboxPolicy.private_tmp`, `paths.py`), so what bash writes
to /tmp, `read` finds at the same path, and no session (nor the host) sees another's. `Worlds` keeps
one per owner (the MCP connection; None, the process itself, for the agent and `omega-mcp call`):
`policy_for(owner)` returns the policy the owner's calls run under (the directory is made on first
use: `ensure_private_tmp`); `close(owner)` removes it and ends its bash zygote session. Directories
left by an omega that died are removed when the next one starts (their name starts with the pid that
made them). In rwx mode, or without user namespaces, nothing is private: the host's /tmp is used as
it is. Blocking: call from a worker thread.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omega_mcp.sandbox import fileworker_client, probe, zygote_client
from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = ["Worlds", "ensure_private_tmp", "host_path", "remove_tree"]


def ensure_private_tmp(policy: SandboxPolicy) -> None:
    """Make the policy's private /tmp (and its client's `tmp/`), 0700, when it does not exist yet.

    Raises:
        OSError: it cannot be made.
    """
    if policy.private_tmp is not None and not policy.private_tmp.is_dir():
        policy.private_tmp_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        policy.private_tmp.mkdir(mode=0o700, exist_ok=True)


def host_path(policy: SandboxPolicy, path: Path) -> Path:
    """Where a tool's (lexical) `path` really is: below `tmp_dir` (and no more specific write root) it is
    in the caller's private /tmp (`SandboxPolicy.private_tmp`), as bash sees it; elsewhere `path` itself."""
    private = policy.private_tmp
    tmp = Path(os.path.normpath(policy.tmp_dir))
    if private is None or policy.mode == "rwx" or not path.is_relative_to(tmp):
        return path
    for root in policy.file_write_roots:
        normal = Path(os.path.normpath(root))
        if normal != tmp and path.is_relative_to(normal) and normal.is_relative_to(tmp):
            return path  # a write root that lives under /tmp (it is bound there for bash too)
    return private / path.relative_to(tmp)


def remove_tree(path: Path) -> None:
    """`rm -rf`, also through directories a command made unreadable or unwritable; errors are ignored."""

    def retry(function: Callable[..., Any], name: str, *_: object) -> None:
        try:
            parent = os.path.dirname(name)
            os.chmod(parent, stat.S_IRWXU)
            if function is not os.rmdir and os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, stat.S_IRWXU)
                shutil.rmtree(name, ignore_errors=True)
            else:
                function(name)
        except OSError:
            pass

    if not os.path.lexists(path):
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)  # pyright: ignore[reportDeprecated]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Worlds:
    """The private /tmp directories of the sessions of one Toolbox (its policy)."""

    def __init__(self, policy: SandboxPolicy) -> None:
        self.policy = policy
        self._policies: dict[int, tuple[object, SandboxPolicy]] = {}
        self._lock = threading.Lock()
        self._swept = False

    @functools.cached_property
    def private(self) -> bool:
        """Whether sessions get a private /tmp at all: not in rwx mode, and only where bash gets a
        mount namespace to see it in (elsewhere bash and the file tools share the host's)."""
        return self.policy.mode != "rwx" and probe.support().pid_namespace

    def known(self, owner: object | None) -> SandboxPolicy | None:
        """`owner`'s policy when its /tmp exists already (or nothing is private), without blocking."""
        if not self.private:
            return self.policy
        known = self._policies.get(id(owner))
        return known[1] if known is not None and known[0] is owner else None

    def policy_for(self, owner: object | None) -> SandboxPolicy:
        """The policy `owner`'s calls run under: this one with its private /tmp."""
        if not self.private:
            return self.policy
        key = id(owner)
        with self._lock:
            known = self._policies.get(key)
            if known is not None and known[0] is owner:
                return known[1]
            policy = self.fresh()
            self._policies[key] = (owner, policy)
            return policy

    def fresh(self) -> SandboxPolicy:
        """A policy with a new private /tmp directory that nobody else has (for a call with no session:
        remove it with `discard` after the call). The directory is made when first used."""
        root = self.policy.private_tmp_root
        if not self._swept:
            self._swept = True
            self._sweep(root)
        directory = root / f"{os.getpid()}-{secrets.token_hex(6)}"
        return self.policy.with_private_tmp(directory)

    def close(self, owner: object | None) -> None:
        """Remove `owner`'s private /tmp (its session ended), blocking: `release` off the event loop."""
        directory = self.release(owner)
        if directory is not None:
            remove_tree(directory)

    def release(self, owner: object | None) -> Path | None:
        """End `owner`'s private /tmp without blocking: forgotten at once, and the directory returned
        when there is one to remove (`remove_tree` it, off the event loop); None when the session never
        made it, which is most sessions of stateless 2026-era HTTP calls (no worker thread for those)."""
        with self._lock:
            known = self._policies.get(id(owner))
            if known is None or known[0] is not owner:
                return None
            del self._policies[id(owner)]
        directory = known[1].private_tmp
        if directory is None:
            return None
        zygote_client.forget(directory)  # the bash zygote's session of this /tmp ends too
        fileworker_client.forget(directory)  # and so does the file tools' worker
        return directory if os.path.lexists(directory) else None

    def close_all(self) -> None:
        with self._lock:
            known = list(self._policies.values())
            self._policies.clear()
        for _, policy in known:
            self.discard(policy)

    @staticmethod
    def discard(policy: SandboxPolicy) -> None:
        if policy.private_tmp is not None:
            zygote_client.forget(policy.private_tmp)  # the bash zygote's session of this /tmp ends too
            fileworker_client.forget(policy.private_tmp)  # and so does the file tools' worker
            remove_tree(policy.private_tmp)

    @staticmethod
    def _sweep(root: Path) -> None:
        """Remove the directories of omega processes that are gone (killed before they could clean up)."""
        try:
            entries = list(os.scandir(root))
        except OSError:
            return
        for entry in entries:
            pid, _, _ = entry.name.partition("-")
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                remove_tree(Path(entry.path))
