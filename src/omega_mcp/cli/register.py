"""`omega-mcp import` and `omega-mcp claude-config`: connect omega with Claude Code, in both directions.

`import` copies the `mcpServers` of a Claude JSON file into servers.toml (the work is in
`omega_mcp.cli.importer`); `claude-config` prints the entry that points Claude Code at omega: over
stdio with the project as the workspace (`--workspace`, default the current directory, since Claude
Code starts the server there), or at a hub with `--http` (its token hint on stderr; stdout stays pure
JSON). Neither starts the toolbox or imports the MCP SDK, and `claude-config` runs without
`EarlyStarts.start` (proxy/spawn.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from omega_mcp.cli.common import EXIT_OK, UsageError, say
from omega_mcp.config import Config

__all__ = ["run_claude_config", "run_import"]


def run_import(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    """Add the servers of `args.source` to the config file and print what changed (or would)."""
    from omega_mcp.cli.importer import import_servers

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
    for name, why in report.dropped:
        out.write(f"skipped {name!r}: {why}\n")
    for name, fields in report.ignored.items():
        out.write(f"ignored {', '.join(repr(f) for f in fields)} of {name!r}: omega has no such setting\n")
    for name, key, variable in report.unset:
        out.write(
            f"warning: [servers.{name}] {key} uses ${{{variable}}}, which is not set: "
            "the server will be marked failed until it is\n"
        )
    out.write(f"{'dry run: nothing written to' if args.dry_run else 'wrote'} {target}\n")
    return EXIT_OK


def run_claude_config(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    """Print the `mcpServers` JSON that runs this omega over stdio on a project, or points at a hub with --http.

    stdout holds only the JSON (`omega-mcp claude-config > .mcp.json`); with --http, how to give
    Claude Code the hub's token goes to stderr.
    """
    if args.http:
        if args.workspace is not None or args.mode is not None:
            raise UsageError(
                "--workspace and --mode do not apply with --http: the hub has its own "
                "(pass them to `omega-mcp serve --http`)"
            )
        _check_url(args.http)
        entry: dict[str, Any] = {
            "type": "http",
            "url": args.http,
            "headers": {"Authorization": "Bearer ${OMEGA_TOKEN}"},
        }
        _token_hint(config)
    else:
        entry = _stdio_entry(config, args)
        _warn_unsafe_roots(config, args)
    out.write(json.dumps({"mcpServers": {"omega": entry}}, indent=2) + "\n")
    return EXIT_OK


def _stdio_entry(config: Config, args: argparse.Namespace) -> dict[str, Any]:
    """`omega-mcp attach --config ... --workspace DIR [--mode M]` (`--standalone`: `serve`), with
    OMEGA_HOME kept when it is set.

    Claude Code starts a stdio server in the project directory, so the workspace defaults to the
    current directory: the project `claude-config` is run in. The attach entry carries
    `"alwaysLoad": true`: without it Claude Code defers omega's tools behind its own tool search
    (named in the prompt, absent from the request's `tools`), measured with Claude Code 2.1; with it,
    and the warm hub answering at once, its first request has every tool.
    """
    script = Path(sys.executable).with_name("omega-mcp")
    found = str(script) if script.exists() else shutil.which("omega-mcp")
    # -P: the project directory (where a model may write) never goes on omega's import path.
    command, prefix = (found, []) if found else (sys.executable, ["-P", "-m", "omega_mcp"])
    standalone = bool(getattr(args, "standalone", False))
    cli_args = [*prefix, "serve" if standalone else "attach"]
    if config.path is not None:
        cli_args += ["--config", str(config.path)]
    cli_args += ["--workspace", os.path.abspath(os.path.expanduser(args.workspace or os.curdir))]
    if args.mode is not None:
        cli_args += ["--mode", args.mode]
    # Claude Code shows the tools as mcp__omega__<name>: omega keeps that whole name within 64 characters.
    cli_args += ["--client-prefix", "mcp__omega__"]
    env = {"OMEGA_HOME": str(config.home)} if os.environ.get("OMEGA_HOME") else {}
    entry: dict[str, Any] = {"type": "stdio", "command": command, "args": cli_args, "env": env}
    if not standalone:
        entry["alwaysLoad"] = True
    return entry


def _check_url(url: str) -> None:
    """Refuse an `--http` value that is no http(s) URL; warn when it is not where the hub serves MCP.

    Raises:
        UsageError: not an http:// or https:// URL with a host (and a valid port).
    """
    example = "e.g. http://127.0.0.1:8765/mcp (the address of `omega-mcp serve --http`)"
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise UsageError(f"--http: {url!r} is not an http:// or https:// URL with a host; {example}")
    if parts.path.rstrip("/") != "/mcp":
        path = parts.path or "/"
        say(f"omega-mcp: warning: --http: an omega hub serves MCP at the path /mcp, not {path!r}; {example}")


def _workspace_refusal(workspace: Path, home: Path) -> str | None:
    """Why `serve` would refuse to make or use `workspace` (`cli/toolbox.py`), without making anything."""
    if workspace.is_dir():
        return None
    if os.path.lexists(workspace):
        return f"{workspace} exists and is not a directory"
    if workspace == home or home in workspace.parents or workspace.parent.is_dir():
        return None  # serve creates it
    if os.path.lexists(workspace.parent):
        return f"{workspace}: a component of its path is not a directory"
    return f"{workspace} does not exist, nor does its parent {workspace.parent}; create it first"


def _warn_unsafe_roots(config: Config, args: argparse.Namespace) -> None:
    """Say now (stderr) what `serve` will refuse in this entry (its workspace, an unsafe root of its own or
    of a confined server), instead of Claude Code showing a server that failed."""
    from omega_mcp.cli.trust import policy_for, server_root_problems
    from omega_mcp.sandbox.roots import root_problems

    served = argparse.Namespace(
        workspace=os.path.abspath(os.path.expanduser(args.workspace or os.curdir)), mode=args.mode
    )
    policy = policy_for(config, served)
    refusal = _workspace_refusal(policy.workspace, config.home)
    if refusal is not None:
        say(f"omega-mcp: warning: --workspace: {refusal}: omega will refuse to start with this entry")
    for problem in [*root_problems(policy, workspace_key="--workspace"), *server_root_problems(config)]:
        advice = "" if policy.mode == "rwx" else "omega will refuse to start with this entry; "
        other = "--workspace" if problem.key == "--workspace" else "directory"
        say(f"omega-mcp: warning: {problem}: {advice}move omega's files out of it or pick another {other}")


def _token_hint(config: Config) -> None:
    """Tell (on stderr) where the hub's token is and how Claude Code gets it into the header."""
    from omega_mcp.sandbox.policy import TOKEN_FILE_NAME

    token_file = config.home / TOKEN_FILE_NAME
    say(
        "omega-mcp: Claude Code fills ${OMEGA_TOKEN} in the entry's header from its own environment; "
        "before starting claude:"
    )
    say(f'  export OMEGA_TOKEN="$(cat {token_file})"')
    say(
        "omega-mcp: that is the hub's token file, written when a hub first starts (the hub checks the token "
        "on every request, loopback included); a hub started with OMEGA_TOKEN set uses that value instead"
    )
