"""The started Toolbox that `serve`, `tools`, `call` and `agent` run over.

Resolves the sandbox policy (flags over the config file over defaults), creates the workspace or
fails with a ConfigError naming where it was set, and starts the downstream servers, unless the
command cannot use them (`needs_servers`: a `call` of a built-in tool, `agent --no-tools`); `main`
asks the same function before `EarlyStarts.start` (proxy/spawn.py). The sandbox, proxy and toolbox
modules are imported inside the functions: the SDK must not load before that early start.
One-shot commands look once and exit, so their servers never announce a retry (`one_shot`).
The servers' sampling, elicitation and roots requests are routed by `proxy/client_requests.py`:
to the MCP clients under `serve`, to omega's own provider where `[sampling]` configures one
(resolved here as the agent's settings are), and to the workspace for roots.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from omega_mcp.cli.common import UsageError
from omega_mcp.cli.trust import policy_for
from omega_mcp.config import AgentConfig, Config
from omega_mcp.errors import ConfigError
from omega_mcp.proxy.spawn import EarlyStarts

if TYPE_CHECKING:
    from omega_mcp.names import Naming
    from omega_mcp.proxy.sampling import ProviderSampler
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.sandbox.untrusted import LaunchGuard
    from omega_mcp.toolbox import Toolbox

__all__ = ["BUILTIN_TOOL_NAMES", "SERVE_STARTUP_WAIT_SECONDS", "launch_guard", "needs_servers", "open_toolbox"]

logger = logging.getLogger(__name__)

BUILTIN_TOOL_NAMES = frozenset({"bash", "read", "write", "edit", "bash_output", "kill_shell"})
"""The names in `omega_mcp.builtin.schemas.BUILTIN_TOOLS` (a test keeps them equal), known here
without importing the SDK, which that module does."""

SERVE_STARTUP_WAIT_SECONDS = 0.0
"""How long after the start a listing of `serve` (tools/list, prompts/list, resources/list) may wait
for the first round: not at all. A listing answers at once with the built-ins and the servers that
are ready (early-started ones have had omega's own start-up to get there); the others are announced
with notifications/tools/list_changed, and a call to a tool of a server still starting waits for
that server only (its connect timeout). Measured with Codex 0.171, which sends its first model
request about a second after launching its MCP servers whatever they do: even half a second of
waiting here cost it all of omega's tools, every time, on a loaded machine."""


def needs_servers(args: argparse.Namespace) -> bool:
    """Whether the command can use a downstream server (`call` of a built-in and `agent --no-tools` cannot)."""
    if args.command == "call":
        return str(args.tool).casefold() not in BUILTIN_TOOL_NAMES
    if args.command == "agent":
        return not args.no_tools and not args.sessions  # `--sessions` only lists the saved sessions
    return args.command in ("serve", "tools", "search")


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


def sampler_for(config: Config) -> ProviderSampler | None:
    """omega's provider for downstream sampling requests (`[sampling]`), or None when none is set.

    Keys and base URLs resolve as the agent's do (`resolve_settings`; no flags). A `[sampling]` that
    cannot be resolved (say its API key is not set) is reported once on stderr, and the sampler
    refuses every request with that reason: the hub itself keeps working.
    """
    sampling = config.sampling
    if sampling.provider is None:
        return None  # before the imports: the agent's modules are not on the way to `serve`'s first answer
    from omega_mcp.agent.command import resolve_model, resolve_settings
    from omega_mcp.proxy.sampling import ProviderSampler, SamplingSettings

    own = AgentConfig(
        provider=sampling.provider,
        model=sampling.model,
        model_fast=sampling.model_fast,
        model_complex=sampling.model_complex,
        base_url=sampling.base_url,
        api_key_env=sampling.api_key_env,
        anthropic_version=config.agent.anthropic_version,
    )
    try:
        resolved = resolve_settings(
            config.model_copy(update={"agent": own}),
            provider=sampling.provider,
            model=None,
            base_url=None,
            max_turns=None,
            environ=os.environ,
        )
    except ConfigError as exc:
        problem = "; ".join(
            line.replace("agent.", "sampling.").replace("[agent]", "[sampling]") for line in exc.problems
        )
        logger.warning("[sampling] is not usable, sampling requests will be refused: %s", problem)
        return ProviderSampler(None, problem=problem)
    settings = SamplingSettings(
        provider=resolved.provider,
        model=resolved.model,
        model_fast=resolve_model(own, "fast", provider=resolved.provider),
        model_complex=resolve_model(own, "complex", provider=resolved.provider),
        base_url=resolved.base_url,
        api_key=resolved.api_key,
        mode=sampling.mode,
        allow=frozenset(sampling.allow),
        max_tokens=sampling.max_tokens,
        anthropic_version=resolved.anthropic_version,
    )
    return ProviderSampler(settings)


def launch_guard(config: Config, policy: SandboxPolicy) -> LaunchGuard:
    """What a model may write, for the servers omega starts: the sandbox's roots and every hub
    client's own workspace (`sandbox/untrusted.py`)."""
    from omega_mcp.sandbox.untrusted import LaunchGuard

    return LaunchGuard.of(policy).widened(c.workspace for c in config.hub.clients.values() if c.workspace)


@asynccontextmanager
async def open_toolbox(
    config: Config, args: argparse.Namespace, early: EarlyStarts | None = None, *, with_servers: bool = True
) -> AsyncGenerator[tuple[Toolbox, Downstreams]]:
    """A started Toolbox over the built-ins and the configured downstream servers, and those servers.

    The downstream servers connect in the background, in parallel. Under `serve` a listing waits
    for them only until SERVE_STARTUP_WAIT_SECONDS after the start; the listings of `tools` and
    `agent` wait until each has connected or failed (within its own connect timeout); a call
    (`call`, or any front-end's) waits only for the server its tool belongs to. With
    `with_servers=False` no server is started: the Toolbox has the built-ins only, and the
    Downstreams yielded is empty.
    """
    from omega_mcp.proxy.client_requests import ClientRequests
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.toolbox import Toolbox

    policy = policy_for(config, args)
    _ensure_workspace(policy.workspace, config, args)
    startup_wait = SERVE_STARTUP_WAIT_SECONDS if args.command == "serve" else None
    async with AsyncExitStack() as stack:
        if with_servers:
            # A one-shot command looks once and exits: it neither announces nor promises a retry.
            one_shot = args.command != "serve"
            sampler = sampler_for(config) if config.servers else None
            if sampler is not None:
                await stack.enter_async_context(sampler)
            requests = ClientRequests(serving=args.command == "serve", sampler=sampler)
            downstreams = Downstreams.from_config(
                config.for_servers,
                guard=launch_guard(config, policy),
                startup_wait_seconds=startup_wait,
                early=early,
                one_shot=one_shot,
                client_requests=requests,
            )
        else:
            downstreams = Downstreams([])
        # The HTTP hub routes to the Downstreams even when it starts with none: a reload may add some.
        routed = with_servers and (config.servers or getattr(args, "http", False))
        toolbox = Toolbox(policy, downstreams if routed else None, naming=_naming(config, args))
        async with downstreams, toolbox:
            yield toolbox, downstreams
