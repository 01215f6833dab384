"""MCP's eight syslog log levels and Python's `logging` levels, both ways.

Downstream servers log to omega in MCP levels (re-logged under `omega_mcp.downstream.<server>`
for omega's own log, marked `ROUTED`: each goes to the client whose call it belongs to, as it is),
and clients that asked with `logging/setLevel` receive omega's own records in MCP levels. `notice`,
`alert` and `emergency` have no Python counterpart and get numbers between the standard ones;
`name_levels()` (called once by the CLI, never on import) makes stderr show them by name.
"""

from __future__ import annotations

import logging
from typing import Literal, cast

__all__ = ["ROUTED", "McpLevel", "allows", "mcp_level", "name_levels", "python_level"]

ROUTED = "omega_routed"
"""`LogRecord` attribute set on a downstream's log message re-logged for stderr: it was routed to its
client already, so the forwarding of omega's own log to every client must skip it."""

McpLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
"""MCP's `LoggingLevel` (spelled out here: this module must not import the SDK, the CLI loads it early)."""

_PYTHON_LEVELS: dict[McpLevel, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO + 5,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL + 5,
    "emergency": logging.CRITICAL + 10,
}


def python_level(level: str) -> int:
    """The `logging` level of an MCP level name (syslog's eight); unknown names are INFO."""
    return _PYTHON_LEVELS.get(cast(McpLevel, level), logging.INFO)


def allows(threshold: str | None, level: str) -> bool:
    """Whether a message at `level` passes a client's `threshold` (None: the client wants none)."""
    return threshold is not None and python_level(level) >= python_level(threshold)


def mcp_level(levelno: int) -> McpLevel:
    """The highest MCP level at or below a `logging` level."""
    chosen: McpLevel = "debug"
    for name, number in _PYTHON_LEVELS.items():
        if levelno >= number:
            chosen = name
    return chosen


def name_levels() -> None:
    """Register the names of the levels Python lacks, so a downstream's notice shows as NOTICE."""
    for name in ("notice", "alert", "emergency"):
        logging.addLevelName(_PYTHON_LEVELS[name], name.upper())
