"""The standalone tool hub: omega's MCP server over streamable HTTP at `/mcp`.

One `OmegaServer` (and so one Toolbox with its downstream connections) serves every client;
the SDK's session manager gives each client its own session and answers both protocol eras.
Safe by default: binds 127.0.0.1, checks Host and Origin against DNS rebinding (`[hub]
allowed_hosts`), limits request bodies, requires a bearer token on every request, loopback included
(`auth.py`), and keeps half-open connections from starving the clients with one (`guard.py`).
Shutdown, decided: stop accepting, let the requests in flight finish (bounded), then end every MCP
session (so open SSE streams close by themselves) and only then close the connections: uvicorn's
own order would wait on streams that never end and then cancel them mid-response.
Binding, decided: omega binds the listening sockets itself (`bind_http`, before the toolbox starts)
and hands them to uvicorn, so a busy port or a bad host is one ConfigError naming the address, not
uvicorn's log line and exit; "serving ..." is logged only once uvicorn has started on them.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import socket
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from omega_mcp._sdk import store_per_session
from omega_mcp.errors import ConfigError, OmegaError
from omega_mcp.server.auth import BearerTokenMiddleware, HubTokens, load_or_create_token
from omega_mcp.server.events import RETRY_MS, HubEvents, StreamPolling
from omega_mcp.server.guard import ConnectionGuard, raise_open_files_limit, waiting_cap
from omega_mcp.server.ops import Operations, OpsMiddleware
from omega_mcp.server.profiles import PROFILE, Profiles
from omega_mcp.server.server import OmegaServer

__all__ = [
    "BearerTokenMiddleware",
    "HubTokens",
    "bind_http",
    "build_http_app",
    "is_loopback",
    "load_or_create_token",
    "serve_http",
]

logger = logging.getLogger(__name__)

MAX_REQUEST_BODY_BYTES = 4 * 1024 * 1024
GRACE_SECONDS = 5.0
"""How long requests in flight get to finish on shutdown."""
_CLOSE_SECONDS = 3.0
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
_BACKLOG = 2048  # uvicorn's default
_PORT_ERRORS = {errno.EADDRINUSE: "address already in use", errno.EACCES: "permission denied (a privileged port?)"}


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _InFlight:
    """Counts the MCP requests being answered (POSTs; a GET stream is no request in flight)."""

    def __init__(self) -> None:
        self.closing = False
        """Set on shutdown: new requests on open connections are refused (the sessions are ending)."""
        self.count = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def started(self) -> None:
        if not self.count:
            self._idle = anyio.Event()
        self.count += 1

    def finished(self) -> None:
        self.count -= 1
        if not self.count:
            self._idle.set()


class _CountRequests:
    """ASGI middleware feeding `_InFlight`, and refusing requests once the hub shuts down."""

    def __init__(self, app: ASGIApp, in_flight: _InFlight) -> None:
        self.app = app
        self._in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._in_flight.closing:
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "omega is shutting down"}}
            await JSONResponse(body, status_code=503, headers={"Connection": "close"})(scope, receive, send)
            return
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        self._in_flight.started()
        try:
            await self.app(scope, receive, send)
        finally:
            self._in_flight.finished()


class _ProfileScope:
    """ASGI middleware: an HTTP request runs with `PROFILE` set to its token's client from the start.
    The SDK's 2026 transport checks a call's `Mcp-Param-*` headers against the tool's schema
    (`input_schema_for_caller`) before the MCP server's middleware (`ClientScope`) runs; without this,
    a client's headers were checked against a tool its profile hides, and the answer told it so."""

    def __init__(self, app: ASGIApp, profiles: Profiles) -> None:
        self.app = app
        self._profiles = profiles

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = PROFILE.set(self._profiles.of(_Scoped(scope)))
        try:
            await self.app(scope, receive, send)
        finally:
            PROFILE.reset(token)


class _Scoped:
    """What `Profiles.of` reads of a request: its ASGI scope (where the token's client is)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope


def _security(host: str, port: int, allowed_hosts: Sequence[str] | None = None) -> TransportSecuritySettings:
    if allowed_hosts is not None:  # `[hub] allowed_hosts`: exactly these (behind a balancer)
        hosts = [h for name in allowed_hosts for h in ((name,) if ":" in name.lstrip("[") else (name, f"{name}:*"))]
        bare = [h.rsplit(":", 1)[0] if ":" in h.lstrip("[") else h for h in allowed_hosts]
        origins = [f"{scheme}://{name}:*" for name in bare for scheme in ("http", "https")]
        origins += [f"{scheme}://{name}" for name in bare for scheme in ("http", "https")]
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        )
    hosts = [f"{name}:{port}" for name in _LOOPBACK_NAMES] + [f"{name}:*" for name in _LOOPBACK_NAMES]
    origins = [f"http://{name}:*" for name in _LOOPBACK_NAMES] + [f"https://{name}:*" for name in _LOOPBACK_NAMES]
    wildcard = host in ("0.0.0.0", "::", "")  # noqa: S104 - detecting a wildcard bind, not binding
    if not wildcard and not is_loopback(host):
        bracketed = f"[{host}]" if ":" in host else host
        hosts += [f"{bracketed}:{port}", bracketed]
        origins += [f"http://{bracketed}:{port}", f"https://{bracketed}:{port}"]
    # A wildcard bind can be reached under any of the machine's names: Host cannot be pinned unless
    # `allowed_hosts` says which, so the bearer token is what stops a rebinding page.
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=not wildcard, allowed_hosts=hosts, allowed_origins=origins
    )


def build_http_app(
    server: OmegaServer,
    *,
    host: str,
    port: int,
    tokens: HubTokens,
    allowed_hosts: Sequence[str] | None = None,
    max_request_body_bytes: int = MAX_REQUEST_BODY_BYTES,
    ops: Operations | None = None,
    events: HubEvents | None = None,
    poll_seconds: float | None = None,
) -> Starlette:
    """The ASGI app serving `/mcp`; every request must carry one of `tokens`; bodies up to `max_request_body_bytes`;
    with `ops`, also the probes, `/metrics` and drain (`ops.py`).

    Handshake-era streams are resumable: each session keeps its events in its own store of `events`
    (`events.py`; a new `HubEvents` when None), a stream opens with a priming event and `retry:`, and
    with `poll_seconds` (`[hub] sse_poll_seconds`) a request unanswered that long has its stream closed."""
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        host=host,
        transport_security=_security(host, port, allowed_hosts),
        max_request_body_size=max_request_body_bytes,
        retry_interval=RETRY_MS,
    )
    store_per_session(server.session_manager, (events or HubEvents()).new)
    if server.profiles is not None:  # inside the token check, which names the client
        app.add_middleware(_ProfileScope, profiles=server.profiles)
    app.add_middleware(BearerTokenMiddleware, tokens=tokens)
    in_flight = _InFlight()
    if poll_seconds is not None:
        counters = [(in_flight.started, in_flight.finished)]
        if ops is not None:
            counters.append((ops.arrived, ops.finished))
        server.middleware.insert(0, StreamPolling(poll_seconds, counters))
    app.add_middleware(_CountRequests, in_flight=in_flight)
    app.state.in_flight = in_flight
    if ops is not None:
        app.add_middleware(OpsMiddleware, ops=ops)
    return app


async def _shut_down(http: uvicorn.Server, in_flight: _InFlight) -> None:
    """Stop accepting, let requests in flight finish, end the MCP sessions, close the connections."""
    in_flight.closing = True
    http.should_exit = True
    if not http.started:
        return
    for listener in http.servers:
        listener.close()
    if in_flight.count:
        logger.info("waiting up to %g s for %d request(s) in flight", GRACE_SECONDS, in_flight.count)
    with anyio.move_on_after(GRACE_SECONDS):
        await in_flight.wait_idle()
    with anyio.move_on_after(_CLOSE_SECONDS):
        # The lifespan's end stops the SDK's session manager: every session ends, its streams close.
        await http.lifespan.shutdown()
    await http.shutdown()  # the connections are idle now; the lifespan is already done


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen(family: int, kind: int, proto: int, sockaddr: tuple[Any, ...]) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_http(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on the addresses `host` resolves to (as asyncio's `create_server` binds them).

    An address this machine does not have is skipped when another one binds (`localhost` without IPv6).

    Raises:
        ConfigError: one line naming the address: `--port` when it is in use or not permitted,
            `--host` when the host does not resolve or is not an address of this machine.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    address = _address(bare, port)
    try:
        infos = socket.getaddrinfo(bare or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(f"cannot listen on {address}: unknown host ({why})", key="--host") from None
    sockets: list[socket.socket] = []
    missing: OSError | None = None
    try:
        for family, kind, proto, _, sockaddr in dict.fromkeys(infos):
            try:
                sockets.append(_listen(family, kind, proto, sockaddr))
            except OSError as exc:
                if exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    raise
                missing = exc
        if not sockets:
            raise missing or OSError(errno.EADDRNOTAVAIL, "no address to listen on")
    except OSError as exc:
        for sock in sockets:
            sock.close()
        code = exc.errno or 0
        why = _PORT_ERRORS.get(code) or (
            "not an address of this machine" if code == errno.EADDRNOTAVAIL else (exc.strerror or str(exc)).lower()
        )
        raise ConfigError(
            f"cannot listen on {address}: {why}", key="--port" if code in _PORT_ERRORS else "--host"
        ) from None
    return sockets


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: omega's CLI owns SIGINT/SIGTERM and cancels us.

    (uvicorn re-raises a captured SIGTERM after shutdown, which would kill the process before the
    Toolbox could stop downstream servers and background shells.) `announce` is logged once it has
    started listening.
    """

    announce = ""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.announce:
            logger.info("%s", self.announce)


async def serve_http(
    server: OmegaServer,
    *,
    host: str,
    port: int,
    token_file: Path,
    sockets: list[socket.socket] | None = None,
    clients: Sequence[tuple[str, str]] = (),
    allowed_hosts: Sequence[str] | None = None,
    max_message_bytes: int = MAX_REQUEST_BODY_BYTES,
    tokens: HubTokens | None = None,
    ops: Operations | None = None,
    poll_seconds: float | None = None,
) -> None:
    """Serve on `sockets` (from `bind_http`; bound here when None) until cancelled, then shut down gracefully (bounded).

    `clients` are the `[hub.clients]` (name, token) pairs accepted besides the hub's own token;
    `max_message_bytes` (`[hub] max_message_mb`) bounds a request's body. `tokens` replaces the
    token file and `clients` (the caller keeps them, to reload); `ops` adds the probes, metrics and drain;
    `poll_seconds` is `[hub] sse_poll_seconds`.

    Raises:
        ConfigError: the token cannot be loaded or created, two clients share one, or the port cannot be bound.
        OmegaError: the app failed to start.
    """
    if tokens is None:
        tokens = HubTokens(load_or_create_token(token_file), clients)
    if sockets is None:
        sockets = bind_http(host, port)
    app = build_http_app(
        server,
        host=host,
        port=port,
        tokens=tokens,
        allowed_hosts=allowed_hosts,
        max_request_body_bytes=max_message_bytes,
        ops=ops,
        poll_seconds=poll_seconds,
    )
    guard = ConnectionGuard(tokens.authorized, waiting_cap(raise_open_files_limit()))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=int(_CLOSE_SECONDS),
        access_log=False,
        http=guard.protocol(),
    )
    http = _Uvicorn(config)
    http.announce = f"serving streamable HTTP at http://{_address(host.strip('[]'), port)}/mcp (bearer token required)"
    try:
        await http.serve(sockets)
    except SystemExit:
        # uvicorn exits the process when its startup fails; the sockets are bound already, so it is the app.
        raise OmegaError("the HTTP hub failed to start (see the log above)") from None
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE_SECONDS + 2 * _CLOSE_SECONDS):
            await _shut_down(http, app.state.in_flight)
        raise
    finally:
        for sock in sockets:
            sock.close()
