"""omega-mcp: a sandboxed MCP tool hub, an aggregator proxy and a thin agent loop.

The public API is loaded lazily: the bash sandbox trampoline (`python -m omega_mcp.sandbox.exec`)
imports this package on every command, and must not pay for the SDK import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "OmegaError",
    "SandboxPolicy",
    "ToolError",
    "Toolbox",
    "UnknownToolError",
    "__version__",
    "build_server",
    "load_config",
    "run_agent",
]

_LAZY = {
    "Config": "omega_mcp.config",
    "load_config": "omega_mcp.config",
    "ConfigError": "omega_mcp.errors",
    "OmegaError": "omega_mcp.errors",
    "ToolError": "omega_mcp.errors",
    "UnknownToolError": "omega_mcp.errors",
    "SandboxPolicy": "omega_mcp.sandbox.policy",
    "Toolbox": "omega_mcp.toolbox",
    "build_server": "omega_mcp.server.server",
    "run_agent": "omega_mcp.agent.loop",
}

if TYPE_CHECKING:
    from omega_mcp.agent.loop import run_agent
    from omega_mcp.config import Config, load_config
    from omega_mcp.errors import ConfigError, OmegaError, ToolError, UnknownToolError
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.server.server import build_server
    from omega_mcp.toolbox import Toolbox


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'omega_mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
