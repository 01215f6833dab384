"""The `omega-mcp` command line, one module per command group.

`main` parses the flags, sets up logging, loads the config and dispatches to `serve`, `oneshot`
(`tools`, `call`), `agent` and `register` (`import`, `claude-config`, with `importer`); `toolbox`
opens the Toolbox they share and `signals` holds SIGINT/SIGTERM until a command can act on them. A
new command goes in its own module here, with its flags in `main.build_parser`. This package file
imports nothing and installs nothing; the SDK loads only after `EarlyStarts.start` (proxy/spawn.py).
"""
