"""An SDK server served over streamable HTTP on a free loopback port, for tests of remote downstreams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import uvicorn
from mcp.server.lowlevel import Server

from proxy_support import wait_until


@asynccontextmanager
async def served(server: Server[Any], **app_options: Any) -> AsyncIterator[str]:
    """Serve `server` at `http://127.0.0.1:PORT/mcp` (yielded) until the block ends."""
    app = server.streamable_http_app(**app_options)
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve)
        await wait_until(lambda: web.started)
        port = web.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            web.should_exit = True
