"""`omega-mcp serve`: the MCP server over stdio (the default) or streamable HTTP.

stdout is the MCP wire under stdio, so the effective sandbox and everything else is logged to
stderr. The command runs until the client goes away or SIGINT/SIGTERM arrives (through the
`SignalGuard` that `main` passes in), then shuts down through the normal bounded cleanup. Under
`--http` the port is bound first, before any server starts, so a busy port or a bad host is one
usage error naming the address. With an OTLP endpoint in the environment the HTTP hub exports traces
(server/tracing.py), flushed on the way out. The server modules are imported inside `run_serve`, after
`EarlyStarts.start` (proxy/spawn.py).
"""

from __future__ import annotations

import argparse
import logging
import socket
from typing import TYPE_CHECKING, Any

import anyio

from omega_mcp.cli.common import EXIT_OK, UsageError
from omega_mcp.cli.signals import SignalGuard
from omega_mcp.cli.toolbox import launch_guard, open_toolbox
from omega_mcp.config import Config
from omega_mcp.proxy.spawn import EarlyStarts

if TYPE_CHECKING:
    from omega_mcp.server.tracing import Tracing

__all__ = ["run_serve"]

logger = logging.getLogger("omega_mcp")


async def run_serve(
    config: Config, args: argparse.Namespace, guard: SignalGuard, early: EarlyStarts | None = None
) -> int:
    """Serve the toolbox until the client leaves or a signal arrives; returns the exit code."""
    if getattr(args, "shared_hub", False):
        from omega_mcp.cli.hubd import run_shared_hub

        return await run_shared_hub(config, args, guard, early)
    if args.http and not 0 < args.port < 65536:
        raise UsageError(f"--port: {args.port} is not a TCP port (1-65535)")
    sockets: list[socket.socket] = []
    tracing: Tracing | None = None
    if args.http:
        from omega_mcp.server.http import bind_http
        from omega_mcp.server.tracing import start_tracing

        sockets = bind_http(args.host, args.port)
        tracing = start_tracing()
    try:
        return await _serve(config, args, guard, early, sockets, traced=tracing is not None)
    finally:
        for sock in sockets:
            sock.close()
        if tracing is not None:
            await tracing.stop()


async def _serve(
    config: Config,
    args: argparse.Namespace,
    guard: SignalGuard,
    early: EarlyStarts | None,
    sockets: list[socket.socket],
    *,
    traced: bool,
) -> int:
    from omega_mcp.sandbox import zygote_client

    # The sandbox probe and the bash zygote (both in a thread, mostly waiting on subprocesses) start
    # now, so they run while the SDK below is imported instead of after it: by the time the sandbox
    # is described for the startup log the probe has its answer (`Toolbox` asks for the zygote again,
    # which is then already there or on its way).
    zygote_client.prestart()
    from omega_mcp.cli.hub import hub_server
    from omega_mcp.sandbox.launch import describe_sandbox
    from omega_mcp.sandbox.layers import sandbox_layers, summary
    from omega_mcp.sandbox.servers import confined_servers
    from omega_mcp.server.stdio import run_stdio

    async with open_toolbox(config, args, early) as (toolbox, downstreams):
        policy = toolbox.policy
        sandbox: dict[str, Any] = describe_sandbox(policy)
        logger.info("%s", _sandbox_line(sandbox))
        confined = confined_servers(config.for_servers, launch_guard(config, policy))
        logger.info("%s", summary(sandbox_layers(policy, sandbox, confined)))
        for warning in sandbox["warnings"]:
            logger.warning("sandbox: %s", warning)
        server, profiles = hub_server(config, toolbox, downstreams, sandbox, clients=args.http, traced=traced)
        async with anyio.create_task_group() as tg:
            if profiles is not None:
                from omega_mcp.cli.hub import drain_on_sigterm, hub_operations, reload_on_sighup
                from omega_mcp.server.http import serve_http

                tokens, ops = hub_operations(config, server, toolbox, downstreams, policy)
                tg.start_soon(drain_on_sigterm, guard, ops, config.hub.drain_seconds, tg.cancel_scope)
                await tg.start(reload_on_sighup, config, policy, downstreams, tokens, profiles)
                await serve_http(
                    server,
                    host=args.host,
                    port=args.port,
                    token_file=policy.token_file,
                    sockets=sockets,
                    allowed_hosts=config.hub.allowed_hosts,
                    max_message_bytes=config.hub.max_message_mb << 20,
                    tokens=tokens,
                    ops=ops,
                    poll_seconds=config.hub.sse_poll_seconds,
                )
            else:
                tg.start_soon(guard.until_signalled, tg.cancel_scope)
                logger.info("serving MCP on stdio")
                await run_stdio(server, max_message_bytes=config.hub.max_message_mb << 20)
            tg.cancel_scope.cancel()
    return EXIT_OK


def _sandbox_line(sandbox: dict[str, Any]) -> str:
    """The effective sandbox in one stderr line."""
    bash = str(sandbox["bash"])
    if sandbox.get("confinement"):
        abi = f" ABI {sandbox['landlock_abi']}" if sandbox.get("landlock_abi") else ""
        bash += f" ({sandbox['confinement']}{abi}{', pid namespace' if sandbox.get('pid_namespace') else ''})"
    if sandbox.get("refusal"):
        bash += f": {sandbox['refusal']}"
    roots = ", ".join(sandbox["write_roots"])
    return f"sandbox: mode={sandbox['mode']}; bash {bash}; bash writes: {roots}; network: {sandbox['network']}"
