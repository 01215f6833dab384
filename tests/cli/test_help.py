"""`--help` explains every flag, and the synopsis of docs/cli.md lists exactly the flags argparse knows."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from omega_mcp.cli.main import build_parser

CLI_PAGE = Path(__file__).parents[2] / "docs" / "cli.md"


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage] - argparse has no public accessor
        if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]
            return dict(action.choices)  # pyright: ignore[reportUnknownArgumentType]
    raise AssertionError("omega-mcp has no subcommands")


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions  # pyright: ignore[reportPrivateUsage]
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def _synopsis() -> dict[str, str]:
    """The command-line block under docs/cli.md's "Synopsis", one text per command (its line and the
    continuation lines)."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    block = text.split("\n## Synopsis\n", 1)[1].split("```", 2)[1]
    commands: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        found = re.match(r"omega-mcp ([a-z][a-z-]*)", line)
        if found:
            current = found.group(1)
            commands[current] = ""
        if current:
            commands[current] += line.split("#", 1)[0] + "\n"
    return commands


def test_every_argument_of_every_command_has_a_help_text():
    missing = [
        f"{name} {action.option_strings or action.metavar or action.dest}"
        for name, sub in _subparsers().items()
        for action in sub._actions  # pyright: ignore[reportPrivateUsage]
        if not (action.help or "").strip()
    ]
    assert missing == []


def test_the_cli_page_synopsis_has_every_command():
    assert set(_synopsis()) == set(_subparsers())


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_the_cli_page_synopsis_lists_exactly_the_flags_of(command: str):
    listed = set(re.findall(r"--[a-z][a-z-]*", _synopsis().get(command, "")))
    assert listed == _flags(_subparsers()[command])
