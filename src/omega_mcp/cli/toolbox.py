"""The started Toolbox that `serve`, `tools`, `call` and `agent` run over.

Resolves the sandbox policy (flags over the config file over defaults), creates the workspace or
fails with a ConfigError naming where it was set, and starts the downstream servers, unless the
command cannot use them (`needs_servers`: a `call` of a built-in tool, `agent --no-tools`); `main`
asks the same function before `EarlyStarts.start` (proxy/spawn.py). The sandbox, proxy and toolbox
modules are imported inside the functions: the SDK must not load before that early start.
One-shot commands look once and exit, so their servers never announce a retry (`one_shot`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from omega_mcp.cli.common import UsageError
from omega_mcp.cli.trust import policy_for
from omega_mcp.config import Config
from omega_mcp.errors import ConfigError
from omega_mcp.proxy.spawn import EarlyStarts

if TYPE_CHECKING:
    from omega_mcp.names import Naming
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.toolbox import Toolbox

__all__ = ["BUILTIN_TOOL_NAMES", "SERVE_STARTUP_WAIT_SECONDS", "needs_servers", "open_toolbox"]

BUILTIN_TOOL_NAMES = frozenset({"bash", "read", "write", "edit", "bash_output", "kill_shell"})
"""The names in `omega_mcp.builtin.schemas.BUILTIN_TOOLS` (a test keeps them equal), known here
without importing the SDK, which that module does."""

SERVE_STARTUP_WAIT_SECONDS = 10.0
"""How long the first tools/list of `serve` waits for slow downstream servers; the ones that
arrive later are announced with notifications/tools/list_changed."""


def needs_servers(args: argparse.Namespace) -> bool:
    """Whether the command can use a downstream server (`call` of a built-in and `agent --no-tools` cannot)."""
    if args.command == "call":
        return str(args.tool).casefold() not in BUILTIN_TOOL_NAMES
    if args.command == "agent":
        return not args.no_tools
    return args.command in ("serve", "tools")


def _ensure_workspace(workspace: Path, config: Config, args: argparse.Namespace) -> None:
    """Create the workspace, or raise a ConfigError naming where it was set (flag, file or default)."""
    if getattr(args, "workspace", None):
        where: dict[str, str | None] = {"key": "--workspace"}
    elif config.sandbox.workspace is not None:
        where = {"path": str(config.path) if config.path else None, "key": "sandbox.workspace"}
    else:
        where = {"key": "workspace (default: $OMEGA_HOME/workspace)"}
    # Created with its missing parents only under omega's own home; elsewhere its parent must
    # exist, so a typo never makes a tree of directories (`/nonexistent/deep/ws` is refused).
    under_home = workspace == config.home or config.home in workspace.parents
    try:
        workspace.mkdir(parents=under_home, exist_ok=True)
    except FileNotFoundError:
        raise ConfigError(
            f"{workspace} does not exist, nor does its parent {workspace.parent}; create it first", **where
        ) from None
    except FileExistsError:
        raise ConfigError(f"{workspace} exists and is not a directory", **where) from None
    except NotADirectoryError:
        raise ConfigError(f"{workspace}: a component of its path is not a directory", **where) from None
    except OSError as exc:
        raise ConfigError(f"cannot create the workspace {workspace}: {exc.strerror or exc}", **where) from None


def _naming(config: Config, args: argparse.Namespace) -> Naming:
    """How `serve` names downstream tools for its client: flags over `[hub]`; other commands keep full names."""
    from omega_mcp.names import FULL, Naming

    if args.command != "serve":
        return FULL  # the agent loop and the CLI see the full mcp__<server>__<tool> names
    prefix = args.client_prefix if args.client_prefix is not None else config.hub.client_prefix
    if not re.fullmatch(r"[A-Za-z0-9_-]{0,40}", prefix):
        raise UsageError(
            f"--client-prefix: {prefix!r} is not a tool-name prefix (letters, digits, '_' and '-', at most 40)"
        )
    return Naming(client_prefix=prefix, style=args.names or config.hub.names)


@asynccontextmanager
async def open_toolbox(
    config: Config, args: argparse.Namespace, early: EarlyStarts | None = None, *, with_servers: bool = True
) -> AsyncGenerator[tuple[Toolbox, Downstreams]]:
    """A started Toolbox over the built-ins and the configured downstream servers, and those servers.

    The downstream servers connect in the background, in parallel. Under `serve` a listing waits
    for them at most SERVE_STARTUP_WAIT_SECONDS; one-shot commands (`tools`, `call`, `agent`)
    wait until each has connected or failed (within its own connect timeout). With
    `with_servers=False` no server is started: the Toolbox has the built-ins only, and the
    Downstreams yielded is empty.
    """
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.toolbox import Toolbox

    policy = policy_for(config, args)
    _ensure_workspace(policy.workspace, config, args)
    startup_wait = SERVE_STARTUP_WAIT_SECONDS if args.command == "serve" else None
    if with_servers:
        # A one-shot command looks once and exits: it neither announces nor promises a retry.
        one_shot = args.command != "serve"
        downstreams = Downstreams.from_config(config, startup_wait_seconds=startup_wait, early=early, one_shot=one_shot)
    else:
        downstreams = Downstreams([])
    toolbox = Toolbox(policy, downstreams if with_servers and config.servers else None, naming=_naming(config, args))
    async with downstreams, toolbox:
        yield toolbox, downstreams
