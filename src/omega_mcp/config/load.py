"""Finding, reading, expanding and validating servers.toml, and wording its errors.

The file is validated as the JSON it is equivalent to (pydantic's JSON mode), by strict models: an
array is a tuple's form and a string a path's, but a string is never a number or a boolean. TOML's
dates and times have no JSON form and no key takes one: each is a problem of its own. Every problem
of the file is reported at once, one line each.
"""

from __future__ import annotations

import datetime
import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from omega_mcp.config.tables import (
    ONE_TRANSPORT,
    PROBLEMS,
    TAG_NAME,
    TAG_TABLE,
    UNRESOLVED_URLS,
    AgentConfig,
    ClientConfig,
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
    if loc[:2] == ("hub", "clients") and len(loc) == 4:
        model = ClientConfig
    if model is None:
        return "unknown key"
    close = difflib.get_close_matches(key, list(model.model_fields), n=1)
    known = f"the known keys are {', '.join(model.model_fields)}"
    return f"unknown key; {f'did you mean `{close[0]}`?' if close else known}"


def _shown(value: object) -> str:
    """A TOML value as the user wrote it, for `expected X, got Y`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    return "a table" if isinstance(value, dict) else "a list" if isinstance(value, list) else repr(value)


_TYPES = {
    "bool_type": "true or false",
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "tuple_type": "a list",
    "list_type": "a list",
    "model_type": "a table",
    "dict_type": "a table",
}


def _wrong_type(kind: str, value: object) -> str:
    """`expected a number, got the string "120" (write 120, without quotes)`."""
    message = f"expected {_TYPES[kind]}, got {_shown(value)}"
    number = None
    if isinstance(value, str) and kind in ("int_type", "float_type"):
        number = _from_variable("int_type", value) if kind == "int_type" else _from_variable("float_type", value)
        if isinstance(number, float) and number.is_integer() and "." not in value:
            number = int(number)  # `bash_timeout = "120"`: write 120
    if number is not None:
        return f"{message} (write {number!r}, without quotes)"
    if isinstance(value, str) and kind == "bool_type" and value.strip().lower() in ("true", "false", "yes", "no"):
        return f"{message} (write {str(value.strip().lower() in ('true', 'yes')).lower()}, without quotes)"
    return message


def _describe(error: ValidationError, unset: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every problem as (dotted key, message); `unset` maps a key to the unset variable it uses."""
    described: list[tuple[str, str]] = []
    for problem in error.errors():
        loc = tuple(part for part in problem["loc"] if part not in ("__root__", "[key]", TAG_TABLE, TAG_NAME))
        key = ".".join(str(part) for part in loc)
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = _unknown(loc, problem.get("input"))
        elif TAG_NAME in problem["loc"] or (TAG_TABLE in problem["loc"] and problem["type"] == "model_type"):
            message = 'expected "none", "default" or a table such as {network = true, write_roots = ["~/.npm"]}'
        elif problem["type"] in _TYPES:
            message = _wrong_type(problem["type"], problem.get("input"))
        if key in unset:
            message += f" (it uses ${{{unset[key]}}}, which is not set)"
        described.append((key, message))
    return described


def _without_dates(value: Any, key: str, dates: list[tuple[str, str]]) -> Any:
    """`value` with each TOML date or time replaced by None, noting where (no key takes one)."""
    if isinstance(value, dict):
        return {k: _without_dates(v, f"{key}.{k}" if key else str(k), dates) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    if isinstance(value, list):
        return [_without_dates(v, key, dates) for v in value]  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, datetime.date | datetime.time):
        dates.append((key, f"expected no date or time, got {value.isoformat()} (write it in quotes for a string)"))
        return None
    return value


def _templated(value: object, path: tuple[str | int, ...], found: set[tuple[str | int, ...]]) -> None:
    """Collect the paths of the strings in `value` that hold a `${VAR}` reference."""
    if isinstance(value, str) and has_reference(value):
        found.add(path)
    elif isinstance(value, list):
        for i, item in enumerate(cast(list[object], value)):
            _templated(item, (*path, i), found)
    elif (table := object_or_none(value)) is not None:
        for key, item in table.items():
            _templated(item, (*path, key), found)


def _from_variable(kind: str, text: str) -> bool | int | float | None:
    """The number or boolean a key needs from the text a `${VAR}` gave it, or None when it is none."""
    word = text.strip()
    if kind == "bool_type":
        return {"true": True, "false": False}.get(word)
    if kind == "int_type" and re.fullmatch(r"[+-]?\d+", word):
        return int(word)
    if kind == "float_type" and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", word):
        return float(word)
    return None


def _validate(data: dict[str, Any], context: Mapping[str, object], templated: set[tuple[str | int, ...]]) -> Config:
    """The file's data validated by the strict models in JSON mode. A string that a `${VAR}` made is the
    one way to set a number or boolean from the environment (`timeout = "${TIMEOUT:-30}"`): where such
    a string stands for one, its text is read as one, and the data validated once more.

    Raises:
        ValidationError: every problem of the file.
    """
    try:
        return Config.model_validate_json(json.dumps(data), context=context)
    except ValidationError as exc:
        converted = False
        for problem in exc.errors():
            path = tuple(part for part in problem["loc"] if part not in (TAG_TABLE, TAG_NAME))
            text = problem.get("input")
            if path in templated and isinstance(text, str):
                value = _from_variable(problem["type"], text)
                if value is not None:
                    parent: Any = data
                    for part in path[:-1]:
                        parent = parent[part]
                    parent[path[-1]] = value
                    converted = True
        if not converted:
            raise
    return Config.model_validate_json(json.dumps(data), context=context)


def _transport_problems(servers: Mapping[str, object], described: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Entries with both or neither of `command` and `url`, also when their other values are wrong
    (pydantic judges the whole entry only once each value is right)."""
    found: list[tuple[str, str]] = []
    for name, entry in servers.items():
        keys = as_object(entry)
        if isinstance(entry, dict) and ("command" in keys) == ("url" in keys):
            problem = (f"servers.{name}", ONE_TRANSPORT)
            if problem not in described:
                found.append(problem)
    return found


_WHOLE_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _client_tokens(data: dict[str, Any], env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each `[hub.clients.NAME] token` replaced by the environment variable it names (in place), and
    the problems: a token must be exactly `${VAR}` (one written in the file, or as a default, would be
    read by whoever reads the file) of a variable that is set. A token's value is never quoted back."""
    problems: list[tuple[str, str]] = []
    for name, entry in as_object(as_object(data.get("hub")).get("clients")).items():
        table, key = as_object(entry), f"hub.clients.{name}.token"
        token = table.get("token")
        if not isinstance(token, str):
            continue  # missing or not a string: validation says so
        match = _WHOLE_REFERENCE.fullmatch(token.strip())
        if match is None:
            problems.append(
                (
                    key,
                    f'must name the environment variable holding it, e.g. token = "${{{name.upper()}_TOKEN}}" '
                    "(a token written in the file is read by whoever reads the file)",
                )
            )
        elif not env.get(match[1]):
            problems.append((key, f"environment variable {match[1]} is not set (or empty)"))
        else:
            table["token"] = env[match[1]]
    return problems


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
    templated: set[tuple[str | int, ...]] = set()
    servers = as_object(data.get("servers"))  # expanded in place; not a table: left for validation to report
    for name, entry in list(servers.items()):
        if as_object(entry).get("enabled") is False:
            continue  # disabled: never expanded, so never broken by the environment
        _templated(entry, ("servers", name), templated)
        missing: list[tuple[str, str]] = []
        servers[name] = expand_entry(entry, env, f"servers.{name}", missing)
        if missing:
            names = ", ".join(f"{variable} ({key})" for key, variable in missing)
            problems[name] = f"unset environment variable{'s' if len(missing) > 1 else ''} {names}"
            unset.update(missing)
            if isinstance(url := as_object(servers[name]).get("url"), str) and has_reference(url):
                unresolved_urls.add(url)
    context = {PROBLEMS: problems, UNRESOLVED_URLS: frozenset(unresolved_urls)}
    tokens = _client_tokens(data, env)
    dates: list[tuple[str, str]] = []
    document = {**_without_dates(data, "", dates), "path": str(found), "home": str(home)}
    described: list[tuple[str, str]] = []
    config: Config | None = None
    try:
        config = _validate(document, context, templated)
    except ValidationError as exc:
        described = _describe(exc, unset)
    unknown = {key for key, message in described if message.startswith("unknown")}
    dated = {key for key, _ in dates if key not in unknown}  # a date's own line says it all
    described = [(k, m) for k, m in described if k not in dated] + [(k, m) for k, m in dates if k in dated]
    described += _transport_problems(servers, described)
    if tokens:  # what is wrong with where a token comes from says more than what it came out as
        described = [(k, m) for k, m in described if k not in dict(tokens)] + tokens
    if described or config is None:
        raise ConfigError.combine([ConfigError(m, path=str(found), key=k) for k, m in described]) from None
    base = found.parent
    sandbox = config.sandbox.model_copy(
        update={
            "workspace": _absolute(config.sandbox.workspace, base),
            "write_roots": tuple(p for p in (_absolute(r, base) for r in config.sandbox.write_roots) if p),
        }
    )
    servers_abs = {name: _server_paths(entry, base) for name, entry in config.servers.items()}
    clients = {
        name: client.model_copy(update={"workspace": _absolute(client.workspace, base)})
        for name, client in config.hub.clients.items()
    }
    hub = config.hub.model_copy(update={"clients": clients})
    return config.model_copy(update={"sandbox": sandbox, "servers": servers_abs, "hub": hub})


def _server_paths(entry: ServerConfig, base: Path) -> ServerConfig:
    """`cwd` and the per-server sandbox's `write_roots` made absolute, like `[sandbox]`'s."""
    update: dict[str, object] = {"cwd": _absolute(entry.cwd, base)}
    if isinstance(entry.sandbox, ServerSandboxConfig):
        roots = tuple(p for p in (_absolute(r, base) for r in entry.sandbox.write_roots) if p)
        update["sandbox"] = entry.sandbox.model_copy(update={"write_roots": roots})
    return entry.model_copy(update=update)
