"""One-time write approvals (`[sandbox] on_denied = "ask"`): ask the user, grant once, then write.

Only a write refused for being outside the writable roots (`PathDeniedError.askable`) is put to the
user; the blocklist never is. An approval becomes a grant for exactly that lexical path in `Grants`,
consumed by the one write it was asked for (in `paths.open_write_parent`, when the parent directory
is opened, which then refuses every symbolic link on the way so the write lands exactly at the path
the user saw) and ignored after `GRANT_SECONDS`. How the user is asked is the front-end's business: an
`Approver` callback (MCP elicitation lives in `server/approver.py`); no answer, a decline or no way to
ask is a denial; an approver may also raise a `ToolError` to deny with its own message (the
terminal's "Operation canceled by user"). Nothing here knows MCP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from omega_mcp.errors import PathDeniedError
from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = ["GRANT_SECONDS", "ApprovalRequest", "Approver", "Grants", "approval_question", "with_approval"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A write the policy refused that the user may allow: the lexical absolute path, and why it was refused."""

    path: str
    reason: str


Approver = Callable[[ApprovalRequest], Awaitable[bool]]
"""Asks the user whether omega may write this path once: True only on an explicit approval."""

GRANT_SECONDS = 300.0


class Grants:
    """Path -> expiry of the writes the user approved. Thread-safe: writes consume from worker threads."""

    def __init__(self, *, ttl: float = GRANT_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._expiry: dict[Path, float] = {}

    def grant(self, path: Path) -> None:
        """Allow one write to exactly `path` (lexical, absolute) for the next `ttl` seconds."""
        with self._lock:
            now = self._clock()
            self._expiry = {p: t for p, t in self._expiry.items() if t > now}  # keep the store small
            self._expiry[path] = now + self._ttl

    def consume(self, path: Path) -> bool:
        """Use up the grant for `path`: True if one existed and had not expired (it is gone either way)."""
        with self._lock:
            expiry = self._expiry.pop(path, None)
            return expiry is not None and self._clock() < expiry


def approval_question(path: str) -> str:
    """What the user is asked; a path with control or invisible characters is shown escaped, never raw."""
    shown = path if path.isprintable() else repr(path)
    return f"omega wants to write {shown} — allow once?"


async def with_approval(
    policy: SandboxPolicy,
    path: Path,
    attempt: Callable[[Grants | None], str],
    *,
    approve: Approver | None,
    grants: Grants | None,
) -> str:
    """Run the blocking write `attempt(grants)` in a worker thread; on an askable denial, ask once and retry.

    Asks only with `on_denied = "ask"`, an approver (a client that can be asked) and a grant store.

    Raises:
        PathDeniedError: refused, not askable, or the user did not approve (the file is untouched).
        ToolError: what the approver raised to deny (the file is untouched).
    """
    if policy.on_denied != "ask" or approve is None or grants is None:
        return await anyio.to_thread.run_sync(attempt, None)
    try:
        return await anyio.to_thread.run_sync(attempt, grants)
    except PathDeniedError as exc:
        if not exc.askable:
            raise
        denied = exc
    if not await approve(ApprovalRequest(str(path), denied.reason)):
        raise PathDeniedError(denied.path, f"{denied.reason}; the user did not approve this write")
    grants.grant(path)
    return await anyio.to_thread.run_sync(attempt, grants) + " — approved by the user for this one write"
