"""OAuth 2.1 for remote servers with `auth = "oauth"`: where the tokens live and the SDK client using them.

The flow itself is the SDK's `OAuthClientProvider` (an `httpx2.Auth` the HTTP transports send
through): protected-resource metadata discovery (RFC 9728), authorization server metadata (RFC
8414), dynamic client registration (RFC 7591) or a client ID metadata document, PKCE, the
`resource` parameter (RFC 8707) and refresh. What omega adds:

- Storage: one JSON record per server, `$OMEGA_HOME/state/oauth/<server>.json` (0600, in a 0700
  directory, replaced atomically), holding the registered client, the tokens with their absolute
  expiry, and the discovered metadata, so that a new process refreshes an expired token at the
  right token endpoint instead of sending it and starting over. A record is bound to the URL it was
  made for: after `url` changes in servers.toml its tokens are sent nowhere. `$OMEGA_HOME/state`
  is hidden from the tools and never writable by them (sandbox/policy.py).
- Two modes. Without `Interactive` handlers (`serve`, `tools`, `call`, `agent`) nobody is asked:
  with no tokens on file the server is not even contacted, and where the SDK would start the
  browser flow omega tries the refresh token once, then gives up with `LoginRequiredError`
  (`needs login: run omega-mcp login NAME`). `omega-mcp login` (cli/login.py) passes the handlers
  of its browser flow; the tokens on file are not sent then (a login is a new login) and stay on
  file until new ones replace them.
- `scopes` in servers.toml, when set, is exactly what omega asks for, whatever a challenge says.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import is_valid_client_metadata_url
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import AnyUrl, BaseModel, PrivateAttr, ValidationError

from omega_mcp.errors import LoginRequiredError, OAuthError
from omega_mcp.narrow import as_list, as_object
from omega_mcp.sandbox.policy import STATE_DIR_NAME
from omega_mcp.version import __version__

__all__ = [
    "Interactive",
    "OAuthSettings",
    "TokenFile",
    "auth_failure",
    "http_auth",
    "registered_port",
    "token_file",
]

logger = logging.getLogger(__name__)

OAUTH_DIR_NAME = "oauth"
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_NO_REDIRECT = "http://127.0.0.1/callback"
"""The redirect URI of a client that never sends anyone to a browser (the SDK's metadata needs one)."""
_M = TypeVar("_M", bound=BaseModel)


def token_file(home: Path, server_name: str) -> Path:
    """Where the record of `server_name` lives: `$OMEGA_HOME/state/oauth/<server>.json`.

    Raises:
        ValueError: the name is no server key (it could point outside the directory).
    """
    if not _SERVER_NAME.match(server_name):
        raise ValueError(f"{server_name!r} is not a server name (letters, digits, '-' and '_')")
    return home / STATE_DIR_NAME / OAUTH_DIR_NAME / f"{server_name}.json"


@dataclass(frozen=True, slots=True)
class Interactive:
    """How `omega-mcp login` takes a person through the flow (cli/login.py builds these)."""

    redirect_uri: str
    """The loopback callback the browser is sent back to, e.g. `http://127.0.0.1:PORT/callback`."""
    redirect: Callable[[str], Awaitable[None]]
    """Show the authorization URL (print it, open the browser)."""
    callback: Callable[[], Awaitable[AuthorizationCodeResult]]
    """Wait (bounded) for the browser to come back with the code."""


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """`auth = "oauth"` of one `[servers.NAME]`, where its record is, and who can be asked."""

    server_name: str
    url: str
    record: Path
    client_id: str | None = None
    scopes: tuple[str, ...] = ()
    client_metadata_url: str | None = None
    interactive: Interactive | None = None
    """None: never ask anyone (serve, tools, call, agent)."""


class TokenFile:
    """One server's record on disk (a few KiB of JSON, read and written synchronously)."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.url = url

    def read(self) -> dict[str, Any]:
        """The record; empty when there is none, it cannot be read, or it was made for another URL."""
        try:
            data = as_object(json.loads(self.path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("ignoring the OAuth record %s: %s", self.path, exc)
            return {}
        return data if data.get("url") == self.url else {}

    def write(self, record: dict[str, Any]) -> None:
        """Replace the record atomically: a 0600 file written beside it in the 0700 directory, renamed over it."""
        directory = self.path.parent
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # `state`, when omega makes it
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        fd, temporary = tempfile.mkstemp(prefix=f".{self.path.stem}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({**record, "url": self.url}, out, indent=2)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def forget(self) -> bool:
        """Delete the record (whatever URL it was for); False when there was none."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True


def _parse(model: type[_M], raw: object) -> _M | None:
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(mode="json", exclude_none=True)


class _Storage:
    """The SDK's `TokenStorage` over a `TokenFile`, plus what a new process needs to resume."""

    def __init__(self, settings: OAuthSettings) -> None:
        self._settings = settings
        self._file = TokenFile(settings.record, settings.url)
        self.record = self._file.read()
        if settings.interactive is not None:  # a login starts without tokens (the file keeps them until it succeeds)
            self.record.pop("tokens", None)
        self.provider: _Provider | None = None

    def _save(self) -> None:
        try:
            self._file.write({**self.record, "server": self._settings.server_name})
        except OSError as exc:  # inside the SDK's flow: say it in omega's one line, not as a connection failure
            raise OAuthError(f"cannot save the tokens in {self._file.path}: {exc.strerror or exc}") from exc

    async def get_tokens(self) -> OAuthToken | None:
        return _parse(OAuthToken, self.record.get("tokens"))

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.record["tokens"] = _dump(tokens)
        if self.provider is not None:  # the SDK sets the expiry before it stores the tokens
            context = self.provider.context
            self.record["expires_at"] = context.token_expiry_time
            self.record["resource_metadata"] = _dump(context.protected_resource_metadata)
            self.record["authorization_server_metadata"] = _dump(context.oauth_metadata)
            self.record["authorization_server"] = context.auth_server_url
        self._save()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        settings = self._settings
        redirect = settings.interactive.redirect_uri if settings.interactive is not None else None
        if settings.client_id is not None:  # pre-registered: servers.toml says who omega is
            uris = [AnyUrl(redirect)] if redirect is not None else None
            return OAuthClientInformationFull(
                client_id=settings.client_id,
                token_endpoint_auth_method="none",  # noqa: S106 - a public client: no secret at all
                redirect_uris=uris,
            )
        client = _parse(OAuthClientInformationFull, self.record.get("client"))
        if client is not None and redirect is not None and redirect not in [str(u) for u in client.redirect_uris or ()]:
            return None  # registered for another callback port: the server would refuse this one, so register anew
        return client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        # Saved with the tokens it gets: a login that fails after registering leaves the file as it was.
        self.record["client"] = _dump(client_info)

    def redirect_uri(self) -> str:
        """The callback to put in the client metadata: the login's, else the registered one's."""
        if self._settings.interactive is not None:
            return self._settings.interactive.redirect_uri
        uris = as_list(as_object(self.record.get("client")).get("redirect_uris"))
        return str(uris[0]) if uris and isinstance(uris[0], str) else _NO_REDIRECT


class _ClientMetadata(OAuthClientMetadata):
    """Client metadata whose `scope` stays what servers.toml pins, when it pins one.

    The SDK sets `scope` from each challenge (WWW-Authenticate, then the metadata's
    `scopes_supported`); a configured `scopes` list is what the user asked for instead.
    """

    _pinned: str | None = PrivateAttr(default=None)

    def pin(self, scope: str | None) -> None:
        self._pinned = scope
        if scope is not None:
            self.scope = scope

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scope" and self._pinned is not None:
            value = self._pinned
        super().__setattr__(name, value)


class _Provider(OAuthClientProvider):
    """The SDK's provider, resuming from the record and never asking anyone unless `Interactive`."""

    def __init__(self, settings: OAuthSettings, storage: _Storage) -> None:
        scope = " ".join(settings.scopes) or None
        metadata = _ClientMetadata(
            redirect_uris=[AnyUrl(storage.redirect_uri())],
            token_endpoint_auth_method="none",  # noqa: S106 - a public client (PKCE), no secret
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            client_name="omega-mcp",
            software_id="omega-mcp",
            software_version=__version__,
        )
        metadata.pin(scope)
        interactive = settings.interactive
        super().__init__(
            settings.url,
            metadata,
            storage,
            redirect_handler=interactive.redirect if interactive is not None else None,
            callback_handler=interactive.callback if interactive is not None else None,
            client_metadata_url=settings.client_metadata_url,
        )
        self._settings = settings
        self._storage = storage
        self._refreshing = False
        storage.provider = self

    async def _initialize(self) -> None:
        await super()._initialize()
        record = self._storage.record
        context = self.context
        expires_at = record.get("expires_at")
        if context.current_tokens is not None and isinstance(expires_at, int | float):
            context.token_expiry_time = float(expires_at)
        if context.protected_resource_metadata is None:
            context.protected_resource_metadata = _parse(ProtectedResourceMetadata, record.get("resource_metadata"))
        if context.oauth_metadata is None:
            context.oauth_metadata = _parse(OAuthMetadata, record.get("authorization_server_metadata"))
        if context.auth_server_url is None and isinstance(record.get("authorization_server"), str):
            context.auth_server_url = record["authorization_server"]

    async def _perform_authorization(self) -> httpx2.Request:
        """The browser flow when someone can be asked; otherwise one refresh, else `needs login`."""
        if self._settings.interactive is not None:
            return await super()._perform_authorization()
        if not self.context.can_refresh_token():
            raise LoginRequiredError(self._settings.server_name)
        self._refreshing = True  # the server refused a token it had not seen expire (revoked, clock skew)
        return await self._refresh_token()

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        if not self._refreshing:
            await super()._handle_token_response(response)
            return
        self._refreshing = False
        if not await self._handle_refresh_response(response):
            raise LoginRequiredError(self._settings.server_name)


class _Demote(logging.Filter):
    """The SDK's OAuth client logs a failed flow with its traceback; omega reports it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG:
            record.levelno, record.levelname, record.exc_info, record.exc_text = logging.DEBUG, "DEBUG", None, None
        return True


_DEMOTE = _Demote()


def http_auth(settings: OAuthSettings) -> httpx2.Auth:
    """The `httpx2.Auth` of one connection to a server with `auth = "oauth"`.

    Raises:
        LoginRequiredError: no tokens on file and nobody to ask (the server is not contacted).
        OAuthError: `client_metadata_url` is no https URL with a path.
    """
    url = settings.client_metadata_url
    if url is not None and not is_valid_client_metadata_url(url):
        raise OAuthError(f"client_metadata_url must be an https URL with a path, got {url!r}")
    logging.getLogger("mcp.client.auth.oauth2").addFilter(_DEMOTE)  # once: the same filter is added once
    storage = _Storage(settings)
    if settings.interactive is None and storage.record.get("tokens") is None:
        raise LoginRequiredError(settings.server_name)
    return _Provider(settings, storage)


def registered_port(settings: OAuthSettings) -> int | None:
    """The loopback port of the last registration's redirect URI: a login there needs no new registration."""
    client = as_object(TokenFile(settings.record, settings.url).read().get("client"))
    for uri in as_list(client.get("redirect_uris")):
        parts = urlsplit(uri) if isinstance(uri, str) else None
        if parts is not None and parts.hostname == "127.0.0.1" and parts.path == "/callback" and parts.port:
            return parts.port
    return None


def auth_failure(exc: BaseException) -> OAuthError | None:
    """The OAuth failure inside `exc` (in task groups too) as omega's error, or None when there is none."""
    pending = [exc]
    while pending:
        current = pending.pop()
        if isinstance(current, OAuthError):
            return current
        if isinstance(current, OAuthFlowError):  # the SDK's, for every step of the flow
            return OAuthError(f"OAuth failed: {current}")
        if isinstance(current, BaseExceptionGroup):
            pending.extend(reversed(current.exceptions))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return None
