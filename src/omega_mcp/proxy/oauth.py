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
- A pre-registered confidential client (`client_id` with `client_secret_env`) takes its secret from
  the environment at each use (never from a file) and presents it the way the authorization server
  advertises (`client_secret_basic`, else `client_secret_post`).
- Scope step-up: a server that answers 403 `insufficient_scope` asks for more than the tokens on file
  grant. `omega-mcp login` asks for it (the union of what was granted and what is asked, as the SDK
  does). Without a person to ask, the scope is written in the record (`step_up`) and the request
  fails with `needs login: server NAME asks for scope "...": run omega-mcp login NAME`, which is
  also the server's status from then on (`step_up_needed`); its other requests go on, and the
  connection stays up. A login that succeeds clears it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator
from typing import Any, TypeVar

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import is_valid_client_metadata_url, union_scopes
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import AnyUrl, BaseModel, PrivateAttr, ValidationError

from omega_mcp.errors import LoginRequiredError, OAuthError
from omega_mcp.narrow import as_list, as_object
from omega_mcp.proxy.oauth_record import (
    Interactive,
    OAuthSettings,
    TokenFile,
    registered_port,
    step_up_needed,
    token_file,
)
from omega_mcp.version import __version__

__all__ = [
    "Interactive",
    "OAuthSettings",
    "TokenFile",
    "auth_failure",
    "http_auth",
    "registered_port",
    "step_up_needed",
    "token_file",
]

logger = logging.getLogger(__name__)

_NO_REDIRECT = "http://127.0.0.1/callback"
"""The redirect URI of a client that never sends anyone to a browser (the SDK's metadata needs one)."""
_M = TypeVar("_M", bound=BaseModel)


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
        self._stamp = self._file.stamp()
        self.record = self._file.read()
        self.step_up = str(self.record.get("step_up") or "")
        """A scope the server asked for beyond what was granted (recorded by a hub, asked for by a login)."""
        if settings.interactive is not None:  # a login starts without tokens (the file keeps them until it succeeds)
            self.record.pop("tokens", None)
        self.provider: _Provider | None = None

    def _save(self) -> None:
        try:
            with self._file.locked():
                self._file.write({**self.record, "server": self._settings.server_name})
                self._stamp = self._file.stamp()
        except OSError as exc:  # inside the SDK's flow: say it in omega's one line, not as a connection failure
            raise OAuthError(f"cannot save the tokens in {self._file.path}: {exc.strerror or exc}") from exc

    def adopt_newer(self) -> bool:
        """Take the tokens another omega process (a hub replica on the same $OMEGA_HOME) stored since
        this one last read or wrote the file; whether there were any. Not during a login."""
        if self._settings.interactive is not None or self._file.stamp() == self._stamp:
            return False
        with self._file.locked():
            self._stamp, record = self._file.stamp(), self._file.read()
        if record.get("tokens") is None or record.get("tokens") == self.record.get("tokens"):
            return False
        for key in ("tokens", "expires_at"):
            self.record[key] = record.get(key)
        if self.provider is not None:
            context = self.provider.context
            context.current_tokens = _parse(OAuthToken, record.get("tokens"))
            expires_at = record.get("expires_at")
            context.token_expiry_time = float(expires_at) if isinstance(expires_at, int | float) else None
        return True

    async def get_tokens(self) -> OAuthToken | None:
        self.adopt_newer()
        return _parse(OAuthToken, self.record.get("tokens"))

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.record["tokens"] = _dump(tokens)
        if self._settings.interactive is not None:
            self.record.pop("step_up", None)  # a login asked for it
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
            secret = _secret(settings)
            return OAuthClientInformationFull(
                client_id=settings.client_id,
                client_secret=secret,
                token_endpoint_auth_method="client_secret_basic" if secret else "none",
                redirect_uris=uris,
            )
        client = _parse(OAuthClientInformationFull, self.record.get("client"))
        if client is not None and redirect is not None and redirect not in [str(u) for u in client.redirect_uris or ()]:
            return None  # registered for another callback port: the server would refuse this one, so register anew
        return client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        # Saved with the tokens it gets: a login that fails after registering leaves the file as it was.
        self.record["client"] = _dump(client_info)

    def need(self, scope: str) -> None:
        """Record a scope the server asks for that no token on file grants (a hub cannot ask anyone)."""
        self.step_up = scope
        self.record["step_up"] = scope
        self._save()

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
    _also: str | None = PrivateAttr(default=None)
    _wanted: str | None = PrivateAttr(default=None)

    @property
    def wanted(self) -> str | None:
        """The scope the SDK asked for last (what a challenge asked, before any pin)."""
        return self._wanted

    def pin(self, scope: str | None, *, also: str | None = None) -> None:
        """Ask for exactly `scope` when set; else for what challenges ask, with `also` (a recorded step-up)."""
        self._pinned = scope
        self._also = also or None
        if scope is not None:
            self.scope = scope

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scope":
            super().__setattr__("_wanted", value)
            if self._pinned is not None:
                value = self._pinned
            elif self._also is not None:
                value = union_scopes(value, self._also)
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
        metadata.pin(scope, also=storage.step_up if settings.interactive is not None else None)
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

    def _secret_method(self) -> None:
        """Present a configured secret the way the authorization server takes it (basic unless only post)."""
        info = self.context.client_info
        if info is None or not info.client_secret or self._settings.client_id is None:
            return
        metadata = self.context.oauth_metadata
        supported = metadata.token_endpoint_auth_methods_supported if metadata is not None else None
        post_only = (
            bool(supported)
            and "client_secret_basic" not in (supported or ())
            and "client_secret_post" in (supported or ())
        )
        info.token_endpoint_auth_method = "client_secret_post" if post_only else "client_secret_basic"

    def _missing_scope(self) -> str | None:
        """What the server asks for that the tokens on file do not grant (a refresh cannot widen it)."""
        tokens = self.context.current_tokens
        metadata = self.context.client_metadata
        wanted = metadata.wanted if isinstance(metadata, _ClientMetadata) else metadata.scope
        if tokens is None or not wanted:
            return None
        granted = set((tokens.scope or "").split())
        missing = [s for s in wanted.split() if s not in granted]
        return " ".join(missing) or None

    async def _refresh_token(self) -> httpx2.Request:
        self._secret_method()
        # Another replica may have refreshed already: its refresh token is the one the server still takes.
        self._storage.adopt_newer()
        return await super()._refresh_token()

    async def _perform_authorization(self) -> httpx2.Request:
        """The browser flow when someone can be asked; otherwise one refresh, else `needs login`."""
        self._secret_method()
        if self._settings.interactive is not None:
            return await super()._perform_authorization()
        missing = self._missing_scope()
        if missing is not None:
            self._storage.need(missing)
            raise LoginRequiredError(self._settings.server_name, scope=missing)
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


def _secret(settings: OAuthSettings) -> str | None:
    """The configured client secret, from its environment variable.

    Raises:
        OAuthError: `client_secret_env` names a variable that is not set.
    """
    name = settings.client_secret_env
    if name is None:
        return None
    secret = os.environ.get(name)
    if not secret:
        raise OAuthError(f"client_secret_env: the environment variable {name} is not set")
    return secret


class _StepUpGuard(httpx2.Auth):
    """The provider's flow, except that a step-up nobody can grant ends with the server's own answer.

    Raised inside a request of the streamable HTTP transport, `LoginRequiredError` would tear the
    whole connection down; returned as the 403 it is, it fails only that request (and the session
    says why: `step_up_needed`).
    """

    def __init__(self, inner: _Provider) -> None:
        self._inner = inner

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self._inner.async_auth_flow(request)
        sent = await flow.__anext__()
        while True:
            response = yield sent
            try:
                sent = await flow.asend(response)
            except StopAsyncIteration:
                return
            except LoginRequiredError as exc:
                if exc.scope is None:
                    raise
                logger.warning("%s", exc)
                return  # httpx hands `response` (the 403) to the transport


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
    _secret(settings)  # a missing secret is said now, in one line, not deep inside a token request
    provider = _Provider(settings, storage)
    return provider if settings.interactive is not None else _StepUpGuard(provider)


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
