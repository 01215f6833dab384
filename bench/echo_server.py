"""The baseline: the SDK's own low-level Server over stdio with one `echo` tool and nothing else."""

from __future__ import annotations

from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_TOOL = types.Tool(name="echo", input_schema={"type": "object", "properties": {"text": {"type": "string"}}})


async def _list(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[_TOOL])


async def _call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def main() -> None:
    server = Server("echo", on_list_tools=_list, on_call_tool=_call)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
