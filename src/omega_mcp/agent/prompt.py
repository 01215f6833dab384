"""The agent's default system prompt: where the tools work, what the sandbox allows, the date, the names.

Built once per run from the effective sandbox policy (flags over the config file) and sent
unchanged with every request of the run: providers cache the prompt prefix only when it is
byte-identical, so nothing in it may change between turns (the date has day precision, no clock
time). `--system TEXT` replaces it (an empty TEXT sends no system prompt at all); `[agent]
system_append` is added to the end of the default prompt only.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

from omega_mcp.sandbox.policy import SYSTEM_DIRS, SandboxPolicy

__all__ = ["default_system_prompt", "system_prompt"]

_INTRO = (
    "You are an agent working on the user's computer through tools. Work in small steps, check what "
    "each tool reports before relying on it, and finish with a short, direct answer to the request."
)
_NO_TOOLS = "No tools are available in this run: answer from what you know."


def system_prompt(
    flag: str | None,
    *,
    append: str | None,
    policy: SandboxPolicy,
    tools: bool,
    today: datetime.date | None = None,
) -> str | None:
    """The system prompt of a run: `flag` (`--system`) when given, None for an empty one, else the
    default prompt followed by `append` (`[agent] system_append`)."""
    if flag is not None:
        return flag or None
    text = default_system_prompt(policy, tools=tools, today=today)
    if append and append.strip():
        text = f"{text}\n\n{append.strip()}"
    return text


def default_system_prompt(policy: SandboxPolicy, *, tools: bool = True, today: datetime.date | None = None) -> str:
    """The built-in prompt for `policy`; without `tools`, only the introduction and the date."""
    day = (today or datetime.date.today()).isoformat()
    if not tools:
        return f"{_INTRO}\n\n{_NO_TOOLS}\n\nToday's date: {day}."
    lines = [
        _INTRO,
        "",
        f"Workspace: {policy.workspace}. Relative paths in tool arguments resolve against it, and bash "
        "commands run there.",
        f"Sandbox mode: {policy.mode}. {_writes(policy)}",
        "bash has network access."
        if policy.bash_network
        else "bash has no network access: commands that need the network will fail.",
        "A write the sandbox refuses comes back as an error containing `denied`; report it rather than "
        "working around it.",
        "Tool names: the built-in tools are bash, read, write and edit (bash_output and kill_shell manage "
        "background shells); the tools of MCP servers are named mcp__<server>__<tool>.",
        "",
        f"Today's date: {day}.",
    ]
    return "\n".join(lines)


def _writes(policy: SandboxPolicy) -> str:
    if policy.mode == "rwx":
        return (
            f"The file tools (write, edit) may write anywhere except system directories ({_paths(SYSTEM_DIRS)}) "
            "and omega's own configuration and state; bash may write anywhere."
        )
    return (
        f"The file tools (write, edit) may write only beneath {_paths(policy.file_write_roots)}; bash may "
        f"write only beneath {_paths(policy.bash_write_roots)}. omega's own configuration and state are never "
        "writable."
    )


def _paths(paths: Sequence[Path]) -> str:
    return ", ".join(str(path) for path in paths)
