"""`omega-mcp agent`: one prompt through an HTTP LLM provider's tool-use loop over the hub's tools.

This module only opens the toolbox and hands the flags to `omega_mcp.agent.command`, which owns
provider selection, credentials, the loop, the output formats and the exit codes. The agent
package is imported inside `run_agent`, after `EarlyStarts.start` (proxy/spawn.py). With
`--no-tools` no downstream server is started: the model gets no tools, so none could be used.
The toolbox's sandbox policy (flags over the config) is what the default system prompt describes;
text streams to stdout unless `--no-stream` (or `--json`, or stdout is a file).
Without PROMPT the prompt is read from stdin, unless stdin is a terminal: then `main` runs the
interactive conversation (`converses`), which handles SIGINT itself. Every run is saved as a
session (`--continue`, `--resume ID`, `--sessions`: `omega_mcp.agent.sessions`), and writes the
sandbox lets the user approve are asked on the terminal (`omega_mcp.agent.approve`). stdout and stderr
go through `visible.VisibleStream`: no control character a model, tool or server sends reaches the
terminal as a control sequence.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO, cast

from omega_mcp.cli.common import UsageError, say
from omega_mcp.cli.signals import SignalGuard
from omega_mcp.cli.toolbox import needs_servers, open_toolbox
from omega_mcp.config import Config
from omega_mcp.proxy.spawn import EarlyStarts

if TYPE_CHECKING:
    from omega_mcp.toolbox import Toolbox

__all__ = ["converses", "run_agent"]


def _server_of(toolbox: Toolbox) -> Callable[[str], str | None]:
    """A tool name's servers.toml key (None: a built-in), for the tool search's ranking."""

    def server_of(name: str) -> str | None:
        route = toolbox.namespace().resolve(name)
        return route.server_name if route is not None else None

    return server_of


def converses(args: argparse.Namespace) -> bool:
    """Whether `omega-mcp agent` holds an interactive conversation: no PROMPT, stdin a terminal."""
    stdin = sys.stdin
    terminal = stdin is not None and stdin.isatty()  # Python sets a closed stdin to None
    return args.command == "agent" and args.prompt is None and not args.sessions and terminal


async def run_agent(
    config: Config,
    args: argparse.Namespace,
    out: TextIO,
    early: EarlyStarts | None = None,
    guard: SignalGuard | None = None,
) -> int:
    """Run the agent loop for `args.prompt` (from stdin without it), or the conversation when
    `guard` is given (`converses`); returns the agent command's exit code.

    Raises:
        UsageError: flags that do not go together, no prompt at all.
        ConfigError: an unknown session to resume, or none to continue.
    """
    from omega_mcp.agent import terminal
    from omega_mcp.agent.approve import approving_tools
    from omega_mcp.agent.command import run_agent_command
    from omega_mcp.agent.sessions import SessionStore
    from omega_mcp.visible import VisibleStream

    # Everything the agent prints may quote a model, a tool, a file or a server: escapes are shown.
    out = cast(TextIO, VisibleStream(out))
    err = cast(TextIO, VisibleStream(sys.stderr))
    store = SessionStore(config.home)
    if args.sessions:
        if args.prompt is not None or args.continue_latest or args.resume is not None:
            raise UsageError("--sessions only lists the saved sessions: give it no PROMPT, --continue or --resume")
        return terminal.list_sessions(store, out, err)
    if guard is not None and args.json:
        raise UsageError("--json needs a PROMPT (or the prompt on stdin); the conversation prints text")
    prompt = args.prompt
    stdin = sys.stdin  # None when closed: then there is no prompt to read and no conversation
    if prompt is None and guard is None and stdin is not None:
        try:
            prompt = await terminal.prompt_from_stdin(stdin.buffer)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if prompt is None and guard is None:
        raise UsageError("no PROMPT: give one, pipe it on stdin, or run on a terminal for a conversation")
    recorder = store.recorder(
        resume=args.resume,
        continue_latest=args.continue_latest,
        workspace="",
        warn=lambda text: say(f"omega-mcp agent: {text}"),
    )
    async with open_toolbox(config, args, early, with_servers=needs_servers(args)) as (toolbox, _):
        recorder.workspace = str(toolbox.policy.workspace)
        if guard is not None and stdin is not None:
            session = terminal.conversation(recorder, fd=stdin.fileno(), out=err, guard=guard)
        else:
            assert prompt is not None
            session = terminal.one_shot(prompt, recorder)
        with approving_tools(toolbox, err, json_output=args.json) as tools:
            return await run_agent_command(
                prompt=prompt or "",
                config=config,
                tools=tools,
                provider=args.provider,
                model=args.model,
                base_url=args.base_url,
                max_turns=args.max_turns,
                no_tools=args.no_tools,
                allow_tools=args.allow_tool,
                system=args.system,
                json_output=args.json,
                stdout=out,
                stderr=err,
                environ=os.environ,
                stream=False if args.no_stream else None,
                sandbox=toolbox.policy,
                session=session,
                server_of=_server_of(toolbox),
            )
