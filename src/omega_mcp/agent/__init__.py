"""The agent loop over HTTP LLM providers: neutral messages, the loop, and the CLI command.

Exports are loaded lazily: `omega_mcp.providers` imports `agent.messages`, and the loop imports
the providers, so importing this package must not pull in the loop eagerly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["AgentResult", "ToolHost", "resolve_model", "run_agent", "run_agent_command"]

_LAZY = {
    "AgentResult": "omega_mcp.agent.loop",
    "ToolHost": "omega_mcp.agent.loop",
    "run_agent": "omega_mcp.agent.loop",
    "resolve_model": "omega_mcp.agent.command",
    "run_agent_command": "omega_mcp.agent.command",
}

if TYPE_CHECKING:
    from omega_mcp.agent.command import resolve_model, run_agent_command
    from omega_mcp.agent.loop import AgentResult, ToolHost, run_agent


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'omega_mcp.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
