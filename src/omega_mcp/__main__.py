"""`python -m omega_mcp` is the `omega-mcp` command.

`python -m` puts the current directory first on `sys.path`, where a model may write (the
workspace): it comes off before anything else is imported, so a planted `anyio.py` there is never
loaded. (`python -P -m omega_mcp`, which `claude-config` writes, never puts it there at all.)
`attach` runs once per client window and imports the standard library only (cli/attach.py): it is
dispatched here, before the rest of the command line (anyio, pydantic, the config) is imported.
"""

import os
import sys

if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

if sys.argv[1:2] == ["attach"]:
    from omega_mcp.cli.attach import main as attach

    raise SystemExit(attach(sys.argv[2:]))

from omega_mcp.cli.main import main

raise SystemExit(main())
