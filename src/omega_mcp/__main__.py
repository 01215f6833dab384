"""`python -m omega_mcp` is the `omega-mcp` command."""

from omega_mcp.cli import main

raise SystemExit(main())
