"""Remote downstream servers (`url = ...`): streamable HTTP, SSE, headers, unreachable hosts.

The downstream is an SDK `Server` served by uvicorn on a free loopback port, with both the
streamable HTTP endpoint (/mcp) and the older SSE endpoints (/sse + /messages/), plus endpoints
that are no MCP server at all (/private answers 401, /html a web page, /bogus an empty result)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import uvicorn
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.sse import SseServerTransport
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from omega_mcp.proxy.supervisor import DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from proxy_support import echo_tool, hub, wait_until


def _remote_server(seen_headers: list[dict[str, str]]) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[echo_tool()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        request = ctx.request
        seen_headers.append(dict(request.headers) if request is not None else {})
        return types.CallToolResult(content=[types.TextContent(text=f"remote:{(params.arguments or {})['text']}")])

    return Server("remote", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.fixture
async def remote() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    server = _remote_server(seen)
    sse = SseServerTransport("/messages/")

    class HandleSse:
        """A raw ASGI endpoint (a class instance, so starlette passes `send` through unwrapped)."""

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            async with sse.connect_sse(scope, receive, send) as (read, write):
                await server.run(read, write, server.create_initialization_options())

    async def private(request: Request) -> Response:
        return JSONResponse({"error": "unauthorized"}, status_code=401)

    async def html(request: Request) -> Response:
        return HTMLResponse("<html>a web page</html>")

    async def bogus(request: Request) -> Response:
        asked = await request.json() if request.method == "POST" else {}
        return JSONResponse({"jsonrpc": "2.0", "id": asked.get("id", 1), "result": {}})

    odd = [Route(f"/{f.__name__}", endpoint=f, methods=["GET", "POST", "DELETE"]) for f in (private, html, bogus)]
    app = server.streamable_http_app(
        custom_starlette_routes=[
            Route("/sse", endpoint=HandleSse(), methods=["GET"]),
            Mount("/messages/", app=sse.handle_post_message),  # type: ignore[list-item]
            *odd,
        ]
    )
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve)
        await wait_until(lambda: web.started)
        port = web.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}", seen
        web.should_exit = True


async def test_a_streamable_http_server_is_proxied_with_its_headers(
    rwx_policy: SandboxPolicy, remote: tuple[str, list[dict[str, str]]]
):
    base, seen = remote
    spec = DownstreamSpec("web", f"{base}/mcp", headers={"Authorization": "Bearer t0ken"})
    async with hub(rwx_policy, spec) as (downstreams, toolbox, _):
        names = [t.name for t in await toolbox.list_tools()]
        result = await toolbox.call_tool("mcp__web__echo", {"text": "hi"})
        assert [s.state for s in downstreams.statuses()] == ["connected"]
    assert "mcp__web__echo" in names
    assert result.content[0].text == "remote:hi"  # type: ignore[union-attr]
    assert seen[-1].get("authorization") == "Bearer t0ken"


async def test_an_sse_endpoint_is_accepted(rwx_policy: SandboxPolicy, remote: tuple[str, list[dict[str, str]]]):
    base, seen = remote
    spec = DownstreamSpec("old", f"{base}/sse", headers={"X-Team": "omega"})
    async with hub(rwx_policy, spec) as (downstreams, toolbox, _):
        result = await toolbox.call_tool("mcp__old__echo", {"text": "via sse"})
        assert [s.state for s in downstreams.statuses()] == ["connected"]
    assert result.content[0].text == "remote:via sse"  # type: ignore[union-attr]
    assert seen[-1].get("x-team") == "omega"


async def test_an_unreachable_url_is_a_failed_server_with_the_reason(rwx_policy: SandboxPolicy):
    spec = DownstreamSpec("gone", "http://127.0.0.1:9/mcp", connect_timeout_seconds=5)
    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        result = await toolbox.call_tool("mcp__gone__echo", {"text": "x"})
        status = downstreams.statuses()[0]
    assert status.state == "failed" and (status.reason or "").startswith("cannot reach http://127.0.0.1:9/mcp: ")
    assert result.is_error and "server gone is down" in result.content[0].text  # type: ignore[union-attr]


async def test_what_a_url_that_is_no_mcp_server_answers_is_the_one_line_reason(
    rwx_policy: SandboxPolicy, remote: tuple[str, list[dict[str, str]]], caplog: pytest.LogCaptureFixture
):
    base, _ = remote
    names = ("private", "html", "bogus")
    specs = [DownstreamSpec(name, f"{base}/{name}", connect_timeout_seconds=10) for name in names]
    async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        reasons = {s.server_name: s.reason or "" for s in downstreams.statuses()}
    assert "HTTP 401" in reasons["private"]
    assert "text/html" in reasons["html"]
    assert "InitializeResult is invalid" in reasons["bogus"] and "`" in reasons["bogus"]
    assert not [r for r in reasons.values() if "\n" in r]
    tracebacks = [r for r in caplog.records if r.exc_info is not None and r.levelno >= logging.INFO]
    assert tracebacks == []  # the SDK's transports would log each failed attempt with its traceback
