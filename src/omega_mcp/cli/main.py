"""The `omega-mcp` command: argument parsing, logging, config loading and dispatch to the command modules.

stdout is the MCP wire under `serve` (stdio), so everything else logs to stderr. Flags override
the config file, which overrides defaults. Exit codes: 0 success, 1 tool or agent failure,
2 usage or config error (one line naming the file, the key and the problem; never a traceback).
The command modules are imported by `_dispatch`, after the early start, and keep the SDK, proxy,
server, toolbox and agent imports inside their functions, so the downstream servers are spawned
before any of that loads (only for commands that can use them: `toolbox.needs_servers`). Run as
root, the commands that run tools print one warning line once the config is loaded: Landlock does
not protect other processes from root.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

import anyio

from omega_mcp.cli.common import DEFAULT_LOGIN_TIMEOUT, EXIT_FAILURE, EXIT_USAGE, UsageError, say
from omega_mcp.cli.signals import SignalGuard
from omega_mcp.cli.toolbox import needs_servers
from omega_mcp.cli.trust import check_trust, launch_guard
from omega_mcp.config import Config, load_config
from omega_mcp.errors import ConfigError, OmegaError, first_leaf
from omega_mcp.loglevels import name_levels
from omega_mcp.proxy.recursion import MARKER, started_by_omega
from omega_mcp.proxy.spawn import EarlyStarts
from omega_mcp.version import __version__

__all__ = ["main"]

logger = logging.getLogger("omega_mcp")


_CONFIG_HELP = (
    "servers.toml to use (default: $OMEGA_CONFIG, else ./servers.toml, else $OMEGA_HOME/servers.toml; "
    "none found: built-in tools only)"
)
_MODES = ("sandbox", "rx", "rwx")
_EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a command whose reader went away


def _add_common(
    parser: argparse.ArgumentParser, *, sandbox_flags: bool = True, config_help: str = _CONFIG_HELP
) -> None:
    parser.add_argument("--config", metavar="PATH", help=config_help)
    if sandbox_flags:
        parser.add_argument(
            "--mode",
            choices=_MODES,
            help="sandbox mode: sandbox (no network for bash), rx (network), rwx (write anywhere but the "
            "blocklist) (default: [sandbox] mode, else sandbox)",
        )
        parser.add_argument(
            "--workspace",
            metavar="DIR",
            help="where relative paths resolve and bash runs, created if missing "
            "(default: [sandbox] workspace, else $OMEGA_HOME/workspace)",
        )
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        help="stderr log level: debug, info, warning or error (default: info for serve, warning otherwise)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `omega-mcp` argument parser: every command, every flag with its help."""
    parser = argparse.ArgumentParser(
        prog="omega-mcp",
        description="A sandboxed MCP tool hub: built-in bash/read/write/edit, downstream MCP servers as "
        "mcp__<server>__<tool>, and an agent loop for HTTP LLM providers.",
        epilog="Exit codes: 0 success, 1 tool, server or agent failure, 2 usage or config error.",
    )
    parser.add_argument("--version", action="version", version=f"omega-mcp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default, --http for streamable HTTP)")
    _add_common(serve)
    serve.add_argument(
        "--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio"
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="HTTP bind address (default: 127.0.0.1; any other address requires the bearer token)",
    )
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default: 8765)")
    serve.add_argument(
        "--client-prefix",
        metavar="PREFIX",
        help="what the client puts before each tool name (Claude Code: mcp__omega__); names are shortened so "
        "prefix + name fits 64 characters (default: [hub] client_prefix, else none)",
    )
    serve.add_argument(
        "--names",
        choices=("full", "short"),
        help="export downstream tools as mcp__<server>__<tool> (full) or <server>__<tool> (short); the full "
        "name is always accepted (default: [hub] names, else full)",
    )

    attach = sub.add_parser(
        "attach",
        help="stdio MCP server for one client window, served by the user's shared hub for this config "
        "(started detached when none runs)",
    )
    attach.add_argument("--config", metavar="PATH", help=_CONFIG_HELP)
    attach.add_argument("--mode", choices=_MODES, help="this window's sandbox mode (default: the hub's)")
    attach.add_argument("--workspace", metavar="DIR", help="this window's workspace (default: the hub's)")
    attach.add_argument("--client-prefix", metavar="PREFIX", help="as for serve")
    attach.add_argument("--names", choices=("full", "short"), help="as for serve")
    attach.add_argument("--log-level", metavar="LEVEL", help="stderr log level of the hub this window starts")
    hub = sub.add_parser(
        "hub",
        help="the shared hub of a config: start (and wait until every server settled), status, stop",
        epilog="Exit codes: 0 done, 1 no hub runs (status, stop) or it did not start, 2 usage error.",
    )
    hub.add_argument("action", choices=("start", "status", "stop", "serve"), help="serve: run it here (internal)")
    hub.add_argument("--json", action="store_true", help="status: one JSON object")
    hub.add_argument("--config", metavar="PATH", help=_CONFIG_HELP)

    tools_help = "list the aggregated namespace with each server's status (exit 1 if an enabled server is down)"
    tools = sub.add_parser(
        "tools",
        help=tools_help,
        description=f"{tools_help[0].upper()}{tools_help[1:]}. The first line names the config file used.",
        epilog="Exit codes: 0 every enabled server connected, 1 an enabled server did not connect (its line "
        "says why), 2 usage or config error.",
    )
    _add_common(tools)
    tools.add_argument(
        "--json", action="store_true", help="print one JSON object (config, tools, servers, sandbox) instead of a table"
    )
    tools.add_argument(
        "--accept",
        metavar="SERVER[.TOOL]",
        help="accept the changed definitions of a server's tools (or of one tool) as they are offered now; "
        "a running omega serves them again at its next list or call",
    )

    call = sub.add_parser("call", help="call one tool and print the result (exit 1 if isError)")
    call.add_argument(
        "tool",
        metavar="TOOL",
        help="a name as `omega-mcp tools` lists it; a built-in (any case) starts no downstream server",
    )
    call.add_argument(
        "arguments", metavar="JSON_ARGS", nargs="?", default="{}", help="tool arguments as a JSON object (default: {})"
    )
    _add_common(call)

    search = sub.add_parser(
        "search",
        help="rank the namespace's tools for a query, as the hub's search_tools does",
        description="Rank the aggregated namespace for QUERY (keywords or a step description; select:NAME,NAME "
        "picks tools by name) and print the best tools, one per line: name, then description.",
        epilog="Exit codes: 0 searched (a query nothing matches prints a hint on stderr), 2 usage or config error.",
    )
    search.add_argument("query", metavar="QUERY", help="keywords, a step description, or select:NAME[,NAME...]")
    search.add_argument(
        "--limit", type=int, default=5, metavar="N", help="how many tools to show (default: 5; above 20 means 20)"
    )
    search.add_argument(
        "--server", metavar="NAME", help="only this server's tools (its servers.toml key; omega: the built-ins)"
    )
    search.add_argument(
        "--json",
        action="store_true",
        help='print {"tools": [{"name", "server", "description", "inputSchema"}, ...]} as search_tools returns it',
    )
    _add_common(search)

    agent = sub.add_parser("agent", help="run the agent loop with an HTTP LLM provider over the same tools")
    agent.add_argument(
        "prompt",
        metavar="PROMPT",
        nargs="?",
        help="the task for the model (default: read from stdin; when stdin is a terminal, an interactive "
        "conversation: Enter sends, Ctrl-C cancels a turn, Ctrl-D or /exit leaves)",
    )
    agent.add_argument(
        "--provider",
        choices=("openai", "anthropic", "ollama", "openrouter", "gemini"),
        help="LLM provider (default: [agent] provider in servers.toml)",
    )
    agent.add_argument(
        "--model",
        metavar="M",
        help="model name, or 'auto': classify the prompt on [agent] model_fast (no tools), then run on "
        "model_fast or model_complex (default: [agent] model, or auto with [agent] route = true, else the "
        "provider's default model)",
    )
    agent.add_argument(
        "--base-url",
        metavar="URL",
        help="provider endpoint (default: [agent] base_url, else the provider's *_BASE_URL or OLLAMA_HOST "
        "variable, else its public API)",
    )
    agent.add_argument(
        "--max-turns",
        type=int,
        metavar="N",
        help="model requests before giving up with exit 1 (default: [agent] max_turns, else 25)",
    )
    agent.add_argument("--no-tools", action="store_true", help="send no tools at all (and start no downstream server)")
    agent.add_argument(
        "--allow-tool",
        action="append",
        metavar="GLOB",
        help="offer only the tools matching GLOB, e.g. 'mcp__time__*' (repeatable; default: every tool)",
    )
    agent.add_argument(
        "--system",
        metavar="TEXT",
        help="system prompt replacing the built-in one ('' sends none) (default: the built-in prompt naming the "
        "workspace, sandbox mode, date and tool names, plus [agent] system_append)",
    )
    agent.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object {"output", "turns", "usage", "messages", "model", "route"} instead of the '
        "answer (never streamed)",
    )
    agent.add_argument(
        "--no-stream",
        action="store_true",
        help="print only the final answer on stdout, once it is complete (default: stream text to stdout as it "
        "arrives when stdout is a terminal or a pipe)",
    )
    resume = agent.add_mutually_exclusive_group()
    resume.add_argument(
        "--continue",
        dest="continue_latest",
        action="store_true",
        help="continue the most recent saved session (runs are saved in $OMEGA_HOME/sessions/)",
    )
    resume.add_argument("--resume", metavar="ID", help="continue the saved session ID (see --sessions)")
    agent.add_argument(
        "--sessions",
        action="store_true",
        help="list the saved sessions, newest first (id, time, provider, model, first prompt), and exit",
    )
    _add_common(agent)

    imp = sub.add_parser("import", help="add the mcpServers of a Claude Code / Claude Desktop JSON to servers.toml")
    imp.add_argument("source", metavar="JSON_FILE", help=".mcp.json, ~/.claude.json or claude_desktop_config.json")
    imp.add_argument("--overwrite", action="store_true", help="replace servers that already exist")
    imp.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    _add_common(
        imp,
        sandbox_flags=False,
        config_help="servers.toml to add to, created if missing (default: the one found by the lookup order, "
        "else $OMEGA_HOME/servers.toml)",
    )

    claude = sub.add_parser(
        "claude-config", help="print the JSON entry for Claude Code's .mcp.json (stdout holds only the JSON)"
    )
    _add_common(
        claude,
        sandbox_flags=False,
        config_help="servers.toml the entry passes to serve (default: the one found by the lookup order, if any)",
    )
    claude.add_argument(
        "--workspace",
        metavar="DIR",
        help="workspace written into the entry (default: the current directory, made absolute)",
    )
    claude.add_argument(
        "--mode",
        choices=_MODES,
        help="sandbox mode written into the entry (default: none written, so the config's applies)",
    )
    claude.add_argument(
        "--http",
        metavar="URL",
        help="point Claude Code at a running hub (e.g. http://127.0.0.1:8765/mcp) instead of starting omega; "
        "the hub has its own workspace and mode",
    )
    claude.add_argument(
        "--standalone",
        action="store_true",
        help="an entry that runs its own omega (serve) instead of attaching to the user's shared hub (attach)",
    )

    login = sub.add_parser(
        "login",
        help='log in to a remote server with auth = "oauth" (browser flow; tokens in $OMEGA_HOME/state/oauth/)',
        epilog="Exit codes: 0 logged in, 1 the login failed or timed out, 2 no such server or no OAuth for it.",
    )
    login.add_argument("server", metavar="SERVER", help='the [servers.NAME] to log in to (a url with auth = "oauth")')
    login.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_LOGIN_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the browser to come back (default: {DEFAULT_LOGIN_TIMEOUT:g})",
    )
    _add_common(login, sandbox_flags=False)
    logout = sub.add_parser("logout", help="forget a server's OAuth tokens and registered client")
    logout.add_argument("server", metavar="SERVER", help="the [servers.NAME] to log out of")
    _add_common(logout, sandbox_flags=False)
    return parser


class _VisibleFormatter(logging.Formatter):
    """Log lines quote downstream servers and models: their control characters are shown, not run."""

    def format(self, record: logging.LogRecord) -> str:
        from omega_mcp.visible import visible

        return visible(super().format(record))


_CLOSED_STREAM_ERRORS = frozenset({"BrokenResourceError", "ClosedResourceError"})


class _ClosedStreamNoise(logging.Filter):
    """Drops the SDK HTTP client's `Error parsing SSE message` traceback when what failed was handing an event
    to a read stream already closed (a connection shut down mid-event, as `login` does once it has its tools:
    the SDK's own comment says it is no parse failure); the user is told nothing wrong happened otherwise."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        closed = exc is not None and type(exc).__name__ in _CLOSED_STREAM_ERRORS
        return not (closed and record.name == "mcp.client.streamable_http" and type(exc).__module__.startswith("anyio"))


def _setup_logging(level_name: str) -> None:
    level = logging.getLevelNamesMapping().get(level_name.upper())
    if level is None:
        raise UsageError(f"--log-level: unknown level {level_name!r} (use debug, info, warning or error)")
    reconfigure = getattr(sys.stderr, "reconfigure", None)
    if callable(reconfigure):
        # A log line quoting a downstream's unicode must not become a logging traceback on a
        # latin-1 or ASCII terminal.
        reconfigure(errors="backslashreplace")
    name_levels()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_VisibleFormatter("omega-mcp %(levelname)s %(name)s: %(message)s"))
    # The handler's own level keeps stderr at the chosen level even when an MCP client asks for
    # debug logs (logging/setLevel lowers omega's logger level, not this handler's).
    handler.setLevel(level)
    handler.addFilter(_ClosedStreamNoise())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.WARNING))
    logger.setLevel(level)


async def _dispatch(config: Config, args: argparse.Namespace, guard: SignalGuard, early: EarlyStarts) -> int:
    if args.command == "serve":
        from omega_mcp.cli.serve import run_serve

        return await run_serve(config, args, guard, early)
    from omega_mcp.cli.agent import converses, run_agent

    if converses(args):  # the conversation handles SIGINT itself: Ctrl-C cancels a turn, not omega
        return await run_agent(config, args, sys.stdout, early, guard)
    # A one-shot command stops on SIGINT/SIGTERM through the same bounded cleanup (its bash tree is
    # killed) and exits 128 + the signal, printing no half result. Without this, KeyboardInterrupt
    # lands at a random await and a cut-short bash call could be reported as a timeout.
    received: list[int] = []
    code = EXIT_FAILURE
    async with anyio.create_task_group() as tg:
        await tg.start(guard.until_signalled, tg.cancel_scope, received)
        code = await _one_shot(config, args, early)
        tg.cancel_scope.cancel()
    return 128 + received[0] if received else code


async def _one_shot(config: Config, args: argparse.Namespace, early: EarlyStarts) -> int:
    from omega_mcp.cli.agent import run_agent
    from omega_mcp.cli.login import run_login, run_logout
    from omega_mcp.cli.oneshot import run_call, run_search, run_tools
    from omega_mcp.cli.register import run_claude_config, run_import

    out = sys.stdout
    match args.command:
        case "tools":
            return await run_tools(config, args, out, early)
        case "call":
            return await run_call(config, args, out, early)
        case "search":
            return await run_search(config, args, out, early)
        case "agent":
            return await run_agent(config, args, out, early)
        case "import":
            return run_import(config, args, out)
        case "login":
            return await run_login(config, args, out)
        case "logout":
            return run_logout(config, args, out)
        case _:
            return run_claude_config(config, args, out)


def _run(config: Config, args: argparse.Namespace, guard: SignalGuard, early: EarlyStarts) -> int:
    try:
        try:
            return anyio.run(_dispatch, config, args, guard, early)
        except BaseExceptionGroup as group:
            raise first_leaf(group) from None
    except BrokenPipeError:
        # `omega-mcp tools | head`: the reader left. Stop quietly, as `cat` would (exit 128 + SIGPIPE),
        # with stdout pointed at /dev/null so the interpreter's final flush cannot complain either.
        with contextlib.suppress(OSError, AttributeError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _EXIT_BROKEN_PIPE


def _load(args: argparse.Namespace) -> Config:
    if args.command == "import" and args.config and not os.path.lexists(os.path.expanduser(args.config)):
        return Config()  # `import` creates the file it is pointed at
    return load_config(args.config)


def _refuse_recursion(args: argparse.Namespace) -> None:
    """`serve` started (however indirectly) as a downstream server of another omega stops at once."""
    parent = started_by_omega()
    if args.command == "serve" and parent is not None:
        raise UsageError(
            f"this omega was started by another omega (pid {parent}, ${MARKER}) as one of its servers: "
            "omega never runs itself; remove that entry from the other omega's servers.toml"
        )


def root_warning(euid: int | None = None) -> str | None:
    """The warning line for running as root (`euid` defaults to the process's), or None."""
    if sys.platform == "win32" or (os.geteuid() if euid is None else euid) != 0:
        return None
    return (
        "omega-mcp: warning: running as root: bash runs as an unprivileged user in its namespace, but "
        "where there are no namespaces Landlock's ptrace scoping does not protect other processes from root, "
        "and unconfined downstream servers get root's rights; run omega as a normal user"
    )


def _warn_if_root(args: argparse.Namespace) -> None:
    """Once per run, for the commands that run tools (and unless --log-level hides warnings)."""
    line = root_warning()
    if (
        line is not None
        and args.command in ("serve", "tools", "call", "search", "agent")
        and logger.isEnabledFor(logging.WARNING)
    ):
        say(line)


def _check_std_streams(args: argparse.Namespace) -> None:
    """Refuse to start without the standard streams the command needs (Python sets a closed one to None)."""
    needed = [("stdout", sys.stdout)]
    if args.command == "serve" and not args.http:
        needed.append(("stdin", sys.stdin))
    closed = [name for name, stream in needed if stream is None]
    if closed:
        raise UsageError(f"{' and '.join(closed)} is closed; `omega-mcp {args.command}` needs it")


def _shared_hub(args: argparse.Namespace) -> None:
    """`hub serve` runs as `serve` does (its checks, early start, toolbox), on the hub's socket."""
    args.command, args.shared_hub, args.http, args.log_level = "serve", True, False, None
    args.mode = args.workspace = None
    # The naming of the window that started it (cli/attach.py), not passed on to the servers.
    args.client_prefix = os.environ.pop("OMEGA_HUB_CLIENT_PREFIX", None)
    args.names = os.environ.pop("OMEGA_HUB_NAMES", None) or None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["attach"]:
        from omega_mcp.cli.attach import main as attach

        return attach(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "hub" and args.action != "serve":
        from omega_mcp.cli.hubd import hub_command

        try:
            return hub_command(args, sys.stdout)
        except UsageError as exc:
            say(f"omega-mcp: error: {exc}")
            return EXIT_USAGE
    if args.command == "hub":
        _shared_hub(args)
    if args.log_level is None:
        # The hub reports its startup and sandbox on stderr; one-shot commands stay quiet.
        args.log_level = "info" if args.command == "serve" else "warning"
    guard = SignalGuard()
    try:
        _check_std_streams(args)
        _setup_logging(args.log_level)
        _refuse_recursion(args)
        config = _load(args)
        if args.command in ("serve", "tools", "call", "search", "agent", "login"):
            check_trust(config, args)  # before any server starts: a planted config's never runs
        _warn_if_root(args)
        guard.hold()  # from here on a signal must reach the cleanup that stops the servers
        with EarlyStarts() as early:
            if needs_servers(args):
                # Downstream servers start loading now, while omega itself is still importing the SDK
                # (not for a command that cannot use them: claude-config, import, a built-in call,
                # agent --no-tools).
                early.start(config.for_servers, serving=args.command == "serve", guard=launch_guard(config, args))
            return _run(config, args, guard, early)
    except (ConfigError, UsageError) as exc:
        for line in str(exc).splitlines() or [""]:  # a ConfigError may carry several problems, one a line
            say(f"omega-mcp: error: {line}")
        return EXIT_USAGE
    except OmegaError as exc:
        say(f"omega-mcp: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
