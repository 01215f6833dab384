"""`omega-mcp agent`: one prompt through an HTTP LLM provider's tool-use loop over the hub's tools.

This module only opens the toolbox and hands the flags to `omega_mcp.agent.command`, which owns
provider selection, credentials, the loop, the output formats and the exit codes. The agent
package is imported inside `run_agent`, after `EarlyStarts.start` (proxy/spawn.py). With
`--no-tools` no downstream server is started: the model gets no tools, so none could be used.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

from omega_mcp.cli.toolbox import needs_servers, open_toolbox
from omega_mcp.config import Config
from omega_mcp.proxy.spawn import EarlyStarts

__all__ = ["run_agent"]


async def run_agent(config: Config, args: argparse.Namespace, out: TextIO, early: EarlyStarts | None = None) -> int:
    """Run the agent loop for `args.prompt`; returns the agent command's exit code."""
    from omega_mcp.agent.command import run_agent_command

    async with open_toolbox(config, args, early, with_servers=needs_servers(args)) as (toolbox, _):
        return await run_agent_command(
            prompt=args.prompt,
            config=config,
            tools=toolbox,
            provider=args.provider,
            model=args.model,
            base_url=args.base_url,
            max_turns=args.max_turns,
            no_tools=args.no_tools,
            allow_tools=args.allow_tool,
            system=args.system,
            json_output=args.json,
            stdout=out,
            stderr=sys.stderr,
            environ=os.environ,
        )
