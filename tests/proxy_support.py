"""Helpers for the proxy tests: in-process downstream servers and a hub wired around them."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import types
from mcp.client import Transport
from mcp.client._memory import InMemoryTransport  # pyright: ignore[reportPrivateUsage]
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel import Server

from omega_mcp.proxy.spec import Target
from omega_mcp.proxy.supervisor import Downstreams, DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.server import OmegaServer, build_server
from omega_mcp.toolbox import Toolbox
from waits import deadline, until

FIXTURES = Path(__file__).parent / "fixtures"
ECHO_SERVER = FIXTURES / "echo_server.py"

CallHandler = Callable[[Any, types.CallToolRequestParams], Awaitable[types.CallToolResult]]


def echo_tool(name: str = "echo") -> types.Tool:
    return types.Tool(
        name=name,
        description=f"{name} the text back",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    )


async def _echo(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(text=f"{params.name}:{text}")])


def downstream(
    name: str = "down",
    tools: list[types.Tool] | None = None,
    call: CallHandler = _echo,
    sessions: list[Any] | None = None,
    **handlers: Any,
) -> Server[Any]:
    """An in-process downstream server; `tools` may be mutated later (it is listed live).

    Each tools/list appends the listing session to `sessions` (to send notifications later).
    """
    listed = tools if tools is not None else [echo_tool()]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if sessions is not None:
            sessions.append(ctx.session)
        return types.ListToolsResult(tools=list(listed))

    return Server(name, on_list_tools=list_tools, on_call_tool=call, **handlers)


def gated(server: Server[Any], gate: anyio.Event) -> Callable[[], AbstractAsyncContextManager[Any]]:
    """A transport factory that connects to `server` only once `gate` is set (a slow start)."""

    @asynccontextmanager
    async def connect() -> AsyncIterator[Any]:
        await gate.wait()
        async with InMemoryTransport(server) as streams:
            yield streams

    return connect


def in_memory(server: Server[Any]) -> Callable[[], Transport]:
    """A transport factory connecting to an in-process server (the SDK's test transport)."""
    return lambda: InMemoryTransport(server)


def downstream_spec(server_name: str, target: Server[Any] | Target, **options: Any) -> DownstreamSpec:
    """A `DownstreamSpec`; an in-process `Server` target is connected through `in_memory`."""
    return DownstreamSpec(server_name, in_memory(target) if isinstance(target, Server) else target, **options)


def stdio_fixture(*args: str) -> StdioServerParameters:
    """The stdlib echo fixture server (see tests/fixtures/echo_server.py) as a stdio target."""
    return StdioServerParameters(command=sys.executable, args=[str(ECHO_SERVER), *args])


@asynccontextmanager
async def hub(
    policy: SandboxPolicy, *specs: DownstreamSpec, **options: Any
) -> AsyncIterator[tuple[Downstreams, Toolbox, OmegaServer]]:
    """Downstreams + Toolbox + the omega MCP server, started (supervisors retry fast)."""
    options.setdefault("backoff_seconds", 0.05)
    async with Downstreams(list(specs), **options) as downstreams, Toolbox(policy, downstreams) as toolbox:
        yield downstreams, toolbox, build_server(toolbox, catalog=downstreams)


async def wait_until(predicate: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll a condition with a bound (for process-level state that has no event to wait on)."""
    await until(predicate, "the condition", seconds)


async def listed(client: mcp.Client, *names: str, seconds: float = 30.0) -> list[str]:
    """The client's tool names once they include `names`: `serve` answers tools/list at once with the
    servers that are ready, and the others arrive later (bounded wait, polling the list)."""
    with deadline(seconds):
        while True:
            found = [t.name for t in (await client.list_tools()).tools]
            if set(names) <= set(found):
                return found
            await anyio.sleep(0.05)


def read_pid(path: Path | str) -> int:
    return int(Path(path).read_text())


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def child_pids() -> set[int]:
    """Pids whose parent is this test process."""
    me = str(os.getpid())
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if fields[1] == me and fields[0] != "Z":
                found.add(int(entry.name))
    return found


class Notifications:
    """An upstream message handler recording list_changed notifications."""

    def __init__(self) -> None:
        self.tools = 0
        self.changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools += 1
            self.changed.set()

    async def next(self, seconds: float = 10.0) -> None:
        with deadline(seconds):
            await self.changed.wait()
        self.changed = anyio.Event()


def client(server: OmegaServer, mode: str = "legacy", **kwargs: Any) -> mcp.Client:
    return mcp.Client(server, mode=mode, **kwargs)


def modern_only(server: Server[Any]) -> Callable[[], AbstractAsyncContextManager[Any]]:
    """A transport factory for a 2026-only in-process server: it refuses the handshake as such servers do
    (UNSUPPORTED_PROTOCOL_VERSION naming only 2026-07-28) and answers everything else itself."""
    from mcp.shared.message import SessionMessage

    @asynccontextmanager
    async def connect() -> AsyncIterator[Any]:
        async with InMemoryTransport(server) as (read, write):
            to_client, from_server = anyio.create_memory_object_stream[Any](16)

            class Refusing:
                async def send(self, item: Any) -> None:
                    message = item.message
                    if isinstance(message, types.JSONRPCRequest) and message.method == "initialize":
                        error = types.ErrorData(
                            code=types.UNSUPPORTED_PROTOCOL_VERSION,
                            message="this server speaks only 2026-07-28",
                            data={"supported": ["2026-07-28"], "requested": "2025-11-25"},
                        )
                        await to_client.send(
                            SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error))
                        )
                        return
                    await write.send(item)

                async def aclose(self) -> None:
                    await write.aclose()

                async def __aenter__(self) -> Any:
                    return self

                async def __aexit__(self, *exc_info: object) -> None:
                    await self.aclose()

            async def pump() -> None:
                async with to_client:
                    async for item in read:
                        await to_client.send(item)

            async with anyio.create_task_group() as tg, from_server:
                tg.start_soon(pump)
                yield from_server, Refusing()
                tg.cancel_scope.cancel()

    return connect


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@asynccontextmanager
async def http_fixture(*argv: str, env: Mapping[str, str] | None = None) -> AsyncIterator[str]:
    """A fixture server run as `python ARGV... --http PORT` on a free loopback port: its /mcp URL once it
    listens (bounded); stopped after (terminate, then kill)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    command = [sys.executable, *argv, "--http", str(port)]
    process = await anyio.open_process(command, env=dict(env if env is not None else os.environ))
    try:
        await until(lambda: _listening(port) or process.returncode is not None, "the fixture server", 30)
        assert process.returncode is None, "the fixture server exited"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()
