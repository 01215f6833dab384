"""The 2026-era request envelope as the relay reads it: in `params._meta`, under the reserved prefix.

Plain dict reading: which versions count as the 2026 era is the SDK's to say, so the caller passes
them (`mcp_types.version.MODERN_PROTOCOL_VERSIONS`) and this module imports no SDK.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from omega_mcp.narrow import as_object, object_or_none

__all__ = ["RESERVED_META", "VERSION_KEY", "askable", "enveloped", "log_level_of"]

RESERVED_META = "io.modelcontextprotocol/"
VERSION_KEY = f"{RESERVED_META}protocolVersion"
ENVELOPE_KEYS = (f"{RESERVED_META}clientInfo", f"{RESERVED_META}clientCapabilities")
LOG_LEVEL_KEY = f"{RESERVED_META}logLevel"


def enveloped(params: dict[str, Any], versions: Collection[str]) -> bool:
    """Whether `params` carry a complete 2026-era envelope of one of `versions` (those the SDK serves)."""
    meta = object_or_none(params.get("_meta"))
    version = meta.get(VERSION_KEY) if meta is not None else None
    if meta is None or not isinstance(version, str) or version not in versions:
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
