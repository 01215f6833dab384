"""servers.toml: pydantic models, lookup order and `${VAR}` / `${VAR:-default}` expansion.

Validation is strict (unknown keys are errors) and every failure is one `ConfigError` line
naming the file and the dotted key, so the CLI can exit 2 without a traceback. Paths are
expanded (`~`) and made absolute here; nothing else in the package reads the environment
for configuration. Lookup: `--config`, `$OMEGA_CONFIG`, `./servers.toml`,
`$OMEGA_HOME/servers.toml`; no file at all is a valid, built-ins-only configuration.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from omega_mcp.errors import ConfigError
from omega_mcp.narrow import as_object

__all__ = [
    "AgentConfig",
    "Config",
    "OnDenied",
    "SandboxConfig",
    "ServerConfig",
    "expand_vars",
    "find_config_path",
    "load_config",
    "omega_home",
]

SandboxMode = Literal["sandbox", "rx", "rwx"]
OnDenied = Literal["deny", "ask"]
"""What a write outside the roots does: refused, or put to the user once (`sandbox/approvals.py`)."""

_SERVER_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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

    @field_validator("workspace", mode="before")
    @classmethod
    def _workspace_path(cls, value: Any) -> Any:
        return None if value is None else _check_path(value)

    @field_validator("write_roots", mode="before")
    @classmethod
    def _write_root_paths(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return tuple(_check_path(item) for item in value)  # pyright: ignore[reportUnknownVariableType]
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
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of `command` (stdio) or `url` (remote)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"`url` must start with http:// or https://, got {self.url!r}")
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


class Config(_Strict):
    """The whole file, plus where it came from and the resolved data directory."""

    sandbox: SandboxConfig = SandboxConfig()
    servers: dict[str, ServerConfig] = Field(default_factory=dict[str, ServerConfig])
    agent: AgentConfig = AgentConfig()
    path: Path | None = Field(default=None, exclude=True)
    home: Path = Field(default_factory=omega_home, exclude=True)

    @field_validator("servers")
    @classmethod
    def _server_keys(cls, servers: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        for key in servers:
            if not _SERVER_KEY.match(key):
                raise ValueError(f"server key {key!r} may only contain letters, digits, '-' and '_'")
            if "__" in key:
                raise ValueError(f"server key {key!r} must not contain '__' (it separates mcp__<server>__<tool>)")
        return servers

    @property
    def workspace(self) -> Path:
        """The workspace directory (absolute; may not exist yet)."""
        return self.sandbox.workspace or self.home / "workspace"


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


def expand_vars(value: str, environ: Mapping[str, str], *, where: str) -> str:
    """Expand `${VAR}` and `${VAR:-default}`.

    Raises:
        ConfigError: a `${VAR}` without default names an unset variable.
    """

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and (found != "" or default is None):
            return found
        if default is not None:
            return default
        raise ConfigError(f"environment variable {name} is not set (use ${{{name}:-default}} for a default)", key=where)

    return _VAR.sub(sub, value)


def _expand_server(raw: Any, environ: Mapping[str, str], where: str) -> Any:
    if isinstance(raw, str):
        return expand_vars(raw, environ, where=where)
    if isinstance(raw, list):
        return [_expand_server(item, environ, f"{where}[{i}]") for i, item in enumerate(raw)]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if isinstance(raw, dict):
        return {k: _expand_server(v, environ, f"{where}.{k}") for k, v in raw.items()}  # pyright: ignore[reportUnknownVariableType]
    return raw


def _absolute(path: Path | None, base: Path) -> Path | None:
    if path is None:
        return None
    expanded = Path(os.path.expanduser(str(path)))
    return Path(os.path.abspath(base / expanded))


def _describe(error: ValidationError) -> tuple[str, str]:
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"] if part != "__root__")
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return key, message


def load_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None) -> Config:
    """Find, parse, expand and validate the configuration.

    Relative paths in the file resolve against the file's directory.

    Raises:
        ConfigError: the file cannot be read or parsed, or a value is invalid.
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
    servers = as_object(data.get("servers"))  # not a table: left for validation to report
    try:
        if servers:
            expanded: dict[str, Any] = {}
            for name, entry in servers.items():
                disabled = as_object(entry).get("enabled") is False
                expanded[name] = entry if disabled else _expand_server(entry, env, f"servers.{name}")
            data["servers"] = expanded
        config = Config.model_validate({**data, "path": found, "home": home})
    except ConfigError as exc:
        raise ConfigError(str(exc), path=str(found)) from None
    except ValidationError as exc:
        key, message = _describe(exc)
        raise ConfigError(message, path=str(found), key=key) from None
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
