"""The standalone tool hub: omega's MCP server over streamable HTTP at `/mcp`.

One `OmegaServer` (and so one Toolbox with its downstream connections) serves every client;
the SDK's session manager gives each client its own session and answers both protocol eras.
Safe by default: binds 127.0.0.1, checks Host and Origin against DNS rebinding, limits request
bodies, and requires a bearer token whenever the bind address is not loopback (`OMEGA_TOKEN`,
or a token generated once into `$OMEGA_HOME/token`, mode 0600, which the tools cannot read).
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
import hmac
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from omega_mcp.errors import ConfigError, OmegaError
from omega_mcp.server.server import OmegaServer

__all__ = [
    "BearerTokenMiddleware",
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


def load_or_create_token(token_file: Path, environ: Mapping[str, str] | None = None) -> str:
    """`OMEGA_TOKEN`, else the token stored in `token_file`, else a new one written there (0600).

    Raises:
        ConfigError: the token file exists but cannot be read, or cannot be created.
    """
    env = os.environ if environ is None else environ
    given = env.get("OMEGA_TOKEN")
    if given:
        return given
    try:
        token = token_file.read_text(encoding="utf-8").strip()
        if token:
            return token
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot read the hub token: {exc.strerror}", path=str(token_file)) from None
    token = secrets.token_urlsafe(32)
    try:
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
        os.chmod(token_file, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write the hub token: {exc.strerror}", path=str(token_file)) from None
    logger.warning("generated a hub token in %s (send it as 'Authorization: Bearer <token>')", token_file)
    return token


class BearerTokenMiddleware:
    """Rejects HTTP requests without `Authorization: Bearer <token>` (constant-time compare)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            supplied = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(supplied, self._expected):
                response = JSONResponse(
                    {"error": "unauthorized", "error_description": "missing or wrong bearer token"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="omega-mcp"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


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


def _security(host: str, port: int) -> TransportSecuritySettings:
    hosts = [f"{name}:{port}" for name in _LOOPBACK_NAMES] + [f"{name}:*" for name in _LOOPBACK_NAMES]
    origins = [f"http://{name}:*" for name in _LOOPBACK_NAMES] + [f"https://{name}:*" for name in _LOOPBACK_NAMES]
    wildcard = host in ("0.0.0.0", "::", "")  # noqa: S104 - detecting a wildcard bind, not binding
    if not wildcard and not is_loopback(host):
        bracketed = f"[{host}]" if ":" in host else host
        hosts += [f"{bracketed}:{port}", bracketed]
        origins += [f"http://{bracketed}:{port}", f"https://{bracketed}:{port}"]
    # A wildcard bind can be reached under any of the machine's names: Host cannot be pinned, so
    # the bearer token (always required off loopback) is what stops a rebinding page.
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=not wildcard, allowed_hosts=hosts, allowed_origins=origins
    )


def build_http_app(server: OmegaServer, *, host: str, port: int, token: str | None) -> Starlette:
    """The ASGI app serving `/mcp`; with `token`, every request must carry it."""
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        host=host,
        transport_security=_security(host, port),
        max_request_body_size=MAX_REQUEST_BODY_BYTES,
    )
    if token is not None:
        app.add_middleware(BearerTokenMiddleware, token=token)
    in_flight = _InFlight()
    app.add_middleware(_CountRequests, in_flight=in_flight)
    app.state.in_flight = in_flight
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
    server: OmegaServer, *, host: str, port: int, token_file: Path, sockets: list[socket.socket] | None = None
) -> None:
    """Serve on `sockets` (from `bind_http`; bound here when None) until cancelled, then shut down gracefully (bounded).

    Raises:
        ConfigError: the token cannot be loaded or created, or the port cannot be bound.
        OmegaError: the app failed to start.
    """
    token: str | None = None
    if not is_loopback(host) or os.environ.get("OMEGA_TOKEN"):
        token = load_or_create_token(token_file)
    if sockets is None:
        sockets = bind_http(host, port)
    app = build_http_app(server, host=host, port=port, token=token)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=int(_CLOSE_SECONDS),
        access_log=False,
    )
    http = _Uvicorn(config)
    http.announce = (
        f"serving streamable HTTP at http://{_address(host.strip('[]'), port)}/mcp "
        f"({'bearer token required' if token else 'loopback only, no token'})"
    )
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
