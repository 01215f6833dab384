"""`python -m omega_mcp` is the `omega-mcp` command."""

from omega_mcp.cli.main import main

raise SystemExit(main())
