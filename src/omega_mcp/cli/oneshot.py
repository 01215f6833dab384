"""`omega-mcp tools` and `omega-mcp call`: look at the aggregated namespace, or call one tool, from a shell.

Both are one-shot: they start the toolbox, do their one thing and exit. `tools` waits until every
downstream server has connected or failed; `call` waits only for the server its tool belongs to
(and for all of them only when the name is unknown, to suggest the closest names). Results go to
stdout (a table, JSON, or the tool's content blocks), notes to stderr. `tools` says first which
config file it used, shows a server that did not connect as `failed: <reason>` (it looks once: no
retry is announced, none happens) and exits 1 when any enabled server is not connected, so a script
can check a setup. `call` exits 1 when the result is an error or the tool is unknown, and a
built-in tool starts no downstream server at all.
The SDK-backed modules are imported inside the functions, after `EarlyStarts.start` (proxy/spawn.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO, cast

from omega_mcp.cli.common import EXIT_FAILURE, EXIT_OK, UsageError, say
from omega_mcp.cli.toolbox import launch_guard, needs_servers, open_toolbox
from omega_mcp.config import Config
from omega_mcp.proxy.spawn import EarlyStarts

if TYPE_CHECKING:
    from omega_mcp.proxy.supervisor import ServerStatus

__all__ = ["run_call", "run_search", "run_tools"]


def _tool_json(tool: Any) -> dict[str, Any]:
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def _state(status: ServerStatus) -> str:
    """connected, disabled or failed: what one look found (a server still starting has not connected)."""
    return status.state if status.state in ("connected", "disabled") else "failed"


def _reason(status: ServerStatus) -> str | None:
    if _state(status) != "failed":
        return status.reason if status.state == "connected" else None  # connected, but a login is needed
    if status.reason:
        return status.reason
    return "did not connect in time" if status.state == "connecting" else "not connected"


def _server_line(status: ServerStatus, confinement: dict[str, object]) -> str:
    if status.state == "connected":
        how = (", confined" + (" with network" if confinement["network"] else "")) if confinement["confined"] else ""
        needs = f"; {status.reason}" if status.reason else ""
        return f"{status.server_name}: connected ({len(status.tools)} tools{how}){needs}"
    if status.state == "disabled":
        return f"{status.server_name}: disabled"
    return f"{status.server_name}: failed: {_reason(status)}"


async def run_tools(config: Config, args: argparse.Namespace, out: TextIO, early: EarlyStarts | None = None) -> int:
    """Print the tools grouped by origin with each server's status (or all of it as JSON with --json)."""
    from omega_mcp.cli.hub import check_clients
    from omega_mcp.names import Route
    from omega_mcp.sandbox.launch import describe_sandbox
    from omega_mcp.sandbox.layers import sandbox_layers
    from omega_mcp.sandbox.servers import confined_servers, describe_confinement, server_policy

    check_clients(config)  # the team configs `serve --http` refuses, refused here too
    accept = getattr(args, "accept", None)
    if accept is not None:
        server_name = accept.partition(".")[0]
        if server_name not in config.servers:
            known = ", ".join(config.servers) or "none"
            raise UsageError(f"--accept {accept}: no server {server_name!r} in the config (servers: {known})")
        if not config.servers[server_name].pin:
            raise UsageError(f"--accept {accept}: server {server_name} has pin = false: nothing of it is pinned")
    async with open_toolbox(config, args, early) as (toolbox, downstreams):
        tools = await toolbox.list_tools()  # once every server has connected or failed
        if accept is not None:
            return _accept(downstreams, accept, out)
        policy = toolbox.policy
        namespace = toolbox.namespace()
        statuses = downstreams.statuses()
        exported = {s.server_name: [namespace.name_of(Route(s.server_name, t)) for t in s.tools] for s in statuses}
        pins = downstreams.pins
        changed = {
            namespace.name_of(Route(s.server_name, t))
            for s in statuses
            for t in (pins.changed(s.server_name) if pins is not None else ())
        }
        code = EXIT_FAILURE if any(_state(s) == "failed" for s in statuses) else EXIT_OK
        guard = launch_guard(config, policy)
        confined = {
            s.server_name: describe_confinement(server_policy(config.for_servers, s.server_name, guard))
            for s in statuses
        }
        if args.json:
            servers = {
                s.server_name: {
                    "state": _state(s),
                    "reason": _reason(s),
                    "tools": exported[s.server_name],
                    "changed": [n for n in exported[s.server_name] if n in changed],
                    "sandbox": confined[s.server_name],
                }
                for s in statuses
            }
            sandbox = describe_sandbox(policy)
            payload = {
                "config": str(config.path) if config.path is not None else None,
                "tools": [_tool_json(t) for t in tools],
                "servers": servers,
                "sandbox": {
                    **sandbox,
                    "layers": sandbox_layers(policy, sandbox, confined_servers(config.for_servers, guard)),
                    "workspace": str(policy.workspace),
                    "file_write_roots": [str(p) for p in policy.file_write_roots],
                },
            }
            out.write(json.dumps(payload, indent=2) + "\n")
            return code
        out.write(f"config: {config.path if config.path is not None else 'none (built-in tools only)'}\n")
        by_name = {t.name: t for t in tools}
        width = max(len(name) for name in by_name)
        builtins = [t.name for t in tools if namespace.resolve(t.name) == Route(None, t.name)]
        groups = [(f"built-in (sandbox mode: {policy.mode}, workspace: {policy.workspace})", builtins)]
        groups += [(_server_line(s, confined[s.server_name]), exported[s.server_name]) for s in statuses]
        for heading, names in groups:
            out.write(heading + "\n")
            for name in names:
                description = (by_name[name].description or "").strip()
                summary = description.splitlines()[0] if description else ""
                if name in changed:
                    summary = f"changed: {summary}"
                out.write(f"  {name:<{width}}  {summary}\n")
    return code


def _accept(downstreams: Any, accept: str, out: TextIO) -> int:
    """`tools --accept SERVER[.TOOL]`: pin the definitions the server offers now (it must be connected)."""
    server_name, _, tool_name = accept.partition(".")
    status = next(s for s in downstreams.statuses() if s.server_name == server_name)
    if status.state != "connected":
        say(
            f"omega-mcp: --accept {accept}: server {server_name} is not connected ({_reason(status)}); nothing accepted"
        )
        return EXIT_FAILURE
    if tool_name and tool_name not in status.tools:
        raise UsageError(f"--accept {accept}: server {server_name} offers no tool {tool_name!r}")
    accepted = downstreams.pins.accept(server_name, tool_name or None)
    for name in accepted:
        out.write(f"accepted {server_name}.{name}\n")
    if not accepted:
        out.write(f"nothing changed in {accept}: its pins match what it offers\n")
    return EXIT_OK


def _render_block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    return json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True))


async def run_call(config: Config, args: argparse.Namespace, out: TextIO, early: EarlyStarts | None = None) -> int:
    """Call one tool and print its result; exit 1 if the result is an error or the tool is unknown."""
    from omega_mcp.errors import DownstreamRefusedError, UnknownToolError

    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise UsageError(f"JSON_ARGS is not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise UsageError('JSON_ARGS must be a JSON object, e.g. \'{"command": "ls"}\'')
    async with open_toolbox(config, args, early, with_servers=needs_servers(args)) as (toolbox, downstreams):
        try:
            try:
                result = await toolbox.call_tool(args.tool, arguments)  # pyright: ignore[reportUnknownArgumentType]
            except UnknownToolError:
                if downstreams.ready:
                    raise
                await downstreams.wait_ready()  # the name is unknown: look once more with every server in
                result = await toolbox.call_tool(args.tool, arguments)  # pyright: ignore[reportUnknownArgumentType]
        except (UnknownToolError, DownstreamRefusedError) as exc:
            sys.stderr.write(f"omega-mcp: {exc}\n")
            return EXIT_FAILURE
    parts = [_render_block(block) for block in result.content]
    if result.structured_content is not None and not any(getattr(b, "type", None) == "text" for b in result.content):
        parts.append(json.dumps(result.structured_content, indent=2))
    text = "\n".join(parts)
    out.write(text + ("" if text.endswith("\n") or not text else "\n"))
    if args.tool.lower() in ("bash_output", "kill_shell") or (
        args.tool.lower() == "bash" and cast(dict[str, Any], arguments).get("run_in_background") is True
    ):
        # Each `call` is a fresh omega that exits after one tool call, taking its shells with it.
        say(
            "omega-mcp: note: background shells live only as long as the omega that started them, and "
            "`omega-mcp call` exits after one call; use `omega-mcp serve` (an MCP client) for background work"
        )
    return EXIT_FAILURE if result.is_error else EXIT_OK


async def run_search(config: Config, args: argparse.Namespace, out: TextIO, early: EarlyStarts | None = None) -> int:
    """Rank the namespace for QUERY as `search_tools` does; print `name  description` lines, or the
    `structuredContent` with --json. A query nothing matches prints a hint on stderr and exits 0."""
    from omega_mcp.toolsearch import MAX_LIMIT, ToolFinder, entries_of, found_result

    if args.limit < 1:
        raise UsageError(f"--limit: must be at least 1, got {args.limit}")
    server = getattr(args, "server", None)
    if server is not None and not server.strip():
        raise UsageError("--server: give a server's name (its servers.toml key), or leave it out")
    async with open_toolbox(config, args, early) as (toolbox, downstreams):
        tools = await toolbox.list_tools()
        namespace = toolbox.namespace()

        def server_of(name: str) -> str | None:
            route = namespace.resolve(name)
            return route.server_name if route is not None else None

        def exported(name: str) -> str | None:
            route = namespace.resolve(name)
            return namespace.name_of(route) if route is not None else None

        finder = ToolFinder()
        finder.update(entries_of(tools, server_of))
        found = finder.run(args.query, min(args.limit, MAX_LIMIT), exported, server=server.strip() if server else None)
        failed = [s.server_name for s in downstreams.statuses() if _state(s) == "failed"]
    if failed:
        say(f"omega-mcp: note: not searched (did not connect): {', '.join(failed)}")
    if args.json:
        out.write(json.dumps(found_result(found).structured_content, indent=2) + "\n")
    else:
        width = max((len(e.name) for e in found.entries), default=0)
        for entry in found.entries:
            summary = " ".join((entry.tool.description or "").split())[:160]
            out.write(f"{entry.name:<{width}}  {summary}".rstrip() + "\n")
    # What search_tools' text says besides the tools (a hint, a weak match, unknown names) goes to stderr.
    listed = {e.name for e in found.entries}
    for line in _text_of(found_result(found)).splitlines():
        if line.split(":", 1)[0].split(" [", 1)[0] not in listed:
            say(f"omega-mcp: {line}")
    return EXIT_OK


def _text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)
