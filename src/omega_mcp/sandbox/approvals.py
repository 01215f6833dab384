"""One-time write approvals (`[sandbox] on_denied = "ask"`): ask the user, grant once, then write.

Only a write refused for being outside the writable roots (`PathDeniedError.askable`) is put to the
user; the blocklist never is. An approval becomes a grant for exactly that lexical path in `Grants`,
consumed by the one write it was asked for (in `paths.open_write_parent`, when the parent directory
is opened, which then refuses every symbolic link on the way so the write lands exactly at the path
the user saw) and ignored after `GRANT_SECONDS`. The user is asked through MCP form elicitation on
handshake-era connections only (2026-07-28 has no server-to-client requests; its input-required
flow is not implemented), bounded by `ASK_SECONDS`; no answer, a decline or no way to ask is a denial.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from mcp import types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp.errors import PathDeniedError
from omega_mcp.sandbox.policy import SandboxPolicy

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

__all__ = [
    "ASK_SECONDS",
    "GRANT_SECONDS",
    "Approver",
    "Grants",
    "approval_question",
    "elicitation_approver",
    "with_approval",
]

logger = logging.getLogger(__name__)

Approver = Callable[[str], Awaitable[bool]]
"""Asks the user whether omega may write this path once: True only on an explicit approval."""

GRANT_SECONDS = 300.0
ASK_SECONDS = 120.0

_EMPTY_FORM: types.ElicitRequestedSchema = {"type": "object", "properties": {}}  # accept / decline, no fields


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
    """
    if policy.on_denied != "ask" or approve is None or grants is None:
        return await anyio.to_thread.run_sync(attempt, None)
    try:
        return await anyio.to_thread.run_sync(attempt, grants)
    except PathDeniedError as exc:
        if not exc.askable:
            raise
        denied = exc
    if not await approve(str(path)):
        raise PathDeniedError(denied.path, f"{denied.reason}; the user did not approve this write")
    grants.grant(path)
    return await anyio.to_thread.run_sync(attempt, grants) + " — approved by the user for this one write"


def _can_elicit_form(session: ServerSession) -> bool:
    caps = session.client_capabilities
    if caps is None or caps.elicitation is None:
        return False
    # `elicitation: {}` means form mode (the pre-2025-11-25 shape); a url-only client cannot show a form.
    return caps.elicitation.form is not None or caps.elicitation.url is None


def elicitation_approver(session: ServerSession, request_id: types.RequestId | None) -> Approver | None:
    """An approver asking the client's user through form elicitation, or None if this client cannot be asked."""
    if (
        session.protocol_version in MODERN_PROTOCOL_VERSIONS
        or not session.can_send_request  # e.g. stateless HTTP: no channel back to the client
        or not _can_elicit_form(session)
    ):
        return None

    async def approve(path: str) -> bool:
        with anyio.move_on_after(ASK_SECONDS):
            try:
                result = await session.elicit_form(approval_question(path), _EMPTY_FORM, related_request_id=request_id)
            except Exception as exc:  # boundary: a client that fails to answer has not approved anything
                logger.info("write approval for %s was not answered: %s", path, exc)
                return False
            return result.action == "accept"
        logger.info("write approval for %s timed out after %.0f s", path, ASK_SECONDS)
        return False

    return approve
