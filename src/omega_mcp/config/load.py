"""Finding, reading, expanding and validating servers.toml, and wording its errors."""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ValidationError

from omega_mcp.config.tables import (
    PROBLEMS,
    TAG_NAME,
    TAG_TABLE,
    UNRESOLVED_URLS,
    AgentConfig,
    Config,
    HubConfig,
    SamplingConfig,
    SandboxConfig,
    ServerConfig,
    ServerSandboxConfig,
    omega_home,
)
from omega_mcp.envvars import expand_entry, has_reference
from omega_mcp.errors import ConfigError
from omega_mcp.narrow import as_object, object_or_none

__all__ = ["find_config_path", "load_config"]


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
    "sampling": SamplingConfig,
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
        known = "the known tables are [sandbox], [servers.NAME], [hub], [agent] and [sampling]"
        return f"unknown {kind}; {f'did you mean {_header(close[0], value)}?' if close else known}"
    model = _TABLES.get(str(loc[0])) if len(loc) == (3 if loc[0] == "servers" else 2) else None
    if loc[0] == "servers" and len(loc) == 4 and loc[2] == "sandbox":
        model = ServerSandboxConfig
    if model is None:
        return "unknown key"
    close = difflib.get_close_matches(key, list(model.model_fields), n=1)
    known = f"the known keys are {', '.join(model.model_fields)}"
    return f"unknown key; {f'did you mean `{close[0]}`?' if close else known}"


def _describe(error: ValidationError, unset: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every problem as (dotted key, message); `unset` maps a key to the unset variable it uses."""
    described: list[tuple[str, str]] = []
    for problem in error.errors():
        loc = tuple(part for part in problem["loc"] if part not in ("__root__", TAG_TABLE, TAG_NAME))
        key = ".".join(str(part) for part in loc)
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = _unknown(loc, problem.get("input"))
        elif problem["type"] in ("model_type", "dict_type"):
            message = "expected a table"
        elif TAG_NAME in problem["loc"]:
            message = 'expected "none", "default" or a table such as {network = true, write_roots = ["~/.npm"]}'
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
    context = {PROBLEMS: problems, UNRESOLVED_URLS: frozenset(unresolved_urls)}
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
    servers_abs = {name: _server_paths(entry, base) for name, entry in config.servers.items()}
    return config.model_copy(update={"sandbox": sandbox, "servers": servers_abs})


def _server_paths(entry: ServerConfig, base: Path) -> ServerConfig:
    """`cwd` and the per-server sandbox's `write_roots` made absolute, like `[sandbox]`'s."""
    update: dict[str, object] = {"cwd": _absolute(entry.cwd, base)}
    if isinstance(entry.sandbox, ServerSandboxConfig):
        roots = tuple(p for p in (_absolute(r, base) for r in entry.sandbox.write_roots) if p)
        update["sandbox"] = entry.sandbox.model_copy(update={"write_roots": roots})
    return entry.model_copy(update=update)
