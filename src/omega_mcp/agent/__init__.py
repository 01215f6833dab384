"""The agent loop over HTTP LLM providers: the loop, its tool catalog and the CLI command.

The neutral messages it exchanges with the providers live one level up, in `omega_mcp.messages`
(with the JSON narrowing helpers in `omega_mcp.narrow`): `omega_mcp.providers` never imports this
package, only the other way round, so these imports are plain. A new provider is one module in
`omega_mcp.providers`, not here; the loop only ever sees the `Provider` protocol.
"""

from __future__ import annotations

from omega_mcp.agent.command import resolve_model, run_agent_command
from omega_mcp.agent.loop import AgentResult, ToolHost, run_agent

__all__ = ["AgentResult", "ToolHost", "resolve_model", "run_agent", "run_agent_command"]
