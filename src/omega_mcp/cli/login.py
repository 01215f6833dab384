"""`omega-mcp login SERVER` and `omega-mcp logout SERVER`: OAuth for a remote server with `auth = "oauth"`.

`login` connects to the server as the hub would, but with someone to ask: when the server answers
401 the SDK's flow discovers its authorization server, registers omega (or uses `client_id` or
the client ID metadata document), and sends the person to the authorization URL, which is always
printed (stderr) and opened with Python's `webbrowser` (so `$BROWSER` is honoured) in a daemon
thread: a browser command that never exits cannot hold omega. The browser comes back to a
loopback callback on 127.0.0.1 (RFC 8252), on the port of the last registration when it is free
(the registered redirect URI stays valid), else on a random one (registered anew). The wait is
bounded by `--timeout`; Ctrl-C cancels it cleanly (nothing is stored, the old tokens stay). The
tokens land in `$OMEGA_HOME/state/oauth/<server>.json` (proxy/oauth.py); `logout` deletes that
record (tokens and registered client). A name that is not a remote server with `auth = "oauth"`
is a usage error (exit 2). The SDK is imported inside the functions, as in every command module.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import webbrowser
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from html import escape
from typing import TYPE_CHECKING, TextIO
from urllib.parse import parse_qs, urlsplit

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.stapled import MultiListener

from omega_mcp.cli.common import DEFAULT_LOGIN_TIMEOUT, EXIT_OK, UsageError, say
from omega_mcp.config import Config, ServerConfig
from omega_mcp.errors import ConfigError, OAuthError

if TYPE_CHECKING:
    from mcp.shared.auth import AuthorizationCodeResult

__all__ = ["DEFAULT_LOGIN_TIMEOUT", "run_login", "run_logout"]

_HEAD_LIMIT = 16 * 1024  # a callback request is one line of query string; more is no browser
_REQUEST_SECONDS = 10.0  # one connection to the callback, from accept to answer


def _oauth_server(config: Config, name: str) -> ServerConfig:
    """The `[servers.NAME]` entry to log in to, or a usage error saying why there is none."""
    entry = config.servers.get(name)
    where = str(config.path) if config.path is not None else None
    if entry is None:
        known = ", ".join(n for n, s in config.servers.items() if s.auth == "oauth") or "none"
        found = f"in {where}" if where else "(no servers.toml was found)"
        raise UsageError(f'no server named {name!r} {found}; servers with auth = "oauth": {known}')
    if entry.url is None:
        raise ConfigError(
            'is a stdio server (`command`); login is for remote servers (`url`) with auth = "oauth"',
            path=where,
            key=f"servers.{name}",
        )
    if entry.auth != "oauth":
        raise ConfigError(
            f'has no auth = "oauth"; add it to [servers.{name}] to log in with OAuth', path=where, key=f"servers.{name}"
        )
    problem = config.server_problem(name)
    if problem is not None:
        raise ConfigError(problem, path=where, key=f"servers.{name}")
    url = entry.client_metadata_url
    if url is not None and not (url.startswith("https://") and urlsplit(url).path not in ("", "/")):
        raise ConfigError(
            f"must be an https URL with a path (the client ID metadata document), got {url!r}",
            path=where,
            key=f"servers.{name}.client_metadata_url",
        )
    return entry


class _Callback:
    """The loopback endpoint the browser comes back to: one path, the state omega sent, one answer."""

    def __init__(self, listener: MultiListener[SocketStream], server_name: str, wait_seconds: float) -> None:
        self._server_name = server_name
        self._wait_seconds = wait_seconds
        self.port: int = listener.extra(SocketAttribute.local_port)  # noqa: S610 - anyio's typed attributes
        self.redirect_uri = f"http://127.0.0.1:{self.port}/callback"
        self.asked = False
        """Whether the flow got as far as sending someone to the authorization server."""
        self._state: str | None = None
        self._answer: AuthorizationCodeResult | OAuthError | None = None
        self._arrived = anyio.Event()

    @classmethod
    @asynccontextmanager
    async def listen(cls, port: int | None, server_name: str, wait_seconds: float) -> AsyncGenerator[_Callback]:
        """Serve the callback on 127.0.0.1, on `port` when it is free, else on a random port.

        `answer` waits `wait_seconds` for the browser.
        """
        listener: MultiListener[SocketStream] | None = None
        if port is not None:
            with contextlib.suppress(OSError):
                listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
        if listener is None:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        callback = cls(listener, server_name, wait_seconds)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, callback._handle)
            try:
                yield callback
            finally:
                tg.cancel_scope.cancel()

    def expect(self, authorization_url: str) -> None:
        """Note the `state` of the URL the person is sent to: only that answer is taken."""
        self.asked = True
        self._state = (parse_qs(urlsplit(authorization_url).query).get("state") or [None])[0]

    async def answer(self) -> AuthorizationCodeResult:
        """The code the browser brought back.

        Raises:
            OAuthError: no answer in time (`wait_seconds`), or the authorization server refused.
        """
        with anyio.move_on_after(self._wait_seconds):
            await self._arrived.wait()
        if self._answer is None:
            raise OAuthError(
                f"no answer from the browser within {self._wait_seconds:g} s (--timeout); "
                f"run `omega-mcp login {self._server_name}` to try again"
            )
        if isinstance(self._answer, OAuthError):
            raise self._answer
        return self._answer

    async def _handle(self, stream: SocketStream) -> None:
        async with stream:
            with anyio.move_on_after(_REQUEST_SECONDS):  # a connection that says nothing holds nothing
                head = b""
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while b"\r\n\r\n" not in head and len(head) < _HEAD_LIMIT:
                        head += await stream.receive()
                status, text = self._respond(head.split(b"\r\n", 1)[0].decode("latin-1"))
                page = f"<!doctype html><title>omega-mcp</title><p>{escape(text)}</p>\n".encode()
                head_out = (
                    f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
                    f"Content-Length: {len(page)}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n"
                )
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await stream.send(head_out.encode() + page)

    def _respond(self, request_line: str) -> tuple[str, str]:
        from mcp.shared.auth import AuthorizationCodeResult

        parts = request_line.split(" ")
        url = urlsplit(parts[1]) if len(parts) == 3 and parts[0] == "GET" else None
        if url is None or url.path != "/callback":
            return "404 Not Found", "Not found."
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if self._state is None or query.get("state") != self._state or self._arrived.is_set():
            return "400 Bad Request", "This is not the login omega-mcp is waiting for."
        if "error" in query:
            detail = query.get("error_description")
            refusal = f"{query['error']}{f': {detail}' if detail else ''}"
            self._answer = OAuthError(f"the authorization server refused: {refusal}")
            text = f"The login to {self._server_name} failed ({refusal}). You can close this tab."
            status = "200 OK"
        elif "code" not in query:
            return "400 Bad Request", "The answer has no authorization code."
        else:
            self._answer = AuthorizationCodeResult(code=query["code"], state=query["state"], iss=query.get("iss"))
            text = f"omega-mcp got the authorization for {self._server_name}. You can close this tab."
            status = "200 OK"
        self._arrived.set()
        return status, text


def _open_in_browser(url: str, opener: Callable[[str], bool]) -> None:
    """Open `url` in a daemon thread (a `$BROWSER` command may not exit until the person closes it)."""

    def run() -> None:
        try:
            opened = opener(url)
        except Exception:  # boundary: webbrowser.Error, or a browser command that cannot start
            opened = False
        if not opened:
            say("omega-mcp: no browser could be opened here; open the URL above yourself")

    threading.Thread(target=run, name="omega-mcp browser", daemon=True).start()


async def run_login(
    config: Config, args: argparse.Namespace, out: TextIO, opener: Callable[[str], bool] = webbrowser.open
) -> int:
    """Log in to one server with the browser flow and store its tokens; exit 0 when they are stored.

    Raises:
        UsageError, ConfigError: the server is unknown or not remote with `auth = "oauth"` (exit 2).
        OAuthError: the flow failed or timed out (exit 1, one line).
    """
    from omega_mcp.errors import first_leaf
    from omega_mcp.proxy.oauth import Interactive, registered_port
    from omega_mcp.proxy.session import DownstreamSession
    from omega_mcp.proxy.spec import DownstreamSpec

    name: str = args.server
    timeout: float = args.timeout
    if not timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    spec = DownstreamSpec.from_config(name, _oauth_server(config, name), home=config.home)
    oauth = spec.oauth
    assert oauth is not None  # _oauth_server returns only entries with auth = "oauth"

    tools: tuple[object, ...] = ()
    failure: str | None = None
    async with _Callback.listen(registered_port(oauth), name, timeout) as callback:

        async def redirect(url: str) -> None:
            callback.expect(url)
            say(f"omega-mcp: to log in to {name}, open this URL in a browser (omega tries to open it):")
            say(f"  {url}")
            _open_in_browser(url, opener)

        interactive = Interactive(redirect_uri=callback.redirect_uri, redirect=redirect, callback=callback.answer)
        # The handshake waits for the person too: its bound grows by the login's.
        spec = replace(
            spec, oauth=replace(oauth, interactive=interactive), timeout_seconds=spec.timeout_seconds + timeout
        )
        session = DownstreamSession(spec)
        try:
            async with session:
                tools = await session.list_tools()
        except anyio.get_cancelled_exc_class():
            say(f"omega-mcp: login to {name} cancelled; nothing was stored")
            raise
        except OAuthError as exc:
            failure = str(exc)
        except Exception as exc:  # the server itself is unreachable or broken: say why in one line
            failure = session.failure(first_leaf(exc))
    # Raised out here: inside, the callback's task group would wrap it in an exception group.
    if failure is not None:
        raise OAuthError(f"login to {name} failed: {failure}")
    if not callback.asked:
        out.write(f"{name} did not ask for authorization (it answered without a token); nothing was stored\n")
        return EXIT_OK
    out.write(f"logged in to {name} ({len(tools)} tools); tokens saved in {oauth.record}\n")
    return EXIT_OK


def run_logout(config: Config, args: argparse.Namespace, out: TextIO) -> int:
    """Forget one server's tokens and registered client; exit 0 whether or not it was logged in."""
    from omega_mcp.proxy.oauth import TokenFile, token_file

    name: str = args.server
    try:
        path = token_file(config.home, name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if TokenFile(path, url="").forget():
        out.write(f"logged out of {name}: its tokens and registered client are forgotten\n")
        return EXIT_OK
    _oauth_server(config, name)  # not logged in: say so for a server that could be, refuse any other name
    out.write(f"{name} was not logged in; nothing to forget\n")
    return EXIT_OK
