"""The reference client the conformance suite's client scenarios are measured with, directly and through omega.

Built on the SDK's `mcp.Client` the way the python-sdk's own conformance client drives each
scenario (what it connects with, which tools it calls with which arguments, how it answers
elicitations and the OAuth redirect), so that "directly" is the SDK client's own verdict. Run as
`python reference_client.py URL` with the suite's environment (`MCP_CONFORMANCE_SCENARIO`,
`MCP_CONFORMANCE_CONTEXT`, `MCP_CONFORMANCE_PROTOCOL_VERSION`). `drive` is the scenario logic
alone, over any `Connect` (omega_client.py drives omega with it, behind a renaming shim).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import mcp
from mcp import types
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import AnyUrl

CIMD_URL = "https://conformance-test.local/client-metadata.json"
REDIRECT = "http://localhost:3000/callback"
Connect = Callable[..., AbstractAsyncContextManager[Any]]
"""`connect(**callbacks)`: an entered client (an `mcp.Client`, or something that acts like one)."""


def scenario() -> str:
    return os.environ.get("MCP_CONFORMANCE_SCENARIO", "")


def context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    return json.loads(raw) if raw else {}


def mode() -> str:
    """`auto` (discover, then the handshake) on a 2026-era leg or outside the suite, else `legacy`."""
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION")
    return "auto" if version is None or version in MODERN_PROTOCOL_VERSIONS else "legacy"


# -- callbacks ---------------------------------------------------------------------------------


async def defaults(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    """Accept, with each field's schema default (SEP-1034)."""
    content: dict[str, Any] = {}
    if isinstance(params, types.ElicitRequestFormParams):
        for name, schema in (params.requested_schema.get("properties") or {}).items():
            if isinstance(schema, dict) and "default" in schema:
                content[name] = schema["default"]
    return types.ElicitResult(action="accept", content=content)


async def confirm(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirmed": True})


async def sample(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(text=""), model="reference")


async def roots(ctx: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


def stub_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """The least arguments that satisfy a schema's `required` list."""
    typed: dict[str, Any] = {"string": "x", "integer": 0, "number": 0, "boolean": False, "object": {}, "array": []}
    typed["null"] = None
    properties = schema.get("properties") or {}
    stubs: dict[str, Any] = {}
    for name in schema.get("required") or []:
        kind = (properties.get(name) or {}).get("type")
        stubs[name] = typed.get(kind, "x") if isinstance(kind, str) else "x"
    return stubs


# -- the scenarios -----------------------------------------------------------------------------


async def _call_quietly(client: Any, name: str, arguments: dict[str, Any]) -> None:
    try:
        await client.call_tool(name, arguments)
    except Exception as exc:  # the scenario allows a failing call: it judges what was sent
        print(f"{name}: {exc}", file=sys.stderr)


async def drive(connect: Connect, name: str, ctx: dict[str, Any]) -> None:
    """What the reference client does in scenario `name`, over `connect`."""
    if name == "elicitation-sep1034-client-defaults":
        async with connect(elicitation_callback=defaults) as client:
            await client.list_tools()
            await client.call_tool("test_client_elicitation_defaults", {})
    elif name == "sep-2322-client-request-state":
        async with connect(elicitation_callback=confirm) as client:
            await client.list_tools()
            for tool in (
                "test_mrtr_echo_state",
                "test_mrtr_unrelated",
                "test_mrtr_no_state",
                "test_mrtr_no_result_type",
            ):
                await client.call_tool(tool, {})
    elif name == "request-metadata":
        callbacks = {"sampling_callback": sample, "list_roots_callback": roots, "elicitation_callback": defaults}
        async with connect(**callbacks) as client:
            await client.list_tools()
            await client.call_tool("add_numbers", {"a": 5, "b": 3})
    elif name == "json-schema-2020-12-preservation":
        async with connect() as client:
            listed = await client.list_tools()
            focal = next(tool for tool in listed.tools if tool.name == "json_schema_2020_12_tool")
            await client.call_tool("json_schema_echo", {"schema": focal.input_schema})
    elif name == "http-invalid-tool-headers":
        async with connect() as client:
            for tool in (await client.list_tools()).tools:
                await _call_quietly(client, tool.name, stub_arguments(tool.input_schema))
    elif name == "http-custom-headers":
        async with connect() as client:
            surfaced = {tool.name for tool in (await client.list_tools()).tools}
            for call in ctx.get("toolCalls") or []:
                if call["name"] in surfaced:
                    await _call_quietly(client, call["name"], call.get("arguments") or {})
    elif name.startswith("auth/"):
        async with connect(elicitation_callback=defaults) as client:
            tools = (await client.list_tools()).tools
            if tools:
                await _call_quietly(client, tools[0].name, {})
    else:  # initialize, tools_call, sse-retry, json-schema-ref-no-deref, http-standard-headers
        async with connect() as client:
            await client.list_tools()
            call = {"tools_call": ("add_numbers", {"a": 5, "b": 3}), "sse-retry": ("test_reconnection", {})}
            call |= {"http-standard-headers": ("add_numbers", {"a": 5, "b": 3})}
            if name in call:
                await client.call_tool(*call[name])


# -- the direct client's connection (OAuth included) -------------------------------------------


class _Memory(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class _Redirect:
    """Approve without a person: fetch the authorization URL and take the code from its redirect."""

    def __init__(self) -> None:
        self.answer: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        async with httpx2.AsyncClient() as http:
            response = await http.get(url, follow_redirects=False)
        query = parse_qs(urlsplit(response.headers.get("location", "")).query)
        if "code" not in query:
            raise RuntimeError(f"no code in the redirect of {url}: HTTP {response.status_code}")
        first = {k: v[0] for k, v in query.items()}
        self.answer = AuthorizationCodeResult(code=first["code"], state=first.get("state"), iss=first.get("iss"))

    async def callback(self) -> AuthorizationCodeResult:
        assert self.answer is not None
        return self.answer


def direct(url: str, ctx: dict[str, Any]) -> Connect:
    """Connect straight to `url` (with the OAuth flow on `auth/` scenarios)."""

    @asynccontextmanager
    async def connect(**callbacks: Any) -> AsyncIterator[Any]:
        era = "legacy" if scenario() == "json-schema-ref-no-deref" else mode()  # its mock speaks the handshake only
        if not scenario().startswith("auth/"):
            async with mcp.Client(url, mode=era, **callbacks) as client:
                yield client
            return
        storage, redirect = _Memory(), _Redirect()
        if ctx.get("client_id"):
            secret = ctx.get("client_secret")
            storage.client = OAuthClientInformationFull(
                client_id=ctx["client_id"],
                client_secret=secret,
                redirect_uris=[AnyUrl(REDIRECT)],
                token_endpoint_auth_method="client_secret_basic" if secret else "none",
            )
        metadata = OAuthClientMetadata(
            client_name="reference-client",
            redirect_uris=[AnyUrl(REDIRECT)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        )
        auth = OAuthClientProvider(
            url,
            metadata,
            storage,
            redirect_handler=redirect.redirect,
            callback_handler=redirect.callback,
            client_metadata_url=CIMD_URL,
        )
        http = httpx2.AsyncClient(auth=auth, timeout=30.0)
        async with mcp.Client(streamable_http_client(url, http_client=http), mode=era, **callbacks) as client:
            yield client

    return connect


def main() -> None:
    url = sys.argv[-1]
    anyio.run(drive, direct(url, context()), scenario(), context())


if __name__ == "__main__":
    main()
