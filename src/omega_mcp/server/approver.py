"""Asking the MCP client's user to approve one write outside the roots, through form elicitation.

The `Approver` callback type and the grants live in `sandbox/approvals.py` (which knows nothing of
MCP); this is the MCP side. The user is asked on handshake-era connections only (2026-07-28 has no
server-to-client requests; its input-required flow is not implemented), bounded by `ASK_SECONDS`;
no answer, a decline, an error or a client that cannot show a form is a denial.
"""

from __future__ import annotations

import logging

import anyio
from mcp import types
from mcp.server.session import ServerSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp.sandbox.approvals import ApprovalRequest, Approver, approval_question

__all__ = ["ASK_SECONDS", "elicitation_approver"]

logger = logging.getLogger(__name__)

ASK_SECONDS = 120.0
_EMPTY_FORM: types.ElicitRequestedSchema = {"type": "object", "properties": {}}  # accept / decline, no fields


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

    async def approve(request: ApprovalRequest) -> bool:
        path = request.path
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
