"""The SDK's own low-level Server with an `echo` tool: the benchmarks' downstream and their HTTP floor.

    python bench/echo_server.py              # over stdio
    python bench/echo_server.py --http PORT  # over streamable HTTP at http://127.0.0.1:PORT/mcp (uvicorn)
    python bench/echo_server.py --http PORT --omega-read WORKSPACE  # `read` is omega's own (see below)

Both eras are answered either way (the handshake and the 2026-07-28 envelope), as the SDK answers them.
It also has a `read` tool: by default a few lines doing what omega's `read` does for a small text
file (`cat -n` numbered lines, read in a worker thread); with `--omega-read WORKSPACE` it is omega's
own `read` (`builtin/read.py`: every sandbox check included, workspace WORKSPACE, sandbox mode), so
the HTTP benchmark puts omega's hub and the SDK's own streamable HTTP server side by side serving
exactly the same tool code: what differs is the hub.
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


_OMEGA: dict[str, Any] = {}
"""With `--omega-read`, "read": `(arguments) -> awaitable CallToolResult`, omega's `read` under a sandbox policy."""


def _use_omega_read(workspace: str) -> None:
    from pathlib import Path

    from omega_mcp.builtin.read import read_file
    from omega_mcp.builtin.schemas import ReadArgs
    from omega_mcp.sandbox.paths import remember_hidden
    from omega_mcp.sandbox.policy import SandboxPolicy

    home = Path(workspace).parent / "echo-home"
    policy = SandboxPolicy(mode="sandbox", home=home, workspace=Path(workspace))
    remember_hidden(policy)

    def read(arguments: dict[str, Any]) -> Any:
        return read_file(policy, ReadArgs.model_validate(arguments))

    _OMEGA["read"] = read


async def _call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "read" and "read" in _OMEGA:
        return await _OMEGA["read"](params.arguments or {})
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
    parser.add_argument("--omega-read", metavar="WORKSPACE", help="`read` is omega's own, in this workspace")
    ns = parser.parse_args()
    if ns.omega_read:
        _use_omega_read(ns.omega_read)
    if ns.http:
        _http(ns.http)
    else:
        anyio.run(_stdio)
