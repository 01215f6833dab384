"""The reference MCP server the conformance suite is measured against, directly and through omega.

Built on the SDK's `MCPServer` the way a typical server author would build one, with every tool,
prompt and resource the suite's server scenarios look for (the suite's "everything server"
contract). Run as `python reference_server.py --port N` (streamable HTTP at /mcp) or `--stdio`.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Annotated, Any

import anyio
import uvicorn
from mcp import types
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


class Events(EventStore):
    """Every SSE event kept in memory, so a client that reconnects gets what it missed."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, types.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        self.log.append((stream_id, str(len(self.log) + 1), message))
        return self.log[-1][1]

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((s for s, e, _ in self.log if e == last_event_id), None)
        if stream is None:
            return None
        for s, e, message in self.log:
            if s == stream and int(e) > int(last_event_id) and message is not None:
                await send_callback(EventMessage(message, e))
        return stream


server = MCPServer(
    name="omega-conformance-reference",
    version="1.0.0",
    request_state_security=RequestStateSecurity(keys=[b"omega conformance reference server state key!"]),
)


def ask(message: str, schema: dict[str, Any] = NAME) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def sample(text: str, max_tokens: int) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=max_tokens)
    )


@server.tool()
def test_simple_text() -> str:
    """Answers with one text block."""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> list[types.ImageContent]:
    """Answers with one image block."""
    return [types.ImageContent(type="image", data=PIXEL, mime_type="image/png")]


@server.tool()
def test_audio_content() -> list[types.AudioContent]:
    """Answers with one audio block."""
    return [types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


def _embedded(uri: str, mime: str, text: str) -> types.EmbeddedResource:
    return types.EmbeddedResource(
        type="resource", resource=types.TextResourceContents(uri=uri, mime_type=mime, text=text)
    )


@server.tool()
def test_embedded_resource() -> list[types.EmbeddedResource]:
    """Answers with an embedded resource."""
    return [_embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")]


@server.tool()
def test_multiple_content_types() -> list[types.TextContent | types.ImageContent | types.EmbeddedResource]:
    """Answers with text, image and resource blocks."""
    return [
        types.TextContent(type="text", text="Multiple content types test:"),
        types.ImageContent(type="image", data=PIXEL, mime_type="image/png"),
        _embedded("test://mixed-content-resource", "application/json", '{"test": "data", "value": 123}'),
    ]


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Logs three messages while it runs."""
    for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(text)  # pyright: ignore[reportDeprecated]
        await anyio.sleep(0.05)
    return "Tool with logging executed successfully"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50, 100."""
    for step in (0, 50, 100):
        await ctx.report_progress(progress=step, total=100, message=f"Completed step {step} of 100")
        await anyio.sleep(0.05)
    meta = ctx.request_context.meta if ctx.request_context else None
    return str(meta.get("progress_token") if meta else 0)


@server.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Logs while it runs (only to a request that asked for logs, in the 2026 era)."""
    await ctx.info("logging tool ran")  # pyright: ignore[reportDeprecated]
    return "logged"


@server.tool()
async def test_streaming_elicitation(ctx: Context) -> str | types.InputRequiredResult:
    """Asks the user in an input-required round (never as a request on the response stream)."""
    if ctx.input_responses:
        return "answered"
    return types.InputRequiredResult(input_requests={"answer": ask("Anything to add?")})


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model."""
    try:
        result = await ctx.session.create_message(  # pyright: ignore[reportDeprecated]
            messages=sample(prompt, 100).params.messages, max_tokens=100, related_request_id=ctx.request_id
        )
    except Exception as exc:
        return f"Sampling not supported or error: {exc}"
    return f"LLM response: {result.content.text if result.content.type == 'text' else 'No response'}"


class Answer(BaseModel):
    response: str = Field(description="User's response")


class Defaults(BaseModel):
    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active", description="User status", json_schema_extra={"enum": ["active", "inactive", "pending"]}
    )
    verified: bool = Field(default=True, description="Verification status")


def _titled(*pairs: tuple[str, str]) -> Any:
    return [{"const": c, "title": t} for c, t in pairs]


class Enums(BaseModel):
    untitledSingle: str = Field(
        description="Simple enum", json_schema_extra={"enum": ["active", "inactive", "pending"]}
    )
    titledSingle: str = Field(
        description="Titled enum",
        json_schema_extra={
            "oneOf": _titled(("low", "Low Priority"), ("medium", "Medium Priority"), ("high", "High Priority"))
        },
    )
    untitledMulti: list[str] = Field(
        description="Multi-select",
        json_schema_extra={"items": {"type": "string", "enum": ["read", "write", "execute"]}},
    )
    titledMulti: list[str] = Field(
        description="Titled multi-select",
        json_schema_extra={
            "items": {"anyOf": _titled(("feature", "New Feature"), ("bug", "Bug Fix"), ("docs", "Documentation"))}
        },
    )
    legacyEnum: str = Field(
        description="Legacy enum",
        json_schema_extra={
            "enum": ["small", "medium", "large"],
            "enumNames": ["Small Size", "Medium Size", "Large Size"],
        },
    )


async def _elicit(ctx: Context, message: str, schema: type[BaseModel], prefix: str) -> str:
    try:
        result = await ctx.elicit(message=message, schema=schema)
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"{prefix}: action={result.action}, content={content}"


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user."""
    return await _elicit(ctx, message, Answer, "User response")


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Asks the user with a default for every field."""
    return await _elicit(ctx, "Please provide user information", Defaults, "Elicitation result")


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Asks the user to pick from enums of every kind."""
    return await _elicit(ctx, "Please select values using different enum schema types", Enums, "Elicitation completed")


@server.tool()
def test_error_handling() -> str:
    """Always fails."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool()
def test_x_mcp_header(
    region: Annotated[
        str, Field(description="Sent as Mcp-Param-Region", json_schema_extra={"x-mcp-header": "Region"})
    ] = "-",
) -> str:
    """An argument the client mirrors into a header."""
    return f"region={region}"


@server.tool()
async def test_missing_capability(ctx: Context) -> str:
    """A JSON-RPC error when the client has not declared sampling."""
    caps = ctx.session.client_capabilities
    if caps is None or caps.sampling is None:
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool requires the client 'sampling' capability",
            data={"requiredCapabilities": {"sampling": {}}},
        )
    return "sampling declared"


@server.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str | types.InputRequiredResult:
    """One elicitation round."""
    answer = (ctx.input_responses or {}).get("user_name")
    if answer is not None:
        name = answer.content.get("name", "?") if isinstance(answer, types.ElicitResult) and answer.content else "?"
        return f"Hello, {name}!"
    return types.InputRequiredResult(input_requests={"user_name": ask("What is your name?")})


@server.tool()
async def test_input_required_result_sampling(ctx: Context) -> str | types.InputRequiredResult:
    """One sampling round."""
    answer = (ctx.input_responses or {}).get("capital_question")
    if answer is not None:
        ok = isinstance(answer, types.CreateMessageResult) and answer.content.type == "text"
        return f"Model said: {answer.content.text if ok else '?'}"  # pyright: ignore
    return types.InputRequiredResult(input_requests={"capital_question": sample("What is the capital of France?", 100)})


@server.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str | types.InputRequiredResult:
    """One roots round."""
    answer = (ctx.input_responses or {}).get("client_roots")
    if answer is not None:
        return f"Client exposed {len(answer.roots) if isinstance(answer, types.ListRootsResult) else 0} root(s)."
    return types.InputRequiredResult(input_requests={"client_roots": types.ListRootsRequest()})


@server.tool()
async def test_input_required_result_request_state(ctx: Context) -> str | types.InputRequiredResult:
    """The requestState must come back."""
    if "confirm" in (ctx.input_responses or {}) and ctx.request_state == "request-state-nonce":
        return "state-ok: confirmation received"
    return types.InputRequiredResult(
        input_requests={"confirm": ask("Please confirm", CONFIRM)}, request_state="request-state-nonce"
    )


@server.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | types.InputRequiredResult:
    """Three requests in one round."""
    if {"user_name", "greeting", "client_roots"} <= (ctx.input_responses or {}).keys():
        return "All inputs received."
    requests: dict[str, types.InputRequest] = {
        "user_name": ask("What is your name?"),
        "greeting": sample("Generate a greeting", 50),
        "client_roots": types.ListRootsRequest(),
    }
    return types.InputRequiredResult(input_requests=requests, request_state="multiple-inputs")


@server.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str | types.InputRequiredResult:
    """Two rounds, the state growing between them."""
    state = json.loads(ctx.request_state) if ctx.request_state else {"round": 0}
    responses = ctx.input_responses or {}

    def content(key: str, field: str) -> Any:
        answer = responses.get(key)
        return answer.content.get(field) if isinstance(answer, types.ElicitResult) and answer.content else None

    if state["round"] == 1 and "step1" in responses:
        color = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
        return types.InputRequiredResult(
            input_requests={"step2": ask("Step 2: What is your favorite color?", color)},
            request_state=json.dumps({"round": 2, "name": content("step1", "name")}),
        )
    if state["round"] == 2 and "step2" in responses:
        return f"{state.get('name')} likes {content('step2', 'color')}."
    return types.InputRequiredResult(
        input_requests={"step1": ask("Step 1: What is your name?")}, request_state=json.dumps({"round": 1})
    )


@server.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str | types.InputRequiredResult:
    """The SDK refuses a requestState it did not seal."""
    if ctx.request_state is None:
        return types.InputRequiredResult(
            input_requests={"confirm": ask("Please confirm", CONFIRM)}, request_state="round-1"
        )
    return f"state-ok: {ctx.request_state}"


@server.tool()
async def test_input_required_result_capabilities(ctx: Context) -> types.InputRequiredResult:
    """Asks only for what the client declared."""
    caps = ctx.client_capabilities
    requests: dict[str, types.InputRequest] = {}
    if caps is None or caps.sampling is not None:
        requests["sample"] = sample("Say hello", 50)
    if caps is None or caps.elicitation is not None:
        requests["ask"] = ask("What is your name?")
    return types.InputRequiredResult(input_requests=requests, request_state="capability-gated")


SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@server.tool(name="json_schema_2020_12_tool")
def schema_2020_12() -> str:
    """Its inputSchema uses the 2020-12 keywords."""
    return "json_schema_2020_12_tool"


server._tool_manager._tools["json_schema_2020_12_tool"].parameters = SCHEMA_2020_12  # pyright: ignore[reportPrivateUsage]


@server.tool()
async def test_reconnection(ctx: Context) -> str:
    """Closes its SSE stream mid-call; the client reconnects."""
    await ctx.info("Before disconnect")  # pyright: ignore[reportDeprecated]
    await ctx.close_sse_stream()
    await anyio.sleep(0.2)
    await ctx.info("After reconnect")  # pyright: ignore[reportDeprecated]
    return "Reconnection test completed"


@server.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Announces a tool list change."""
    await ctx.notify_tools_changed()
    return "tool list changed"


@server.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Announces a prompt list change."""
    await ctx.notify_prompts_changed()
    return "prompt list changed"


@server.resource("test://static-text")
def static_text() -> str:
    """A text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary")
def static_binary() -> bytes:
    """A binary resource."""
    return base64.b64decode(PIXEL)


@server.resource("test://template/{id}/data")
def template(id: str) -> str:
    """A templated resource."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.resource("test://watched-resource")
def watched() -> str:
    """A resource to subscribe to."""
    return "Watched resource content"


def _user(content: Any) -> UserMessage:
    return UserMessage(role="user", content=content)


@server.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """No arguments."""
    return [_user(types.TextContent(type="text", text="This is a simple prompt for testing."))]


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """Two arguments."""
    return [_user(types.TextContent(type="text", text=f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"))]


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """An embedded resource."""
    return [
        _user(_embedded(resourceUri, "text/plain", "Embedded resource content for testing.")),
        _user(types.TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@server.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """An image."""
    return [
        _user(types.ImageContent(type="image", data=PIXEL, mime_type="image/png")),
        _user(types.TextContent(type="text", text="Please analyze the image above.")),
    ]


@server.prompt()
async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | types.InputRequiredResult:
    """A prompt that asks first."""
    answer = (ctx.input_responses or {}).get("user_context")
    if answer is not None:
        text = answer.content.get("context", "?") if isinstance(answer, types.ElicitResult) and answer.content else "?"
        return [_user(types.TextContent(type="text", text=f"Use the following context: {text}"))]
    schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
    return types.InputRequiredResult(
        input_requests={"user_context": ask("What context should the prompt use?", schema)}
    )


async def _empty(ctx: ServerRequestContext, params: Any) -> types.EmptyResult:
    return types.EmptyResult()


for _method, _params in (
    ("logging/setLevel", types.SetLevelRequestParams),
    ("resources/subscribe", types.SubscribeRequestParams),
    ("resources/unsubscribe", types.UnsubscribeRequestParams),
):
    server._lowlevel_server.add_request_handler(_method, _params, _empty)  # pyright: ignore[reportPrivateUsage]


@server.completion()
async def complete(ref: Any, argument: types.CompletionArgument, context: Any) -> types.Completion:
    return types.Completion(values=[], total=0, has_more=False)


def modern_only(app: ASGIApp) -> ASGIApp:
    """A 2026-07-28-only server: an `initialize` is refused with HTTP 400, as such servers do."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            method = json.loads(body).get("method")
        except (ValueError, AttributeError):
            method = None
        if method == "initialize":
            refusal = JSONResponse(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32600, "message": "this server speaks only 2026-07-28"},
                },
                status_code=400,
            )
            return await refusal(scope, receive, send)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return guarded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--modern-only", action="store_true")
    args = parser.parse_args()
    if args.stdio:
        server.run()
        sys.exit(0)
    app = server.streamable_http_app(event_store=Events(), retry_interval=100)
    uvicorn.run(modern_only(app) if args.modern_only else app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
