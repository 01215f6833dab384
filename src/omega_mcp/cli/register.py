"""`omega-mcp import` and `omega-mcp claude-config`: connect omega with Claude Code, in both directions.

`import` copies the `mcpServers` of a Claude JSON file into servers.toml (the work is in
`omega_mcp.cli.importer`); `claude-config` prints the entry that points Claude Code at omega. Neither
starts the toolbox or imports the MCP SDK, and `claude-config` runs without `EarlyStarts.start` (proxy/spawn.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

from omega_mcp.cli.common import EXIT_OK
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
    out.write(f"{'dry run: nothing written to' if args.dry_run else 'wrote'} {target}\n")
    return EXIT_OK


def run_claude_config(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    """Print the `mcpServers` JSON that runs this omega over stdio, or points at a hub with --http."""
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
