"""Who may use the HTTP hub: bearer tokens, checked on every request to `/mcp` and `/metrics`.

The hub always checks a token, on loopback too (any local account, and any confined server given
the network, could otherwise drive bash as the hub's user): `OMEGA_TOKEN`, else the token generated
once into `$OMEGA_HOME/token` (mode 0600, hidden from the tools), plus one token per
`[hub.clients.NAME]`. A request carries `Authorization: Bearer <token>`; the supplied value is
compared with every known token in constant time (no early exit), and the name of the client it
belongs to rides in the ASGI scope's state for the profile (`profiles.py`) and as the SDK's
authenticated user, so a session answers only the client that opened it (another client's token
gets the 404 of an unknown session). Tokens are never logged. Only `/healthz` and `/readyz` answer
without one (probes carry no secrets); `/metrics` takes only the hub's own token (`ops.py`).
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from omega_mcp.errors import ConfigError

__all__ = ["OPEN_PATHS", "BearerTokenMiddleware", "HubTokens", "client_of_scope", "load_or_create_token"]

logger = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""The only paths served without a token."""
_CLIENT_KEY = "omega_client"
"""Scope state key: the `[hub.clients]` name of the request's token, or "" for the hub's own token."""


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


class HubTokens:
    """The accepted tokens: the hub's own (full access) and one per `[hub.clients.NAME]`.

    Raises (constructor):
        ConfigError: two clients share a token, or a client's token is the hub's own.
    """

    def __init__(self, hub_token: str, clients: Sequence[tuple[str, str]] = ()) -> None:
        self._hub = f"Bearer {hub_token}".encode()
        self._known: list[tuple[bytes, str]] = []
        self.replace(clients)

    def replace(self, clients: Sequence[tuple[str, str]]) -> None:
        """Take the `[hub.clients]` tokens (at start, and on SIGHUP: removed clients are refused from then on).

        Raises:
            ConfigError: two clients share a token, or a client's token is the hub's own (nothing is changed).
        """
        known: list[tuple[bytes, str]] = [(self._hub, "")]
        for name, token in clients:
            header = f"Bearer {token}".encode()
            if any(hmac.compare_digest(header, seen) for seen, _ in known):
                raise ConfigError(f"hub.clients.{name}.token: the same token as another client or the hub's own")
            known.append((header, name))
        self._known = known

    def client_of(self, authorization: bytes) -> str | None:
        """The client name ("" for the hub's own token) whose token this header carries, or None.

        Every known token is compared, in constant time, whatever matched first.
        """
        found: str | None = None
        for header, name in self._known:
            if hmac.compare_digest(authorization, header) and found is None:
                found = name
        return found

    def authorized(self, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        """Whether raw (lower-cased) request headers carry a known token."""
        supplied = next((value for key, value in headers if key == b"authorization"), b"")
        return self.client_of(supplied) is not None


def client_of_scope(scope: Mapping[str, object]) -> str | None:
    """The `[hub.clients]` name the request's token belongs to ("" for the hub's own), None off the hub."""
    state = scope.get("state")
    if isinstance(state, dict):
        name = state.get(_CLIENT_KEY)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        return name if isinstance(name, str) else None
    return None


class BearerTokenMiddleware:
    """Rejects HTTP requests without a known `Authorization: Bearer <token>` (401), but the probes'."""

    def __init__(self, app: ASGIApp, tokens: HubTokens) -> None:
        self.app = app
        self._tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in OPEN_PATHS:
            supplied = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            client = self._tokens.client_of(supplied)
            if client is None:
                response = JSONResponse(
                    {"error": "unauthorized", "error_description": "missing or wrong bearer token"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="omega-mcp"'},
                )
                await response(scope, receive, send)
                return
            scope.setdefault("state", {})[_CLIENT_KEY] = client
            scope["user"] = _users.get(client) or _user(client)
        await self.app(scope, receive, send)


_users: dict[str, AuthenticatedUser] = {}


def _user(client: str) -> AuthenticatedUser:
    """The SDK's user for a client: the SDK binds each session to the user that opened it (never the token)."""
    user = _users[client] = AuthenticatedUser(
        AccessToken(token="", client_id=f"omega-client:{client}" if client else "omega-hub", scopes=[])
    )
    return user
