"""servers.toml: pydantic models, lookup order and loading (the `${VAR}` expansion is in `envvars.py`).

Validation is strict (unknown keys are errors; a close known key or table is suggested) and reports
every structural problem at once: one `ConfigError` whose `problems` are one line each, naming the
file, the dotted key and what is wrong, so the CLI can exit 2 without a traceback. Paths are
expanded (`~`) and made absolute here; nothing else in the package reads the environment for
configuration. Lookup: `--config`, `$OMEGA_CONFIG`, `./servers.toml`, `$OMEGA_HOME/servers.toml`;
no file at all is a valid, built-ins-only configuration.

Every string of an enabled `[servers.NAME]` is expanded before validation (a disabled one is left
as written; see `envvars.py`). `${OMEGA_PYTHON}` is the interpreter running omega (`sys.executable`) unless the
environment sets it: `command = "${OMEGA_PYTHON}"`, `args = ["-m", "mcp_server_time"]` runs a
server installed next to omega, no wrapper script. A broken server stays a broken server: an unset
`${VAR}` without default fails only its server (`Config.server_problem` names the variable and
key), which is validated with the `${VAR}` text left in place and kept in `Config.servers`, in
order, for `omega-mcp tools` to list (a structural error in it is still a config error). The
problems reach a private attribute through the validation context, so no TOML key can set one.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from omega_mcp.envvars import expand_entry, has_reference
from omega_mcp.errors import ConfigError
from omega_mcp.narrow import as_object, object_or_none
from omega_mcp.sandbox.hidden import DEFAULT_HIDDEN, is_default_hidden

__all__ = [
    "AgentConfig",
    "Config",
    "HubConfig",
    "OnDenied",
    "SandboxConfig",
    "ServerConfig",
    "find_config_path",
    "load_config",
    "omega_home",
]

SandboxMode = Literal["sandbox", "rx", "rwx"]
OnDenied = Literal["deny", "ask"]
"""What a write outside the roots does: refused, or put to the user once (`sandbox/approvals.py`)."""

_SERVER_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

# Validation context keys: what `load_config` knows from expansion and no TOML key can set.
_PROBLEMS = "omega_server_problems"
_UNRESOLVED_URLS = "omega_unresolved_urls"

# What each list key holds, and an example of one, for `_need_list`'s message.
_LISTS = {
    "args": ("arguments", ["-m", "mcp_server_time"]),
    "tools": ("globs", ["get_*"]),
    "exclude_tools": ("globs", ["delete_*"]),
    "write_roots": ("directories", ["/tmp/scratch"]),
    "env_passthrough": ("variable names", ["GITHUB_TOKEN"]),
    "hide": ("paths", ["~/secret-dir"]),
    "unhide": ("paths", ["~/.ssh"]),
}


def _need_list(value: Any, info: ValidationInfo) -> Any:
    """A list key given anything else is refused with the list form, from the user's own string when
    there is one: `tools = "get_*"` gets `e.g. tools = ["get_*"]`."""
    if isinstance(value, list | tuple):
        return value  # pyright: ignore[reportUnknownVariableType]
    key = info.field_name or ""
    what, example = _LISTS[key]
    if isinstance(value, str) and value.strip():
        example = value.split() if key == "args" else [value]
    raise ValueError(f"expected a list of {what}, e.g. {key} = [{', '.join(json.dumps(e) for e in example)}]")


def _check_path(value: Any) -> Any:
    """A configured path must be a non-empty string without NUL (an empty one would silently mean the
    config file's own directory; a NUL cannot reach the OS)."""
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a path (a string), got {value!r}")
    if not value.strip():
        raise ValueError('must not be empty (write "." for the directory of the config file)')
    if "\0" in value:
        raise ValueError(f"contains a NUL character: {value!r}")
    return value


def _no_nul(value: str | None, what: str) -> str | None:
    if value is not None and "\0" in value:
        raise ValueError(f"{what} contains a NUL character: {value!r}")
    return value


_MAX_MIB = 2**40  # in bytes still below 2**63: rlimits are signed 64-bit in Python's resource module


def omega_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$OMEGA_HOME`, default `~/.omega`, absolute."""
    env = os.environ if environ is None else environ
    raw = env.get("OMEGA_HOME") or "~/.omega"
    return Path(os.path.abspath(os.path.expanduser(raw)))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SandboxConfig(_Strict):
    """`[sandbox]`: where tools may write and how bash is confined."""

    mode: SandboxMode = "sandbox"
    workspace: Path | None = None
    write_roots: tuple[Path, ...] = ()
    bash_timeout: float = Field(default=120.0, gt=0, le=600, allow_inf_nan=False)
    require_os_sandbox: bool = True
    on_denied: OnDenied = "deny"
    env_passthrough: tuple[str, ...] = ()
    """Environment variable names passed to bash even though they look like secrets."""
    max_processes: int | None = Field(default=None, gt=0, le=4_194_304)  # the kernel's PID_MAX_LIMIT
    max_file_size_mb: int | None = Field(default=None, gt=0, le=_MAX_MIB)
    max_open_files: int | None = Field(default=None, gt=0, le=2**30)  # above the kernel's nr_open maximum
    memory_mb: int | None = Field(default=None, gt=0, le=_MAX_MIB)
    hide: tuple[Path, ...] = ()
    """More paths neither bash nor `read` may see (sandbox and rx modes; `sandbox/hidden.py`)."""
    unhide: tuple[Path, ...] = ()
    """Entries of `hidden.DEFAULT_HIDDEN` to show after all."""

    @field_validator("workspace", mode="before")
    @classmethod
    def _workspace_path(cls, value: Any) -> Any:
        return None if value is None else _check_path(value)

    @field_validator("write_roots", "hide", "unhide", mode="before")
    @classmethod
    def _path_lists(cls, value: Any, info: ValidationInfo) -> Any:
        return tuple(_check_path(item) for item in _need_list(value, info))  # pyright: ignore[reportUnknownVariableType]

    _env_passthrough_list = field_validator("env_passthrough", mode="before")(_need_list)

    @field_validator("unhide")
    @classmethod
    def _only_defaults(cls, value: tuple[Path, ...]) -> tuple[Path, ...]:
        for item in value:
            if not is_default_hidden(item):
                raise ValueError(
                    f"{str(item)!r} is not hidden by default, so it cannot be unhidden; the defaults are "
                    f"{', '.join(DEFAULT_HIDDEN)} (remove a path you added from `hide` instead)"
                )
        return value


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

    @field_validator("cwd", mode="before")
    @classmethod
    def _cwd_path(cls, value: Any) -> Any:
        return None if value is None else _check_path(value)

    _lists = field_validator("args", "tools", "exclude_tools", mode="before")(_need_list)

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
            raise ValueError("needs exactly one of `command` (stdio) or `url` (remote)")
        # `url = "${HUB_URL}"`, HUB_URL unset: the server is failed for that; its URL cannot be judged yet.
        url, unresolved = self.url, as_object(info.context).get(_UNRESOLVED_URLS) or ()
        if url is not None and not url.startswith(("http://", "https://")) and url not in unresolved:
            raise ValueError(f"`url` must start with http:// or https://, got {url!r}")
        return self


class AgentConfig(_Strict):
    """`[agent]`: defaults for `omega-mcp agent`."""

    provider: Literal["openai", "anthropic", "ollama", "openrouter", "gemini"] | None = None
    model: str | None = None
    model_fast: str | None = None
    model_complex: str | None = None
    max_turns: int = Field(default=25, gt=0)
    base_url: str | None = None
    api_key_env: str | None = None
    anthropic_version: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)


class HubConfig(_Strict):
    """`[hub]`: how the MCP server names downstream tools for its client (see `names.Naming`)."""

    client_prefix: str = Field(default="", max_length=40, pattern=r"^[A-Za-z0-9_-]*$")
    names: Literal["full", "short"] = "full"


class Config(_Strict):
    """The whole file, plus where it came from and the resolved data directory."""

    sandbox: SandboxConfig = SandboxConfig()
    hub: HubConfig = HubConfig()
    servers: dict[str, ServerConfig] = Field(default_factory=dict[str, ServerConfig])
    agent: AgentConfig = AgentConfig()
    path: Path | None = Field(default=None, exclude=True)
    home: Path = Field(default_factory=omega_home, exclude=True)
    _problems: dict[str, str] = PrivateAttr(default_factory=dict[str, str])

    @field_validator("servers")
    @classmethod
    def _server_keys(cls, servers: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        for key in servers:
            if not _SERVER_KEY.match(key):
                raise ValueError(f"server key {key!r} may only contain letters, digits, '-' and '_'")
            if "__" in key:
                raise ValueError(f"server key {key!r} must not contain '__' (it separates mcp__<server>__<tool>)")
        return servers

    @model_validator(mode="after")
    def _server_problems(self, info: ValidationInfo) -> Config:
        self._problems = dict(as_object(info.context).get(_PROBLEMS) or {})
        return self

    @property
    def workspace(self) -> Path:
        """The workspace directory (absolute; may not exist yet)."""
        return self.sandbox.workspace or self.home / "workspace"

    def server_problem(self, server_name: str) -> str | None:
        """Why `[servers.NAME]` cannot start although the file is valid (an unset variable), or None."""
        return self._problems.get(server_name)


def find_config_path(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file to use, by the lookup order, or None when there is none.

    Raises:
        ConfigError: an explicitly named file (flag or `$OMEGA_CONFIG`) does not exist.
    """
    env = os.environ if environ is None else environ
    for named, origin in ((explicit, "--config"), (env.get("OMEGA_CONFIG") or None, "OMEGA_CONFIG")):
        if named is not None:
            path = Path(os.path.expanduser(str(named)))
            if path.is_dir():
                raise ConfigError(f"is a directory, not a config file (from {origin})", path=str(path))
            if not path.is_file():
                raise ConfigError(f"config file not found (from {origin})", path=str(path))
            return path.absolute()
    for candidate in (Path("servers.toml"), omega_home(env) / "servers.toml"):
        if candidate.is_file():
            return candidate.absolute()
    return None


def _absolute(path: Path | None, base: Path) -> Path | None:
    if path is None:
        return None
    expanded = Path(os.path.expanduser(str(path)))
    return Path(os.path.abspath(base / expanded))


_TABLES: dict[str, type[BaseModel]] = {
    "sandbox": SandboxConfig,
    "servers": ServerConfig,
    "hub": HubConfig,
    "agent": AgentConfig,
}


def _header(table: str, value: object) -> str:
    """How to write `table`: `[servers.x]` for the user's own `[server.x]`, `[servers.NAME]`, `[sandbox]`."""
    subtables = [key for key, item in as_object(value).items() if isinstance(item, dict)]
    return f"[{table}]" if table != "servers" else f"[servers.{subtables[0] if subtables else 'NAME'}]"


def _unknown(loc: tuple[int | str, ...], value: object) -> str:
    """The message for an unknown key, with the close known key (or table) suggested."""
    key, kind = str(loc[-1]), "table" if object_or_none(value) is not None else "key"
    if len(loc) == 1:
        for table, model in _TABLES.items():
            if kind == "key" and key in model.model_fields:
                return f"unknown key; `{key}` belongs in {_header(table, None)}"
        close = difflib.get_close_matches(key, list(_TABLES), n=1)
        known = "the known tables are [sandbox], [servers.NAME], [hub] and [agent]"
        return f"unknown {kind}; {f'did you mean {_header(close[0], value)}?' if close else known}"
    model = _TABLES.get(str(loc[0])) if len(loc) == (3 if loc[0] == "servers" else 2) else None
    if model is None:
        return "unknown key"
    close = difflib.get_close_matches(key, list(model.model_fields), n=1)
    known = f"the known keys are {', '.join(model.model_fields)}"
    return f"unknown key; {f'did you mean `{close[0]}`?' if close else known}"


def _describe(error: ValidationError, unset: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every problem as (dotted key, message); `unset` maps a key to the unset variable it uses."""
    described: list[tuple[str, str]] = []
    for problem in error.errors():
        loc = tuple(part for part in problem["loc"] if part != "__root__")
        key = ".".join(str(part) for part in loc)
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = _unknown(loc, problem.get("input"))
        elif problem["type"] in ("model_type", "dict_type"):
            message = "expected a table"
        if key in unset:
            message += f" (it uses ${{{unset[key]}}}, which is not set)"
        described.append((key, message))
    return described


def load_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None) -> Config:
    """Find, parse, expand and validate the configuration.

    Relative paths in the file resolve against the file's directory. A server using an unset
    variable is kept, with `Config.server_problem` saying why it cannot start.

    Raises:
        ConfigError: the file cannot be read or parsed, or values are invalid (every problem, one line each).
    """
    env = os.environ if environ is None else environ
    found = find_config_path(path, env)
    home = omega_home(env)
    if found is None:
        return Config(home=home)
    try:
        data = tomllib.loads(found.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=str(found)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path=str(found)) from None
    problems: dict[str, str] = {}
    unset: dict[str, str] = {}
    unresolved_urls: set[str] = set()
    servers = as_object(data.get("servers"))  # expanded in place; not a table: left for validation to report
    for name, entry in list(servers.items()):
        if as_object(entry).get("enabled") is False:
            continue  # disabled: never expanded, so never broken by the environment
        missing: list[tuple[str, str]] = []
        servers[name] = expand_entry(entry, env, f"servers.{name}", missing)
        if missing:
            names = ", ".join(f"{variable} ({key})" for key, variable in missing)
            problems[name] = f"unset environment variable{'s' if len(missing) > 1 else ''} {names}"
            unset.update(missing)
            if isinstance(url := as_object(servers[name]).get("url"), str) and has_reference(url):
                unresolved_urls.add(url)
    context = {_PROBLEMS: problems, _UNRESOLVED_URLS: frozenset(unresolved_urls)}
    try:
        config = Config.model_validate({**data, "path": found, "home": home}, context=context)
    except ValidationError as exc:
        raise ConfigError.combine([ConfigError(m, path=str(found), key=k) for k, m in _describe(exc, unset)]) from None
    base = found.parent
    sandbox = config.sandbox.model_copy(
        update={
            "workspace": _absolute(config.sandbox.workspace, base),
            "write_roots": tuple(p for p in (_absolute(r, base) for r in config.sandbox.write_roots) if p),
        }
    )
    servers_abs = {
        name: entry.model_copy(update={"cwd": _absolute(entry.cwd, base)}) for name, entry in config.servers.items()
    }
    return config.model_copy(update={"sandbox": sandbox, "servers": servers_abs})
