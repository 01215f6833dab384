"""A protected MCP server and its OAuth 2.1 authorization server on 127.0.0.1, for the OAuth tests.

One uvicorn process-thread serves both, each written here from the RFCs (not the SDK's server-side
auth, so the SDK client is checked against an independent implementation):
- the MCP resource at `/mcp` (an SDK `Server` with one tool, `whoami`), answering 401 with
  `WWW-Authenticate: Bearer resource_metadata=...` to a request without a live access token;
- protected-resource metadata (RFC 9728) at `/.well-known/oauth-protected-resource/mcp`;
- an authorization server whose issuer has a path (`/auth`), so nothing works by guessing
  `/token` at the origin: metadata (RFC 8414) at `/.well-known/oauth-authorization-server/auth`,
  dynamic client registration (RFC 7591), an authorize endpoint that approves at once and
  redirects with a code (and `iss`, RFC 9207), and a token endpoint checking PKCE (S256), the
  redirect URI, the client and the resource, with rotating refresh tokens.
The server runs in a thread with its own event loop, so tests can run the CLI as a subprocess
while it serves; `grants` records every token request, `expire_access_tokens` ends the access
tokens issued so far.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import stat
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
import uvicorn
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ToolsListChanged
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["OAuthFixture", "browser", "no_proxy_env", "oauth_server", "visit"]

_BOUND_SECONDS = 20.0
_LOOPBACK = "http://127.0.0.1:"


@dataclass
class OAuthFixture:
    """The state of the fixture servers; the test reads and steers it (one lock guards it)."""

    access_ttl: int = 3600
    base: str = ""
    clients: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    codes: dict[str, dict[str, str]] = field(default_factory=dict[str, dict[str, str]])
    access: dict[str, float] = field(default_factory=dict[str, float])
    refresh: dict[str, str] = field(default_factory=dict[str, str])
    grants: list[str] = field(default_factory=list[str])
    """grant_type of every successful token request, in order."""
    secrets: dict[str, str] = field(default_factory=dict[str, str])
    """The secrets of confidential clients (client_id -> secret)."""
    auth_methods: list[str] = field(default_factory=lambda: ["none"])
    """`token_endpoint_auth_methods_supported`."""
    client_auth: list[str] = field(default_factory=list[str])
    """How each token request authenticated its client: "none", "client_secret_basic" or "client_secret_post"."""
    required_scope: str | None = None
    """A scope every request to /mcp needs besides `tools` (403 insufficient_scope without it)."""
    scopes: dict[str, str] = field(default_factory=dict[str, str])
    """The scope granted with each access or refresh token."""
    refuse: str | None = None
    """An OAuth error code the authorize endpoint answers with (redirected back), instead of a code."""
    authorize_requests: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    resource_requests: list[str] = field(default_factory=list[str])
    """The Authorization header (or "") of every request to /mcp."""
    chatter: bool = True
    """Whether a chatty server (`oauth_server(chatty=True)`) keeps announcing tool list changes."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def issuer(self) -> str:
        return f"{self.base}/auth"

    def preregister(self, client_id: str, secret: str | None = None) -> None:
        """A client registered beforehand, for any loopback callback port (RFC 8252 section 7.3);
        with `secret`, a confidential one."""
        with self.lock:
            self.clients[client_id] = ["http://127.0.0.1/callback"]
            if secret is not None:
                self.secrets[client_id] = secret

    def expire_access_tokens(self) -> None:
        """Every access token issued so far stops working (the refresh tokens still do)."""
        with self.lock:
            self.access.clear()

    def revoke_refresh_tokens(self) -> None:
        with self.lock:
            self.refresh.clear()

    def _issue(self, client_id: str, scope: str) -> dict[str, Any]:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.access[access] = time.time() + self.access_ttl
        self.refresh[refresh] = client_id
        self.scopes[access] = self.scopes[refresh] = scope
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.access_ttl,
            "refresh_token": refresh,
            "scope": scope,
        }

    def _client(self, request: Request, form: dict[str, str]) -> str | None:
        """The authenticated client of a token request (None: it failed to authenticate)."""
        client_id, secret, how = form.get("client_id", ""), form.get("client_secret"), "none"
        basic = request.headers.get("authorization", "")
        if basic.startswith("Basic "):
            client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
            how = "client_secret_basic"
        elif secret is not None:
            how = "client_secret_post"
        expected = self.secrets.get(client_id)
        if expected is not None and (secret != expected or how not in self.auth_methods):
            return None
        self.client_auth.append(how)
        return client_id


def _error(code: str, status: int = 400) -> Response:
    return JSONResponse({"error": code}, status_code=status)


def _routes(fx: OAuthFixture) -> list[Route]:
    async def resource_metadata(request: Request) -> Response:
        return JSONResponse({"resource": fx.url, "authorization_servers": [fx.issuer], "scopes_supported": ["tools"]})

    async def server_metadata(request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": fx.issuer,
                "authorization_endpoint": f"{fx.issuer}/authorize",
                "token_endpoint": f"{fx.issuer}/token",
                "registration_endpoint": f"{fx.issuer}/register",
                "scopes_supported": ["tools"],
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": fx.auth_methods,
                "authorization_response_iss_parameter_supported": True,
            }
        )

    async def register(request: Request) -> Response:
        body = await request.json()
        uris = body.get("redirect_uris")
        if not isinstance(uris, list) or not uris:
            return _error("invalid_redirect_uri")
        client_id = secrets.token_urlsafe(12)
        with fx.lock:
            fx.clients[client_id] = [str(u) for u in uris]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
        answer = {**body, "client_id": client_id, "token_endpoint_auth_method": "none"}
        return JSONResponse(answer, status_code=201)

    async def authorize(request: Request) -> Response:
        q = dict(request.query_params)
        with fx.lock:
            fx.authorize_requests.append(q)
            uris = fx.clients.get(q.get("client_id", ""))
        redirect = q.get("redirect_uri", "")
        loopback = urlsplit(redirect)._replace(netloc="127.0.0.1").geturl() if redirect.startswith(_LOOPBACK) else None
        if uris is None or (redirect not in uris and loopback not in uris):
            return _error("invalid_request")  # never redirect to an unregistered URI
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("state"):
            return _error("invalid_request")
        if fx.refuse is not None:  # the person said no (RFC 6749 section 4.1.2.1)
            query = urlencode({"error": fx.refuse, "state": q["state"], "iss": fx.issuer})
            return RedirectResponse(f"{q['redirect_uri']}?{query}", status_code=302)
        code = secrets.token_urlsafe(16)
        with fx.lock:
            fx.codes[code] = q
        query = urlencode({"code": code, "state": q["state"], "iss": fx.issuer})
        return RedirectResponse(f"{q['redirect_uri']}?{query}", status_code=302)

    async def token(request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        kind = form.get("grant_type")
        with fx.lock:
            client_id = fx._client(request, form)  # pyright: ignore[reportPrivateUsage]
            if client_id is None:
                return _error("invalid_client", 401)
            if kind == "authorization_code":
                grant = fx.codes.pop(form.get("code", ""), None)
                if grant is None or grant["client_id"] != client_id:
                    return _error("invalid_grant")
                if grant["redirect_uri"] != form.get("redirect_uri") or form.get("resource") != fx.url:
                    return _error("invalid_grant")
                digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
                if base64.urlsafe_b64encode(digest).decode().rstrip("=") != grant["code_challenge"]:
                    return _error("invalid_grant")  # PKCE
                scope = grant.get("scope") or "tools"
            elif kind == "refresh_token":
                token = form.get("refresh_token", "")
                owner = fx.refresh.pop(token, None)  # rotated: used once
                if owner is None or owner != client_id:
                    return _error("invalid_grant")
                scope = fx.scopes.get(token, "tools")
            else:
                return _error("unsupported_grant_type")
            fx.grants.append(kind)
            return JSONResponse(fx._issue(client_id, scope), headers={"Cache-Control": "no-store"})  # pyright: ignore[reportPrivateUsage]

    return [
        Route("/.well-known/oauth-protected-resource/mcp", resource_metadata),
        Route("/.well-known/oauth-authorization-server/auth", server_metadata),
        Route("/auth/register", register, methods=["POST"]),
        Route("/auth/authorize", authorize),
        Route("/auth/token", token, methods=["POST"]),
    ]


class _Protect:
    """Requests to /mcp need a live bearer token; anything else passes."""

    def __init__(self, app: ASGIApp, fx: OAuthFixture) -> None:
        self.app, self.fx = app, fx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            headers = dict(scope["headers"])
            presented = headers.get(b"authorization", b"").decode()
            with self.fx.lock:
                self.fx.resource_requests.append(presented)
                token = presented.removeprefix("Bearer ")
                expiry = self.fx.access.get(token)
                granted = self.fx.scopes.get(token, "").split()
                required = self.fx.required_scope
            metadata = f'resource_metadata="{self.fx.base}/.well-known/oauth-protected-resource/mcp"'
            if not presented.startswith("Bearer ") or expiry is None or expiry < time.time():
                challenge = f"Bearer {metadata}"
                response = JSONResponse({"error": "invalid_token"}, 401, headers={"WWW-Authenticate": challenge})
                await response(scope, receive, send)
                return
            if required is not None and required not in granted:  # RFC 6750 section 3.1: a step-up
                challenge = f'Bearer error="insufficient_scope", scope="tools {required}", {metadata}'
                response = JSONResponse({"error": "insufficient_scope"}, 403, headers={"WWW-Authenticate": challenge})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


_CHATTER_SECONDS = 0.002
_CHATTER_BURST = 4


def _mcp_server(fx: OAuthFixture, chatty: bool) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {}}
        return types.ListToolsResult(
            tools=[types.Tool(name="whoami", description="Says who asks", input_schema=schema)]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="authorized caller")])

    if not chatty:
        return Server("protected", on_list_tools=list_tools, on_call_tool=call_tool)
    bus = InMemorySubscriptionBus()

    @asynccontextmanager
    async def chatter(server: Server[Any]) -> AsyncIterator[None]:
        async def publish() -> None:
            while True:
                for _ in range(_CHATTER_BURST if fx.chatter else 0):
                    await bus.publish(ToolsListChanged())
                await anyio.sleep(_CHATTER_SECONDS)

        async with anyio.create_task_group() as tg:
            tg.start_soon(publish)
            yield
            tg.cancel_scope.cancel()

    return Server(
        "protected",
        lifespan=chatter,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(bus),
    )


@contextmanager
def oauth_server(access_ttl: int = 3600, *, chatty: bool = False) -> Iterator[OAuthFixture]:
    """Serve the fixture on a free 127.0.0.1 port in a thread for the `with` block.

    `chatty`: the MCP server serves `subscriptions/listen` (so a 2026-era client listens for list
    changes) and, while `fx.chatter` is set, says its tool list changed every few milliseconds, so
    a client that closes its session does so with events still arriving."""
    fx = OAuthFixture(access_ttl=access_ttl)
    app = _Protect(_mcp_server(fx, chatty).streamable_http_app(custom_starlette_routes=_routes(fx)), fx)
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="on"))
    thread = threading.Thread(target=anyio.run, args=(web.serve,), daemon=True)
    thread.start()
    deadline = time.monotonic() + _BOUND_SECONDS
    while not web.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the OAuth fixture server did not start")
        time.sleep(0.02)
    fx.base = f"http://127.0.0.1:{web.servers[0].sockets[0].getsockname()[1]}"
    try:
        yield fx
    finally:
        web.should_exit = True
        thread.join(_BOUND_SECONDS)


BROWSER_SCRIPT = """\
#!{python}
# A stand-in browser: records that it was opened, then visits the URL (redirects followed).
import sys, urllib.request
with open({log!r}, "a") as log:
    log.write(sys.argv[1] + "\\n")
if {visit!r}:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as page:
        page.read()
"""


def browser(directory: Path, *, visit: bool = True) -> tuple[Path, Path]:
    """An executable for `$BROWSER` and the log file it appends each URL it is opened with to."""
    log = directory / "browser.log"
    script = directory / ("browser" if visit else "idle-browser")
    script.write_text(BROWSER_SCRIPT.format(python=sys.executable, log=str(log), visit=visit))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def no_proxy_env(env: dict[str, str]) -> dict[str, str]:
    """`env` without proxy settings, so loopback requests go straight to the fixture."""
    return {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")} | {
        "NO_PROXY": "127.0.0.1,localhost"
    }


def visit(url: str) -> bool:
    """What the stand-in browser does, in-process: open `url`, follow the redirects (no proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=_BOUND_SECONDS) as page:
        page.read()
    return True
