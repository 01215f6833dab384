"""`serve --http` as a team's hub: probes and metrics, drain on SIGTERM, reload on SIGHUP.

Drain, decided: SIGTERM does not cancel the hub at once (as SIGINT still does). `/readyz` turns 503
at once so a balancer stops sending new work, new handshake sessions are refused, and requests of
the sessions this replica holds (and 2026-era requests) are served until `[hub] drain_seconds` pass
or nothing arrives for a while (`server/ops.py`); then the normal shutdown runs (calls in flight
finish, sessions end, servers stop) and omega exits 0. A second signal during the drain cuts it short.
Reload, decided: SIGHUP reads the same config file again. A file that does not load is logged and
changes nothing. Otherwise the servers follow `proxy/reload.py` (unchanged ones keep their
connections and their clients' sessions; `list_changed` is sent for the rest), and the
`[hub.clients]` tokens and profiles are replaced as a whole (a removed client is refused from then
on; a changed token takes effect at once). The sandbox, bind address and `[hub]` settings other
than the clients need a restart: the log says so when they changed.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc

from omega_mcp.cli.signals import SignalGuard
from omega_mcp.config import Config, load_config
from omega_mcp.errors import ConfigError

if TYPE_CHECKING:
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.server.auth import HubTokens
    from omega_mcp.server.ops import Operations
    from omega_mcp.server.profiles import Profiles
    from omega_mcp.server.server import OmegaServer
    from omega_mcp.toolbox import Toolbox

__all__ = [
    "check_clients",
    "drain_on_sigterm",
    "ensure_client_workspaces",
    "hub_operations",
    "hub_server",
    "reload_on_sighup",
    "reload_once",
]

logger = logging.getLogger("omega_mcp")


def hub_server(
    config: Config,
    toolbox: Toolbox,
    downstreams: Downstreams,
    sandbox: dict[str, Any],
    *,
    clients: bool,
    traced: bool = False,
) -> tuple[OmegaServer, Profiles | None]:
    """The MCP server every front end of the hub serves (stdio, HTTP, the shared hub's socket): the
    Toolbox with its instructions, `[hub]` tool search and, with `clients`, the `[hub.clients]`
    profiles (their workspaces created first), returned beside it.

    Raises:
        ConfigError: a client's workspace could not be created.
    """
    from omega_mcp.server.instructions import HubInstructions, hub_instructions
    from omega_mcp.server.profiles import Profiles
    from omega_mcp.server.server import build_server
    from omega_mcp.server.tool_search import SessionTools

    hub, policy = config.hub, toolbox.policy
    search = (
        None
        if hub.tool_search == "off"
        else SessionTools(toolbox, mode=hub.tool_search, always_visible=hub.always_visible)
    )
    profiles = Profiles(policy, hub.clients, hub.max_sessions_per_client) if clients else None
    if profiles is not None:
        ensure_client_workspaces(config)
    server = build_server(
        toolbox,
        catalog=downstreams,
        instructions=hub_instructions(policy, sandbox, list(config.servers)),
        client_instructions=HubInstructions(tuple(config.servers)),
        tool_search=search,
        profiles=profiles,
        traced=traced,
    )
    return server, profiles


def ensure_client_workspaces(config: Config) -> None:
    """Create each `[hub.clients.NAME] workspace` (its parent must exist: a typo makes no tree).

    Raises:
        ConfigError: one could not be created (named by its key).
    """
    for name, client in config.hub.clients.items():
        if client.workspace is None:
            continue
        try:
            client.workspace.mkdir(exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create {client.workspace}: {exc.strerror or exc}",
                path=str(config.path) if config.path else None,
                key=f"hub.clients.{name}.workspace",
            ) from None


def check_clients(config: Config) -> None:
    """What `serve --http` refuses in `[hub.clients]`, checked without starting or creating anything
    (for `omega-mcp tools`): two clients with one token, a client token equal to the hub's own
    (`OMEGA_TOKEN`, else `$OMEGA_HOME/token` when it exists), a client workspace whose parent is missing.

    Raises:
        ConfigError: the first such problem, named by its key.
    """
    import os
    import secrets

    from omega_mcp.sandbox.policy import TOKEN_FILE_NAME
    from omega_mcp.server.auth import HubTokens

    if not config.hub.clients:
        return
    hub_token = os.environ.get("OMEGA_TOKEN") or ""
    if not hub_token:
        try:
            hub_token = (config.home / TOKEN_FILE_NAME).read_text(encoding="utf-8").strip()
        except OSError:
            hub_token = ""
    HubTokens(hub_token or secrets.token_urlsafe(32), _client_tokens(config))
    for name, client in config.hub.clients.items():
        workspace = client.workspace
        if workspace is not None and not workspace.is_dir() and not workspace.parent.is_dir():
            raise ConfigError(
                f"{workspace} does not exist, nor does its parent {workspace.parent}; create it first",
                path=str(config.path) if config.path else None,
                key=f"hub.clients.{name}.workspace",
            )


def _client_tokens(config: Config) -> list[tuple[str, str]]:
    return [(name, client.token) for name, client in config.hub.clients.items()]


def hub_operations(
    config: Config, server: OmegaServer, toolbox: Toolbox, downstreams: Downstreams, policy: SandboxPolicy
) -> tuple[HubTokens, Operations]:
    """The hub's tokens and its operations surface, with the metrics middleware in `server`.

    Raises:
        ConfigError: the token cannot be loaded or created, or two clients share one.
    """
    from omega_mcp.server.auth import HubTokens, load_or_create_token
    from omega_mcp.server.ops import HubMetrics, MetricsMiddleware, Operations

    tokens = HubTokens(load_or_create_token(policy.token_file), _client_tokens(config))

    def sessions() -> int:
        try:
            manager = server.session_manager
        except RuntimeError:  # no HTTP app yet
            return 0
        instances: object = getattr(manager, "_server_instances", None)  # the SDK keeps no public count
        return len(cast(Sized, instances)) if isinstance(instances, dict) else 0

    metrics = HubMetrics(toolbox, downstreams, sessions)
    server.middleware.insert(0, MetricsMiddleware(metrics))
    return tokens, Operations(downstreams, metrics, tokens)


async def drain_on_sigterm(guard: SignalGuard, ops: Operations, seconds: float, scope: anyio.CancelScope) -> None:
    """On SIGTERM drain, then cancel `scope` (the hub); on SIGINT, or a second signal, cancel at once."""
    received: list[int] = []
    with anyio.CancelScope() as signalled:
        await guard.until_signalled(signalled, received)
        await anyio.sleep_forever()
    if received and received[0] == signal.SIGTERM and seconds > 0:
        async with anyio.create_task_group() as tg:
            tg.start_soon(guard.until_signalled, tg.cancel_scope)  # a second signal ends the drain
            await ops.drain(seconds)
            tg.cancel_scope.cancel()
    scope.cancel()


async def reload_on_sighup(
    config: Config,
    policy: SandboxPolicy,
    downstreams: Downstreams,
    tokens: HubTokens,
    profiles: Profiles,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Reload `config`'s file on each SIGHUP (see the module docstring)."""
    with anyio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            config = await _reload(config, policy, downstreams, tokens, profiles)


async def reload_once(
    config: Config, policy: SandboxPolicy, downstreams: Downstreams, tokens: HubTokens, profiles: Profiles
) -> Config:
    """Reload `config`'s file once, as on SIGHUP (the shared hub does when the file's content changes)."""
    return await _reload(config, policy, downstreams, tokens, profiles)


async def _reload(
    config: Config, policy: SandboxPolicy, downstreams: Downstreams, tokens: HubTokens, profiles: Profiles
) -> Config:
    from omega_mcp.cli.toolbox import launch_guard
    from omega_mcp.proxy.reload import reconfigure
    from omega_mcp.proxy.spec import specs_from_config

    if config.path is None:
        logger.warning("SIGHUP: there is no config file to reload")
        return config
    try:
        new = load_config(config.path)
        ensure_client_workspaces(new)
        tokens.replace(_client_tokens(new))
    except ConfigError as exc:
        logger.error("SIGHUP: %s; the running config is kept", exc)
        return config
    profiles.replace(new.hub.clients)
    done = await reconfigure(downstreams, specs_from_config(new.for_servers, launch_guard(new, policy)))
    kept = {"clients", "drain_seconds"}
    if new.sandbox != config.sandbox or new.hub.model_dump(exclude=kept) != config.hub.model_dump(exclude=kept):
        logger.warning("SIGHUP: [sandbox] and [hub] settings other than the clients take effect at the next start")
    logger.info("SIGHUP: reloaded %s: %s", config.path, done)
    return new
