"""The call's context (calling.py): built once by the front end, passed down unchanged, and the one way
a downstream call learns whose client its server's requests go to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from mcp import types
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from omega_mcp.calling import PROCESS, CallContext, InputRequest
from omega_mcp.names import Route
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.results import Wire
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox
from proxy_support import downstream, downstream_spec, echo_tool
from waits import deadline


class _Recording:
    """Downstream tools of one server `d` with one tool `echo`, recording each call's context."""

    def __init__(self) -> None:
        self.contexts: list[CallContext] = []

    version = 1
    ready = True

    def tools(self) -> Sequence[tuple[str, types.Tool]]:
        return [("d", echo_tool())]

    def get_tool(self, server_name: str, tool_name: str) -> types.Tool | None:
        return echo_tool() if (server_name, tool_name) == ("d", "echo") else None

    def unavailable(self, name: str, permits: Callable[[Route], bool] | None = None) -> str | None:
        return None

    async def wait_ready(self) -> None:
        return None

    def starting(self, name: str) -> list[str]:
        return []

    async def wait_settled(self, server_names: Sequence[str]) -> None:
        return None

    def unsettled(self) -> list[str]:
        return []

    async def call_tool(
        self, server_name: str, tool_name: str, arguments: dict[str, Any], context: CallContext
    ) -> Wire:
        self.contexts.append(context)
        return {"content": [{"type": "text", "text": "ok"}]}


class _Caller:
    """A client request that answers sampling itself and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    client = object()
    name = "the caller"
    capabilities = types.ClientCapabilities(sampling=types.SamplingCapability())
    modern = False
    client_info = None
    log_level = None

    async def ask(self, request: InputRequest, result_type: type[Any], *, timeout_seconds: float, progress: Any) -> Any:
        self.asked.append(request.method)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="from the caller"), model="m")

    async def notify(self, notification: types.ServerNotification) -> None:
        return None

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        return None


@pytest.mark.anyio
async def test_the_toolbox_hands_a_downstream_call_its_context_unchanged(rwx_policy: SandboxPolicy) -> None:
    downstreams = _Recording()
    context = CallContext(owner=object(), meta={"vendor/id": "1"}, extra={"requestState": "s"}, session_key="k")
    async with Toolbox(rwx_policy, downstreams) as box:
        result = await box.call_tool("mcp__d__echo", {"text": "x"}, context)
        await box.call_tool("mcp__d__echo", {"text": "y"})
    assert not result.is_error
    assert downstreams.contexts[0] is context  # the very object: nothing restated on the way
    assert downstreams.contexts[1] is PROCESS  # no front end: the process itself


@pytest.mark.anyio
async def test_a_servers_request_during_a_call_goes_to_the_caller_the_calls_context_names(
    rwx_policy: SandboxPolicy,
) -> None:
    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        message = types.SamplingMessage(role="user", content=types.TextContent(text="hello"))
        request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[message], max_tokens=8))
        metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        try:
            sampled = await ctx.session.send_request(request, types.CreateMessageResult, metadata=metadata)
        except MCPError as exc:
            return types.CallToolResult(content=[types.TextContent(text=f"declined: {exc.message}")])
        assert isinstance(sampled.content, types.TextContent)
        return types.CallToolResult(content=[types.TextContent(text=sampled.content.text)])

    caller = _Caller()
    spec = downstream_spec("d", downstream("d", call=call), era="handshake")
    with deadline(30):
        async with Downstreams([spec], backoff_seconds=0.05) as downstreams:
            await downstreams.wait_ready()
            answered = await downstreams.call_tool("d", "echo", {"text": "x"}, CallContext(caller=caller))
            nobody = await downstreams.call_tool("d", "echo", {"text": "x"})
    assert answered["content"][0]["text"] == "from the caller"
    assert caller.asked == ["sampling/createMessage"]  # once: the call without a caller asked nobody
    assert nobody["content"][0]["text"].startswith("declined: omega cannot pass on sampling/createMessage")
