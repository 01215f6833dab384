"""The SDK's own low-level Server with an `echo` tool: the benchmarks' downstream and their HTTP floor.

    python bench/echo_server.py              # over stdio
    python bench/echo_server.py --http PORT  # over streamable HTTP at http://127.0.0.1:PORT/mcp (uvicorn)

Both eras are answered either way (the handshake and the 2026-07-28 envelope), as the SDK answers them.
It also has a `read` tool doing what omega's built-in `read` does for a small text file (`cat -n`
numbered lines, the file read in a worker thread), so the HTTP benchmark can put omega's hub and
the SDK's own streamable HTTP server side by side serving the same tool.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_TOOL = types.Tool(
    name="echo",
    description="Echo the text back.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


_READ = types.Tool(
    name="read",
    description="Read a text file, lines numbered.",
    input_schema={"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
)


def _numbered(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return "".join(f"{index:6}\t{line}" for index, line in enumerate(file, 1))


async def _list(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[_TOOL, _READ])


async def _call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "read":
        text = await anyio.to_thread.run_sync(_numbered, (params.arguments or {}).get("file_path", ""))
        return types.CallToolResult(content=[types.TextContent(text=text)])
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(content=[types.TextContent(text=text)])


def build() -> Server[Any]:
    return Server("echo", on_list_tools=_list, on_call_tool=_call)


async def _stdio() -> None:
    server = build()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _http(port: int) -> None:
    import uvicorn

    app = build().streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on this port")
    ns = parser.parse_args()
    if ns.http:
        _http(ns.http)
    else:
        anyio.run(_stdio)
