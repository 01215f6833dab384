"""omega-mcp: a sandboxed MCP tool hub, an aggregator proxy and a thin agent loop.

The public API is loaded lazily: the bash sandbox trampoline (`python -m omega_mcp.sandbox.child.exec`)
imports this package on every command, and must not pay for the SDK import. `_EXPORTS` is the one
list of it; the `TYPE_CHECKING` imports below only tell type checkers the same thing (Python 3.11
has no lazy import a checker understands), and `tests/test_public_api.py` fails if they disagree.
"""

from __future__ import annotations

import importlib

from omega_mcp.version import __version__ as __version__

TYPE_CHECKING = False  # `typing` is not imported at run time: `attach` (one per window) never pays for it

_EXPORTS = {
    "CallContext": "omega_mcp.calling",
    "Config": "omega_mcp.config",
    "ConfigError": "omega_mcp.errors",
    "OmegaError": "omega_mcp.errors",
    "SandboxPolicy": "omega_mcp.sandbox.policy",
    "ToolError": "omega_mcp.errors",
    "Toolbox": "omega_mcp.toolbox",
    "UnknownToolError": "omega_mcp.errors",
    "build_server": "omega_mcp.server.server",
    "load_config": "omega_mcp.config",
    "run_agent": "omega_mcp.agent.loop",
}
"""Public name -> the module that defines it (imported on first access)."""

# A computed __all__ is opaque to type checkers: they see the `import X as X` re-exports below instead.
__all__ = list(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll]
__all__.append("__version__")

if TYPE_CHECKING:
    from omega_mcp.agent.loop import run_agent as run_agent
    from omega_mcp.calling import CallContext as CallContext
    from omega_mcp.config import Config as Config
    from omega_mcp.config import load_config as load_config
    from omega_mcp.errors import ConfigError as ConfigError
    from omega_mcp.errors import OmegaError as OmegaError
    from omega_mcp.errors import ToolError as ToolError
    from omega_mcp.errors import UnknownToolError as UnknownToolError
    from omega_mcp.sandbox.policy import SandboxPolicy as SandboxPolicy
    from omega_mcp.server.server import build_server as build_server
    from omega_mcp.toolbox import Toolbox as Toolbox


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
