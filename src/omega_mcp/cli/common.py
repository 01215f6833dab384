"""What every `omega-mcp` command module shares: the exit codes, the usage error and the stderr line.

Standard library only (and `visible`), so importing it costs nothing before `EarlyStarts.start` (proxy/spawn.py)
runs. `main` maps `UsageError` (like a `ConfigError`) to exit 2 and one `omega-mcp: error: ...` line on stderr; a
line may quote what a model, a server or a file said, so its control characters are shown escaped.
"""

from __future__ import annotations

import sys

from omega_mcp.visible import visible

__all__ = ["DEFAULT_LOGIN_TIMEOUT", "EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "UsageError", "say"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
DEFAULT_LOGIN_TIMEOUT = 300.0
"""How long `omega-mcp login` waits for the browser (here, not in login.py: the parser shows it before any
command module is imported)."""


class UsageError(Exception):
    """A bad flag or argument value found after parsing (exit 2)."""


def say(line: str) -> None:
    """Write one line to stderr, if there still is one."""
    if sys.stderr is not None:  # a closed stderr: the exit code is all that is left
        sys.stderr.write(visible(line) + "\n")
