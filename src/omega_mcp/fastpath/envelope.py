"""The 2026-era request envelope as the relay reads it: in `params._meta`, under the reserved prefix."""

from __future__ import annotations

from typing import Any

from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from omega_mcp.narrow import as_object, object_or_none

__all__ = ["RESERVED_META", "VERSION_KEY", "askable", "enveloped", "log_level_of"]

RESERVED_META = "io.modelcontextprotocol/"
VERSION_KEY = f"{RESERVED_META}protocolVersion"
ENVELOPE_KEYS = (f"{RESERVED_META}clientInfo", f"{RESERVED_META}clientCapabilities")
LOG_LEVEL_KEY = f"{RESERVED_META}logLevel"


def enveloped(params: dict[str, Any]) -> bool:
    """Whether `params` carry a complete 2026-era envelope of a version the SDK serves."""
    meta = object_or_none(params.get("_meta"))
    if meta is None or meta.get(VERSION_KEY) not in MODERN_PROTOCOL_VERSIONS:
        return False
    return all(object_or_none(meta.get(key)) is not None for key in ENVELOPE_KEYS)


def askable(params: dict[str, Any]) -> bool:
    """Whether a 2026-era call needs the bridge before a handshake-era server: its client can be asked
    something (sampling, elicitation, roots), or it is the retry of an input-required round."""
    if params.get("requestState") is not None or params.get("inputResponses") is not None:
        return True
    capabilities = object_or_none(as_object(params.get("_meta")).get(ENVELOPE_KEYS[1])) or {}
    return any(capabilities.get(kind) is not None for kind in ("sampling", "elicitation", "roots"))


def log_level_of(params: dict[str, Any]) -> str | None:
    level = as_object(params.get("_meta")).get(LOG_LEVEL_KEY)
    return level if isinstance(level, str) else None
