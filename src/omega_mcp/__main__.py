"""`python -m omega_mcp` is the `omega-mcp` command.

`python -m` puts the current directory first on `sys.path`, where a model may write (the
workspace): it comes off before anything else is imported, so a planted `anyio.py` there is never
loaded. (`python -P -m omega_mcp`, which `claude-config` writes, never puts it there at all.)
"""

import os
import sys

if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from omega_mcp.cli.main import main

raise SystemExit(main())
