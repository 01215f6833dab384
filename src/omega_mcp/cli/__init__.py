"""The `omega-mcp` command line, one module per command group.

`main` parses the flags, sets up logging, loads the config and dispatches to `serve`, `oneshot`
(`tools`, `call`), `agent` and `register` (`import`, `claude-config`, with `importer`); `toolbox`
opens the Toolbox they share and `signals` holds SIGINT/SIGTERM until a command can act on them. A
new command goes in its own module here, with its flags in `main.build_parser`. This package file
imports nothing and installs nothing; the SDK loads only after `EarlyStarts.start` (proxy/spawn.py).
`main` here is the console script: `attach` goes to `attach.py` (standard library only) before
`main.py` and what it imports are loaded.
"""

import sys


def main() -> int:
    """The `omega-mcp` console script."""
    if sys.argv[1:2] == ["attach"]:
        from omega_mcp.cli.attach import main as attach

        return attach(sys.argv[2:])
    from omega_mcp.cli.main import main as full

    return full()
