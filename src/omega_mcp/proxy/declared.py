"""The client capabilities omega declares to its downstream servers, as plain JSON (no SDK import).

The rule is `client_requests.py`'s: `roots` always (a client's roots, else the workspace),
`sampling` with tools and `elicitation` in both modes when omega serves MCP clients, `sampling`
also when `[sampling]` configures a provider. The SDK session declares them through the callbacks
`ServerRequests.session_options` installs; this module says the same without loading the SDK, for
an `initialize` written before it is imported (`spawn.py`'s early start). A test keeps both equal.
"""

from __future__ import annotations

from typing import Any

__all__ = ["declared_capabilities"]


def declared_capabilities(*, serving: bool, sampling: bool) -> dict[str, Any]:
    """The `capabilities` of omega's `initialize` to a downstream server (wire JSON).

    `serving`: omega serves MCP clients (`serve`); `sampling`: `[sampling]` sets a provider.
    """
    capabilities: dict[str, Any] = {"roots": {"listChanged": True}}
    if serving or sampling:
        capabilities["sampling"] = {"tools": {}}
    if serving:
        capabilities["elicitation"] = {"form": {}, "url": {}}
    return capabilities
