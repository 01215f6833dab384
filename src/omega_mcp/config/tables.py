"""The tables of servers.toml as pydantic models (loading and error wording are in `load.py`).

Every table is strict (`_Strict`, which new keys inherit): a value of the wrong type is an error,
never coerced (`"120"` is no number, `"no"` no boolean). `load.py` validates the file in pydantic's
JSON mode, where an array is a tuple's form and a string a path's; code building a model in Python
passes the real types (the validators below turn lists and strings into them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from omega_mcp.config.values import check_path as _check_path
from omega_mcp.config.values import need_list as _need_list
from omega_mcp.config.values import no_nul as _no_nul
from omega_mcp.narrow import as_object
from omega_mcp.sensitive import (
    DEFAULT_HIDDEN,
    DEFAULT_PROTECTED,
    is_default_hidden,
    is_default_protected,
    normalize_protected,
)

__all__ = [
    "AgentConfig",
    "ClientConfig",
    "Config",
    "HubConfig",
    "OnDenied",
    "SamplingConfig",
    "SandboxConfig",
    "ServerConfig",
    "ServerSandboxConfig",
    "omega_home",
]

SandboxMode = Literal["sandbox", "rx", "rwx"]
ServerConfinement = Literal["none", "confined"]
ProviderName = Literal["openai", "anthropic", "ollama", "openrouter", "gemini"]
ToolSearchMode = Literal["off", "on", "auto"]
"""`[hub]`/`[agent] tool_search`: list every tool, or only a few plus `search_tools` (`toolsearch.py`)."""
OnDenied = Literal["deny", "ask"]
"""What a write outside the roots does: refused, or put to the user once (`sandbox/approvals.py`)."""

_SERVER_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

MIN_TOKEN_CHARS = 16
"""The shortest `[hub.clients.NAME] token` accepted."""

# Validation context keys: what `load_config` knows from expansion and no TOML key can set.
PROBLEMS = "omega_server_problems"
UNRESOLVED_URLS = "omega_unresolved_urls"

_MAX_MIB = 2**40  # in bytes still below 2**63: rlimits are signed 64-bit in Python's resource module


def omega_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$OMEGA_HOME`, default `~/.omega`, absolute."""
    env = os.environ if environ is None else environ
    raw = env.get("OMEGA_HOME") or "~/.omega"
    return Path(os.path.abspath(os.path.expanduser(raw)))


def _unhide_defaults(value: tuple[Path, ...]) -> tuple[Path, ...]:
    for item in value:
        if not is_default_hidden(item):
            raise ValueError(
                f"{str(item)!r} is not hidden by default, so it cannot be unhidden; the defaults are "
                f"{', '.join(DEFAULT_HIDDEN)} (remove a path you added from `hide` instead)"
            )
    return value


def _protected_names(value: Any, info: ValidationInfo) -> Any:
    names = _need_list(value, info)
    for item in names:  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(item, str):
            raise ValueError(f"expected a name (a string), got {item!r}")
        normalize_protected(item)  # raises ValueError with the reason
    return names  # pyright: ignore[reportUnknownVariableType]


def _unprotect_defaults(value: tuple[str, ...]) -> tuple[str, ...]:
    for item in value:
        if not is_default_protected(item):
            raise ValueError(
                f"{item!r} is not protected by default, so it cannot be unprotected; the defaults are "
                f"{', '.join(DEFAULT_PROTECTED)} (remove a name you added from `protect` instead)"
            )
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SandboxConfig(_Strict):
    """`[sandbox]`: where tools may write and how bash is confined."""

    mode: SandboxMode = "sandbox"
    workspace: Path | None = None
    write_roots: tuple[Path, ...] = ()
    bash_timeout: float = Field(default=120.0, gt=0, le=600, allow_inf_nan=False)
    require_os_sandbox: bool = True
    on_denied: OnDenied = "deny"
    servers: ServerConfinement = "none"
    """The default for `[servers.NAME] sandbox`: downstream servers unconfined, or each confined."""
    env_passthrough: tuple[str, ...] = ()
    """Environment variable names passed to bash even though they look like secrets."""
    max_processes: int | None = Field(default=None, gt=0, le=4_194_304)  # the kernel's PID_MAX_LIMIT
    max_file_size_mb: int | None = Field(default=None, gt=0, le=_MAX_MIB)
    max_open_files: int | None = Field(default=None, gt=0, le=2**30)  # above the kernel's nr_open maximum
    memory_mb: int | None = Field(default=None, gt=0, le=_MAX_MIB)
    hide: tuple[Path, ...] = ()
    """More paths neither bash nor `read` may see (sandbox and rx modes; `sensitive.py` has the defaults)."""
    unhide: tuple[Path, ...] = ()
    """Entries of `sensitive.DEFAULT_HIDDEN` to show after all."""
    protect: tuple[str, ...] = ()
    """More names (or globs) read-only for bash and denied to the file tools in every write root."""
    unprotect: tuple[str, ...] = ()
    """Entries of `sensitive.DEFAULT_PROTECTED` to leave writable after all."""
    shell_lifetime: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    """Seconds a background shell may run before it is killed (its session ending kills it sooner)."""

    @field_validator("workspace", mode="before")
    @classmethod
    def _workspace_path(cls, value: Any, info: ValidationInfo) -> Any:
        return None if value is None else _check_path(value, info)

    @field_validator("write_roots", "hide", "unhide", mode="before")
    @classmethod
    def _path_lists(cls, value: Any, info: ValidationInfo) -> Any:
        return tuple(_check_path(item, info) for item in _need_list(value, info))  # pyright: ignore[reportUnknownVariableType]

    _env_passthrough_list = field_validator("env_passthrough", mode="before")(_need_list)

    _only_defaults = field_validator("unhide")(_unhide_defaults)

    _name_lists = field_validator("protect", "unprotect", mode="before")(_protected_names)

    _only_default_names = field_validator("unprotect")(_unprotect_defaults)

    def workspace_in(self, home: Path) -> Path:
        """The workspace directory (absolute; may not exist yet): `workspace`, else `<home>/workspace`."""
        return self.workspace or home / "workspace"


class ServerSandboxConfig(_Strict):
    """`[servers.NAME] sandbox = {...}`: how one stdio server is confined (`sandbox/servers.py`).

    The server may write its cwd (by default `$OMEGA_HOME/servers/NAME`), a private `/tmp`, the
    caches its launcher needs and `write_roots`; with `read_only` nothing but its private `/tmp`.
    It reaches the network only with `network`. `hide` and `unhide` extend `[sandbox]`'s lists.
    """

    network: bool = False
    write_roots: tuple[Path, ...] = ()
    hide: tuple[Path, ...] = ()
    unhide: tuple[Path, ...] = ()
    read_only: bool = False

    @field_validator("write_roots", "hide", "unhide", mode="before")
    @classmethod
    def _path_lists(cls, value: Any, info: ValidationInfo) -> Any:
        return tuple(_check_path(item, info) for item in _need_list(value, info))  # pyright: ignore[reportUnknownVariableType]

    _only_defaults = field_validator("unhide")(_unhide_defaults)


# Tags of the two forms of `sandbox`; `load._describe` drops them from error locations.
TAG_TABLE = "{table}"
TAG_NAME = "{name}"


def _sandbox_form(value: Any) -> str:
    return TAG_NAME if isinstance(value, str) else TAG_TABLE


ServerSandbox = Annotated[
    Annotated[ServerSandboxConfig, Tag(TAG_TABLE)] | Annotated[Literal["none", "default"], Tag(TAG_NAME)],
    Discriminator(_sandbox_form),
]
"""`sandbox = "none"` (unconfined), `"default"` (confined, nothing declared) or a table."""


ONE_TRANSPORT = "needs exactly one of `command` (stdio) or `url` (remote)"


class ServerConfig(_Strict):
    """`[servers.NAME]`: one downstream MCP server, stdio (`command`) or remote (`url`)."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict[str, str])
    cwd: Path | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    enabled: bool = True
    timeout: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    connect_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] = ()
    sandbox: ServerSandbox | None = None
    """How a stdio server is confined; None follows `[sandbox] servers`."""
    era: Literal["auto", "handshake", "modern"] = "auto"
    """The protocol era omega speaks to the server: the one it offers (2026-07-28 when it can), or only this one."""
    share: Literal["shared", "session"] = "shared"
    """One process for every client, or one per client session (`proxy/pool.py`)."""
    pin: bool = Field(default=True, strict=True)
    """Hold a tool whose definition changed since first seen until `omega-mcp tools --accept` (`proxy/pins.py`)."""
    auth: Literal["oauth"] | None = None
    client_id: str | None = None
    client_secret_env: str | None = None
    """The environment variable holding a pre-registered confidential client's secret (never the secret itself)."""
    scopes: tuple[str, ...] = ()
    client_metadata_url: str | None = None

    @field_validator("cwd", mode="before")
    @classmethod
    def _cwd_path(cls, value: Any, info: ValidationInfo) -> Any:
        return None if value is None else _check_path(value, info)

    _lists = field_validator("args", "tools", "exclude_tools", "scopes", mode="before")(_need_list)

    # What the OS or HTTP would refuse only when the server starts (as a traceback from deep inside
    # subprocess or httpx) is refused here, with the key named.
    @field_validator("command")
    @classmethod
    def _command_text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("`command` must not be empty")
        return _no_nul(value, "`command`")

    @field_validator("args")
    @classmethod
    def _args_text(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            _no_nul(item, "an argument")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} is not a valid environment variable name (empty, or has '=' or NUL)")
            _no_nul(text, f"the value of {name}")
        return value

    @field_validator("headers")
    @classmethod
    def _header_text(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name or any(c in name + text for c in "\r\n\0"):
                raise ValueError(
                    f"header {name!r}: a name must not be empty and no part may contain a line break or NUL"
                )
        return value

    @model_validator(mode="after")
    def _one_transport(self, info: ValidationInfo) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(ONE_TRANSPORT)
        # `url = "${HUB_URL}"`, HUB_URL unset: the server is failed for that; its URL cannot be judged yet.
        url, unresolved = self.url, as_object(info.context).get(UNRESOLVED_URLS) or ()
        if url is not None and not url.startswith(("http://", "https://")) and url not in unresolved:
            raise ValueError(f"`url` must start with http:// or https://, got {url!r}")
        remote_only = [
            key
            for key in ("auth", "client_id", "client_secret_env", "client_metadata_url")
            if getattr(self, key) is not None
        ]
        if self.url is None and (remote_only or self.scopes):
            raise ValueError(f"`{(remote_only or ['scopes'])[0]}` is for remote servers (`url`), not `command`")
        if self.client_secret_env is not None and (
            self.client_id is None or not _ENV_NAME.match(self.client_secret_env)
        ):
            raise ValueError(
                "`client_secret_env` names the environment variable holding the secret of the client "
                '`client_id` names (e.g. client_secret_env = "GITHUB_MCP_SECRET"): never the secret itself'
            )
        if self.url is not None and self.sandbox is not None:
            raise ValueError("`sandbox` confines a stdio server (`command`); a remote server runs elsewhere")
        return self

    def confinement(self, default: ServerConfinement) -> ServerSandboxConfig | None:
        """How this server is confined under `[sandbox] servers = default`: None means not at all."""
        if self.url is not None or self.sandbox == "none" or (self.sandbox is None and default == "none"):
            return None
        return self.sandbox if isinstance(self.sandbox, ServerSandboxConfig) else ServerSandboxConfig()


class AgentConfig(_Strict):
    """`[agent]`: defaults for `omega-mcp agent`."""

    provider: ProviderName | None = None
    model: str | None = None
    model_fast: str | None = None
    model_complex: str | None = None
    max_turns: int = Field(default=25, gt=0)
    base_url: str | None = None
    api_key_env: str | None = None
    anthropic_version: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    route: bool = False
    """Classify each request on `model_fast` first, then run on the fast or the complex model."""
    system_append: str | None = None
    """Text added to the end of the default system prompt."""
    tool_search: ToolSearchMode = "auto"
    """Start the model with the always-visible tools and `search_tools`; found tools join later requests."""


class SamplingConfig(_Strict):
    """`[sampling]`: answer downstream servers' `sampling/createMessage` with omega's own provider."""

    provider: ProviderName | None = None
    model: str | None = None
    model_fast: str | None = None
    model_complex: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    mode: Literal["fallback", "always"] = "fallback"
    """`fallback`: only when the client cannot sample; `always`: never ask the client."""
    allow: tuple[str, ...] = ()
    """The servers allowed to spend the user's tokens (none until configured)."""
    max_tokens: int | None = Field(default=None, gt=0)
    """A cap on what one request may ask for (its own `maxTokens` is honoured below this)."""

    _allow_list = field_validator("allow", mode="before")(_need_list)


def _server_key(key: str) -> str:
    if not _SERVER_KEY.match(key):
        raise ValueError(f"server key {key!r} may only contain letters, digits, '-' and '_'")
    if "__" in key:
        raise ValueError(f"server key {key!r} must not contain '__' (it separates mcp__<server>__<tool>)")
    return key


ServerKey = Annotated[str, AfterValidator(_server_key)]
"""A `[servers.NAME]` key, checked one by one: every bad key is reported, with the entries' own problems."""


def _client_key(key: str) -> str:
    if not _SERVER_KEY.match(key):
        raise ValueError(f"client name {key!r} may only contain letters, digits, '-' and '_'")
    return key


ClientKey = Annotated[str, AfterValidator(_client_key)]
"""A `[hub.clients.NAME]` key: the same characters as a server key."""


class ClientConfig(_Strict):
    """`[hub.clients.NAME]`: one client of the HTTP hub, its token and its profile (`server/profiles.py`)."""

    token: str = Field(repr=False)
    """From the environment (`load.py` refuses a token written in the file): `token = "${ALICE_TOKEN}"`."""
    tools: tuple[str, ...] | None = None
    """Allow globs over tool names (built-in names, `mcp__<server>__<tool>`); None: every tool."""
    exclude_tools: tuple[str, ...] = ()
    workspace: Path | None = None
    """The client's own workspace (None: the hub's)."""
    mode: SandboxMode | None = None
    """The client's own sandbox mode (None: the hub's)."""
    prompts: tuple[str, ...] | None = None
    """Allow globs over exported prompt names (`<server>__<prompt>`) of the servers it may use; None: all."""
    resources: tuple[str, ...] | None = None
    """Allow globs over resource URIs (and templates) of the servers it may use; None: all."""

    _lists = field_validator("tools", "exclude_tools", "prompts", "resources", mode="before")(_need_list)

    @field_validator("prompts", "resources")
    @classmethod
    def _globs(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and any(not g.strip() for g in value):
            raise ValueError('a list of non-empty glob strings, e.g. ["docs__*"]')
        return value

    @field_validator("workspace", mode="before")
    @classmethod
    def _workspace_path(cls, value: Any, info: ValidationInfo) -> Any:
        return None if value is None else _check_path(value, info)

    @field_validator("token")
    @classmethod
    def _secret_enough(cls, value: str) -> str:
        # Never quoted back: the message is read in logs and terminals.
        if len(value.strip()) < MIN_TOKEN_CHARS or any(c.isspace() for c in value):
            raise ValueError(
                f"too short for a secret or has spaces (at least {MIN_TOKEN_CHARS} characters, none blank; "
                "e.g. the output of `openssl rand -hex 32`)"
            )
        return value


class HubConfig(_Strict):
    """`[hub]`: how the MCP server names downstream tools for its client (see `names.Naming`), and the HTTP hub."""

    client_prefix: str = Field(default="", max_length=40, pattern=r"^[A-Za-z0-9_-]*$")
    names: Literal["full", "short"] = "full"
    allowed_hosts: tuple[str, ...] | None = None
    """`Host` values the HTTP hub accepts; None: the bind address and the loopback names."""

    max_message_mb: int = Field(default=64, gt=0, le=4096, strict=True)
    """The longest message (MiB) omega takes or passes on, either way and on both transports: a longer
    answer fails that one request (a long line that names no request stops its stdio server)."""
    tool_search: ToolSearchMode = "auto"
    """List every tool ("off"), or the always-visible ones plus `search_tools`/`call_tool` ("on"; "auto":
    when the tools' definitions exceed 40,000 characters)."""
    always_visible: tuple[str, ...] | None = None
    """Globs of the tools listed even in search mode; None: the built-ins."""
    drain_seconds: float = Field(default=30.0, ge=0, le=3600, allow_inf_nan=False)
    """On SIGTERM, how long requests are still served (and calls in flight may finish) before omega exits."""
    idle_exit: float = Field(default=600.0, gt=0, le=30 * 86400, allow_inf_nan=False)
    """The shared hub (`omega-mcp attach`) exits when no window has been attached for this many seconds."""
    sse_poll_seconds: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False)
    """Close a handshake-era request's event stream after this many seconds without its answer (SEP-1699
    polling: the client reconnects with `Last-Event-ID` and gets the rest); None: keep it open."""
    max_sessions_per_client: int = Field(default=32, gt=0, le=100_000, strict=True)
    """How many handshake-era sessions one client token may hold open at once."""
    clients: dict[ClientKey, ClientConfig] = Field(default_factory=dict[str, ClientConfig])
    """`[hub.clients.NAME]`: the HTTP clients with their own token and profile."""

    _hosts_list = field_validator("allowed_hosts", mode="before")(_need_list)
    _visible_list = field_validator("always_visible", mode="before")(_need_list)


class Config(_Strict):
    """The whole file, plus where it came from and the resolved data directory."""

    sandbox: SandboxConfig = SandboxConfig()
    hub: HubConfig = HubConfig()
    servers: dict[ServerKey, ServerConfig] = Field(default_factory=dict[str, ServerConfig])
    agent: AgentConfig = AgentConfig()
    sampling: SamplingConfig = SamplingConfig()
    path: Path | None = Field(default=None, exclude=True)
    home: Path = Field(default_factory=omega_home, exclude=True)
    _problems: dict[str, str] = PrivateAttr(default_factory=dict[str, str])

    @model_validator(mode="after")
    def _server_problems(self, info: ValidationInfo) -> Config:
        self._problems = dict(as_object(info.context).get(PROBLEMS) or {})
        return self

    @property
    def workspace(self) -> Path:
        """The workspace directory (absolute; may not exist yet)."""
        return self.sandbox.workspace_in(self.home)

    @property
    def place(self) -> ConfigPlace:
        """Where this configuration lives."""
        return ConfigPlace(self.home, self.path)

    @property
    def for_servers(self) -> ServersSection:
        """What starting and confining the downstream servers reads of the file (`proxy/`, `sandbox/servers.py`)."""
        return ServersSection(
            self.servers,
            self.sandbox,
            self.place,
            dict(self._problems),
            self.hub.max_message_mb,
            self.sampling.provider is not None,
        )

    def server_problem(self, server_name: str) -> str | None:
        """Why `[servers.NAME]` cannot start although the file is valid (an unset variable), or None."""
        return self._problems.get(server_name)


@dataclass(frozen=True, slots=True)
class ConfigPlace:
    """Where a configuration lives: omega's data directory (`$OMEGA_HOME`) and the file read (None: none)."""

    home: Path
    path: Path | None = None


@dataclass(frozen=True, slots=True)
class ServersSection:
    """The part of the file that starting the downstream servers reads (the supervisor, the early starts,
    their confinement): `[servers]` (each one's own settings, and the others' directories to hide),
    `[sandbox]` (the default confinement, the limits and lists every confined server shares), where
    the file lives (the servers' directories, the pins, the file to hide) and two of `[hub]` and
    `[sampling]`: the message bound and whether omega's own provider answers sampling."""

    servers: Mapping[str, ServerConfig]
    sandbox: SandboxConfig
    place: ConfigPlace
    problems: Mapping[str, str]
    """Why a server cannot start although the file is valid (`Config.server_problem`)."""
    max_message_mb: int
    """`[hub] max_message_mb`."""
    own_sampling: bool
    """`[sampling] provider` is set: omega declares sampling to its servers even with no client."""

    def server_problem(self, server_name: str) -> str | None:
        """Why `[servers.NAME]` cannot start although the file is valid (an unset variable), or None."""
        return self.problems.get(server_name)
