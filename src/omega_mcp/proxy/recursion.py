"""omega never runs itself: recognising a server entry that launches omega, and omega started by omega.

A `[servers.x]` entry pointing at omega (easy to get by importing the `.mcp.json` that
`claude-config` wrote) would make every omega start another one, without end. Two layers stop it:
`launches_omega` recognises the usual command lines (the `omega-mcp` script, `python -m omega_mcp`,
a launcher such as `uvx omega-mcp`), so `import` skips them and the supervisor refuses to start
them; and every downstream server is started with `MARKER` in its environment, so an omega that
finds it there was started by another omega, however indirectly, and refuses to start its own
downstream servers. Standard library only: the CLI uses it before the SDK is loaded.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

__all__ = ["MARKER", "launches_omega", "started_by_omega"]

MARKER = "OMEGA_MCP_PARENT_PID"
"""Set (to omega's pid) in the environment of every downstream server omega starts."""

_SCRIPT = "omega-mcp"
_MODULE = "omega_mcp"


def _words(command: str, args: Sequence[str]) -> list[str]:
    words = [command]
    for arg in args:
        try:
            words += shlex.split(arg) if any(c.isspace() for c in arg) else [arg]  # `sh -c "omega-mcp serve"`
        except ValueError:
            words.append(arg)
    return words


def launches_omega(command: str, args: Sequence[str]) -> bool:
    """Whether this command line starts omega: its script anywhere in it, or `-m omega_mcp`."""
    words = _words(command, args)
    for i, word in enumerate(words):
        name = os.path.basename(word)
        if name in (_SCRIPT, f"{_SCRIPT}.exe") or name.startswith(f"{_SCRIPT}@") or name.startswith(f"{_SCRIPT}=="):
            return True
        module = word.removeprefix("-m") if word.startswith("-m") and word != "-m" else None
        if module is None and word == "-m" and i + 1 < len(words):
            module = words[i + 1]
        if module is not None and (module == _MODULE or module.startswith(f"{_MODULE}.")):
            return True
    return False


def started_by_omega(environ: Mapping[str, str] | None = None) -> str | None:
    """The pid of the omega that started this process (from `MARKER`), or None."""
    value = (os.environ if environ is None else environ).get(MARKER)
    return value or None
