"""The `omega-mcp` command: argument parsing and wiring only.

stdout is the MCP wire under `serve` (stdio), so everything else logs to stderr. Flags override
the config file, which overrides defaults. Exit codes: 0 success, 1 tool or agent failure,
2 usage or config error (one line naming the file, the key and the problem; never a traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import signal
import sys
import threading
from collections.abc import AsyncGenerator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

import anyio
from anyio.abc import TaskStatus

from omega_mcp import __version__
from omega_mcp.config import Config, load_config
from omega_mcp.errors import ConfigError, OmegaError, first_leaf
from omega_mcp.proxy import spawn

if TYPE_CHECKING:
    from omega_mcp.proxy.supervisor import ServerStatus

__all__ = ["main"]

logger = logging.getLogger("omega_mcp")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    """A bad flag or argument value found after parsing (exit 2)."""


def _add_common(parser: argparse.ArgumentParser, *, sandbox_flags: bool = True) -> None:
    parser.add_argument("--config", metavar="PATH", help="servers.toml to use (default: lookup order in the README)")
    if sandbox_flags:
        parser.add_argument("--mode", choices=("sandbox", "rx", "rwx"), help="sandbox mode (overrides the config)")
        parser.add_argument("--workspace", metavar="DIR", help="workspace directory (overrides the config)")
    parser.add_argument(
        "--log-level", metavar="LEVEL", help="stderr log level: debug, info, warning, error (default: info for serve)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omega-mcp",
        description="A sandboxed MCP tool hub: built-in bash/read/write/edit, downstream MCP servers as "
        "mcp__<server>__<tool>, and an agent loop for HTTP LLM providers.",
    )
    parser.add_argument("--version", action="version", version=f"omega-mcp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default, --http for streamable HTTP)")
    _add_common(serve)
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")

    tools = sub.add_parser("tools", help="list the aggregated namespace with each server's status")
    _add_common(tools)
    tools.add_argument("--json", action="store_true", help="print JSON instead of a table")

    call = sub.add_parser("call", help="call one tool and print the result (exit 1 if isError)")
    call.add_argument("tool", metavar="TOOL")
    call.add_argument("arguments", metavar="JSON_ARGS", nargs="?", default="{}", help="tool arguments as a JSON object")
    _add_common(call)

    agent = sub.add_parser("agent", help="run the agent loop with an HTTP LLM provider over the same tools")
    agent.add_argument("prompt", metavar="PROMPT")
    agent.add_argument("--provider", choices=("openai", "anthropic", "ollama", "openrouter", "gemini"))
    agent.add_argument("--model", metavar="M")
    agent.add_argument("--base-url", metavar="URL")
    agent.add_argument("--max-turns", type=int, metavar="N")
    agent.add_argument("--no-tools", action="store_true", help="send no tools at all")
    agent.add_argument("--allow-tool", action="append", metavar="GLOB", help="limit the tools (repeatable)")
    agent.add_argument("--system", metavar="TEXT", help="system prompt")
    agent.add_argument("--json", action="store_true", help='print {"output","turns","usage","messages"}')
    _add_common(agent)

    imp = sub.add_parser("import", help="add the mcpServers of a Claude Code / Claude Desktop JSON to servers.toml")
    imp.add_argument("source", metavar="JSON_FILE", help=".mcp.json, ~/.claude.json or claude_desktop_config.json")
    imp.add_argument("--overwrite", action="store_true", help="replace servers that already exist")
    imp.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    _add_common(imp, sandbox_flags=False)

    claude = sub.add_parser("claude-config", help="print the JSON to paste into Claude Code settings")
    _add_common(claude, sandbox_flags=False)
    claude.add_argument("--http", metavar="URL", help="point Claude Code at a running hub instead of stdio")
    return parser


def _setup_logging(level_name: str) -> None:
    level = logging.getLevelNamesMapping().get(level_name.upper())
    if level is None:
        raise _UsageError(f"--log-level: unknown level {level_name!r} (use debug, info, warning or error)")
    reconfigure = getattr(sys.stderr, "reconfigure", None)
    if callable(reconfigure):
        # A log line quoting a downstream's unicode must not become a logging traceback on a
        # latin-1 or ASCII terminal.
        reconfigure(errors="backslashreplace")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("omega-mcp %(levelname)s %(name)s: %(message)s"))
    # The handler's own level keeps stderr at the chosen level even when an MCP client asks for
    # debug logs (logging/setLevel lowers omega's logger level, not this handler's).
    handler.setLevel(level)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.WARNING))
    logger.setLevel(level)


def _policy(config: Config, args: argparse.Namespace) -> Any:
    from omega_mcp.sandbox.policy import SandboxPolicy

    workspace = Path(os.path.expanduser(args.workspace)).absolute() if getattr(args, "workspace", None) else None
    return SandboxPolicy.from_config(config, mode=getattr(args, "mode", None), workspace=workspace)


def _ensure_workspace(workspace: Path, config: Config, args: argparse.Namespace) -> None:
    """Create the workspace, or raise a ConfigError naming where it was set (flag, file or default)."""
    if getattr(args, "workspace", None):
        where: dict[str, str | None] = {"key": "--workspace"}
    elif config.sandbox.workspace is not None:
        where = {"path": str(config.path) if config.path else None, "key": "sandbox.workspace"}
    else:
        where = {"key": "workspace (default: $OMEGA_HOME/workspace)"}
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{workspace} exists and is not a directory", **where) from None
    except NotADirectoryError:
        raise ConfigError(f"{workspace}: a component of its path is not a directory", **where) from None
    except OSError as exc:
        raise ConfigError(f"cannot create the workspace {workspace}: {exc.strerror or exc}", **where) from None


SERVE_STARTUP_WAIT_SECONDS = 10.0
"""How long the first tools/list of `serve` waits for slow downstream servers; the ones that
arrive later are announced with notifications/tools/list_changed."""


@asynccontextmanager
async def _open_toolbox(config: Config, args: argparse.Namespace) -> AsyncGenerator[Any]:
    """A started Toolbox over the built-ins and the configured downstream servers.

    The downstream servers connect in the background, in parallel. Under `serve` a listing waits
    for them at most SERVE_STARTUP_WAIT_SECONDS; one-shot commands (`tools`, `call`, `agent`)
    wait until each has connected or failed (within its own connect timeout).
    """
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.toolbox import Toolbox

    policy = _policy(config, args)
    _ensure_workspace(policy.workspace, config, args)
    startup_wait = SERVE_STARTUP_WAIT_SECONDS if args.command == "serve" else None
    async with AsyncExitStack() as stack:
        downstreams = None
        if config.servers:
            downstreams = Downstreams.from_config(config, startup_wait_seconds=startup_wait)
            await stack.enter_async_context(downstreams)
        yield await stack.enter_async_context(Toolbox(policy, downstreams))


# -- commands ------------------------------------------------------------------------------------


_held_signals: list[int] = []
"""SIGINT/SIGTERM that arrived while no receiver listened (startup, cleanup): noted, acted on later."""


def _note_signal(signum: int, frame: object) -> None:
    _held_signals.append(signum)


def _hold_signals() -> None:
    """Note SIGINT/SIGTERM instead of dying of them: dying would orphan the downstream servers.

    Installed before the first server is started, and again once a receiver is gone, so that a
    signal during startup cancels the command as soon as it listens, and one during the (bounded)
    cleanup cannot cut it short.
    """
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _note_signal)


async def _until_signalled(
    scope: anyio.CancelScope,
    received: list[int] | None = None,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Cancel `scope` on SIGINT/SIGTERM, so shutdown runs the normal (bounded) cleanup path."""
    try:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            if _held_signals:
                signum = _held_signals[0]  # it came while omega was starting
            else:
                signum = await anext(aiter(signals))
            logger.info("received %s, shutting down", signal.Signals(signum).name)
            if received is not None:
                received.append(signum)
            scope.cancel()
    finally:
        _hold_signals()


async def _serve(config: Config, args: argparse.Namespace) -> int:
    from omega_mcp.sandbox.launch import describe_sandbox
    from omega_mcp.server.instructions import hub_instructions
    from omega_mcp.server.server import build_server, run_stdio

    if args.http and not 0 < args.port < 65536:
        raise _UsageError(f"--port: {args.port} is not a TCP port (1-65535)")
    async with _open_toolbox(config, args) as toolbox:
        policy = toolbox.policy
        sandbox: dict[str, Any] = describe_sandbox(policy)
        logger.info("%s", _sandbox_line(sandbox))
        for warning in sandbox["warnings"]:
            logger.warning("sandbox: %s", warning)
        server = build_server(toolbox, instructions=hub_instructions(policy, sandbox, list(config.servers)))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_signalled, tg.cancel_scope)
            if args.http:
                from omega_mcp.server.http import serve_http

                await serve_http(server, host=args.host, port=args.port, token_file=policy.token_file)
            else:
                logger.info("serving MCP on stdio")
                await run_stdio(server)
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


def _tool_json(tool: Any) -> dict[str, Any]:
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def _server_line(status: ServerStatus) -> str:
    if status.state == "connected":
        return f"{status.server_name}: connected ({len(status.tools)} tools)"
    if status.state == "disabled":
        return f"{status.server_name}: disabled"
    retry = f"; retrying in {math.ceil(status.retry_in_seconds)} s" if status.retry_in_seconds is not None else ""
    return f"{status.server_name}: {status.state}: {status.reason or 'not connected'}{retry}"


async def _tools(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    from omega_mcp.names import Route
    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.sandbox.launch import describe_sandbox

    async with _open_toolbox(config, args) as toolbox:
        tools = await toolbox.list_tools()
        policy = toolbox.policy
        namespace = toolbox.namespace()
        downstreams = toolbox.downstreams
        statuses = downstreams.statuses() if isinstance(downstreams, Downstreams) else []
        exported = {s.server_name: [namespace.name_of(Route(s.server_name, t)) for t in s.tools] for s in statuses}
        if args.json:
            servers = {
                s.server_name: {
                    "state": s.state,
                    "reason": s.reason,
                    "retry_in_seconds": s.retry_in_seconds,
                    "tools": exported[s.server_name],
                }
                for s in statuses
            }
            payload = {
                "tools": [_tool_json(t) for t in tools],
                "servers": servers,
                "sandbox": {
                    **describe_sandbox(policy),
                    "workspace": str(policy.workspace),
                    "file_write_roots": [str(p) for p in policy.file_write_roots],
                },
            }
            out.write(json.dumps(payload, indent=2) + "\n")
            return EXIT_OK
        by_name = {t.name: t for t in tools}
        width = max(len(name) for name in by_name)
        builtins = [t.name for t in tools if namespace.resolve(t.name) == Route(None, t.name)]
        groups = [(f"built-in (sandbox mode: {policy.mode}, workspace: {policy.workspace})", builtins)]
        groups += [(_server_line(s), exported[s.server_name]) for s in statuses]
        for heading, names in groups:
            out.write(heading + "\n")
            for name in names:
                description = (by_name[name].description or "").strip()
                summary = description.splitlines()[0] if description else ""
                out.write(f"  {name:<{width}}  {summary}\n")
    return EXIT_OK


def _render_block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    return json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True))


async def _call(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    from omega_mcp.errors import UnknownToolError

    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"JSON_ARGS is not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise _UsageError('JSON_ARGS must be a JSON object, e.g. \'{"command": "ls"}\'')
    async with _open_toolbox(config, args) as toolbox:
        try:
            result = await toolbox.call_tool(args.tool, arguments)  # pyright: ignore[reportUnknownArgumentType]
        except UnknownToolError as exc:
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
        _say(
            "omega-mcp: note: background shells live only as long as the omega that started them, and "
            "`omega-mcp call` exits after one call; use `omega-mcp serve` (an MCP client) for background work"
        )
    return EXIT_FAILURE if result.is_error else EXIT_OK


def _import(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    from omega_mcp.importer import import_servers

    named = Path(os.path.expanduser(args.config)).absolute() if args.config else None
    target = named or config.path or config.home / "servers.toml"
    report = import_servers(Path(args.source).expanduser(), target, overwrite=args.overwrite, dry_run=args.dry_run)
    verb = "would add" if args.dry_run else "added"
    for old, new in report.renamed.items():
        out.write(f"renamed {old!r} to {new!r} (server keys allow letters, digits, '-' and '_', no '__')\n")
    for name in report.added:
        out.write(f"{verb} [servers.{name}]\n")
    for name in report.replaced:
        out.write(f"{'would replace' if args.dry_run else 'replaced'} [servers.{name}]\n")
    for name in report.skipped:
        out.write(f"kept the existing [servers.{name}] (use --overwrite to replace it)\n")
    for name, why in report.unsupported.items():
        out.write(f"skipped {name!r}: {why}\n")
    out.write(f"{'dry run: nothing written to' if args.dry_run else 'wrote'} {target}\n")
    return EXIT_OK


def _claude_config(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    if args.http:
        entry: dict[str, Any] = {
            "type": "http",
            "url": args.http,
            "headers": {"Authorization": "Bearer ${OMEGA_TOKEN}"},
        }
    else:
        script = Path(sys.executable).with_name("omega-mcp")
        found = str(script) if script.exists() else shutil.which("omega-mcp")
        command, prefix = (found, []) if found else (sys.executable, ["-m", "omega_mcp"])
        cli_args = [*prefix, "serve"]
        if config.path is not None:
            cli_args += ["--config", str(config.path)]
        entry = {"type": "stdio", "command": command, "args": cli_args, "env": {}}
    out.write(json.dumps({"mcpServers": {"omega": entry}}, indent=2) + "\n")
    return EXIT_OK


async def _agent(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    from omega_mcp.agent.command import run_agent_command

    async with _open_toolbox(config, args) as toolbox:
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


async def _dispatch(config: Config, args: argparse.Namespace) -> int:
    if args.command == "serve":
        return await _serve(config, args)
    # A one-shot command stops on SIGINT/SIGTERM through the same bounded cleanup (its bash tree is
    # killed) and exits 128 + the signal, printing no half result. Without this, KeyboardInterrupt
    # lands at a random await and a cut-short bash call could be reported as a timeout.
    received: list[int] = []
    code = EXIT_FAILURE
    async with anyio.create_task_group() as tg:
        await tg.start(_until_signalled, tg.cancel_scope, received)
        code = await _one_shot(config, args)
        tg.cancel_scope.cancel()
    return 128 + received[0] if received else code


async def _one_shot(config: Config, args: argparse.Namespace) -> int:
    out = sys.stdout
    match args.command:
        case "tools":
            return await _tools(config, args, out)
        case "call":
            return await _call(config, args, out)
        case "agent":
            return await _agent(config, args, out)
        case "import":
            return _import(config, args, out)
        case _:
            return _claude_config(config, args, out)


def _run(config: Config, args: argparse.Namespace) -> int:
    try:
        return anyio.run(_dispatch, config, args)
    except BaseExceptionGroup as group:
        raise first_leaf(group) from None


def _load(args: argparse.Namespace) -> Config:
    if args.command == "import" and args.config and not os.path.lexists(os.path.expanduser(args.config)):
        return Config()  # `import` creates the file it is pointed at
    return load_config(args.config)


def _say(line: str) -> None:
    if sys.stderr is not None:  # a closed stderr: the exit code is all that is left
        sys.stderr.write(line + "\n")


def _check_std_streams(args: argparse.Namespace) -> None:
    """Refuse to start without the standard streams the command needs (Python sets a closed one to None)."""
    needed = [("stdout", sys.stdout)]
    if args.command == "serve" and not args.http:
        needed.append(("stdin", sys.stdin))
    closed = [name for name, stream in needed if stream is None]
    if closed:
        raise _UsageError(f"{' and '.join(closed)} is closed; `omega-mcp {args.command}` needs it")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.log_level is None:
        # The hub reports its startup and sandbox on stderr; one-shot commands stay quiet.
        args.log_level = "info" if args.command == "serve" else "warning"
    try:
        _check_std_streams(args)
        _setup_logging(args.log_level)
        config = _load(args)
        _hold_signals()  # from here on a signal must reach the cleanup that stops the servers
        if args.command != "claude-config":
            # Downstream servers start loading now, while omega itself is still importing the SDK.
            spawn.prespawn(config)
        try:
            return _run(config, args)
        finally:
            spawn.discard_all()
    except (ConfigError, _UsageError) as exc:
        _say(f"omega-mcp: error: {exc}")
        return EXIT_USAGE
    except OmegaError as exc:
        _say(f"omega-mcp: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
