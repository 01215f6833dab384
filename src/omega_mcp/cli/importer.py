"""`omega-mcp import`: turn a Claude Code / Claude Desktop `mcpServers` JSON into `[servers.*]` entries.

Reads `.mcp.json`, `~/.claude.json` (top-level and per-project `mcpServers`) or
`claude_desktop_config.json`, and edits servers.toml with tomlkit so comments, formatting and
existing entries survive. Keys that are not valid server keys are renamed (and reported);
names already present are kept unless `overwrite`. Nothing is dropped without a word: a name
that occurs again (in another project's `mcpServers`, or twice in one object, where the last
counts as in Claude Code) is reported with where it was, an entry that is not a JSON object and
the fields omega has no setting for are reported too. An entry that launches omega itself
(`proxy.recursion.launches_omega`: typically the one `claude-config` wrote) is skipped, since omega
never runs itself. `${VAR}` references are copied as written; those whose variable is unset in the
importing environment are reported, since the server stays failed until it is set. The new file is
validated with the normal config loader (in an empty environment, so the check does not depend on
the caller's variables) before it replaces the old one atomically, so a failed import changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import tomlkit
from pydantic import ValidationError
from tomlkit.exceptions import ParseError
from tomlkit.items import InlineTable, Table

from omega_mcp.config import ServerConfig, load_config
from omega_mcp.envvars import unset_variables
from omega_mcp.errors import ConfigError
from omega_mcp.proxy.recursion import launches_omega

__all__ = ["ImportReport", "import_servers", "read_mcp_servers"]

_INVALID_KEY = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class ImportReport:
    """What an import did: server keys `added`, `replaced` and `skipped` (already there), source names
    `renamed` to a key and `unsupported` (with why), and the `unset` variables the written entries use
    as (server key, key inside the entry, variable name)."""

    added: list[str] = field(default_factory=list[str])
    replaced: list[str] = field(default_factory=list[str])
    skipped: list[str] = field(default_factory=list[str])
    renamed: dict[str, str] = field(default_factory=dict[str, str])
    unsupported: dict[str, str] = field(default_factory=dict[str, str])
    unset: list[tuple[str, str, str]] = field(default_factory=list[tuple[str, str, str]])
    dropped: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    """Source entries not imported at all, as (name, why): a repeated name, an entry that is no object."""
    ignored: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    """Fields of imported entries that omega has no setting for, by source name."""


def _server_key(name: str) -> str:
    key = _INVALID_KEY.sub("-", name)
    while "__" in key:
        key = key.replace("__", "_")
    return key or "server"


class _Object(dict[str, Any]):
    """A JSON object that remembers the keys it had more than once (the last value counts)."""

    repeated: list[str]


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    result = _Object(pairs)
    result.repeated = []
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            result.repeated.append(key)
        seen.add(key)
    return result


def read_mcp_servers(source: Path, dropped: list[tuple[str, str]] | None = None) -> dict[str, dict[str, Any]]:
    """The `mcpServers` object of a Claude Code / Desktop JSON file (project entries merged in: the
    first of a name wins). Every entry left out is appended to `dropped` as (name, why).

    Raises:
        ConfigError: unreadable file, invalid JSON, or no `mcpServers` in it.
    """
    dropped = [] if dropped is None else dropped
    try:
        data = json.loads(source.read_text(encoding="utf-8"), object_pairs_hook=_object)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(source)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not valid JSON: {exc}", path=str(source)) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object with `mcpServers`", path=str(source))
    root = cast(dict[str, Any], data)
    found: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    sections: list[tuple[str, Any]] = [("mcpServers", root.get("mcpServers"))]
    projects = root.get("projects")
    if isinstance(projects, dict):
        for path, project in cast(dict[str, object], projects).items():
            if isinstance(project, dict):
                sections.append(
                    (f"the mcpServers of project {path}", cast(dict[str, object], project).get("mcpServers"))
                )
    for where, section in sections:
        if not isinstance(section, dict):
            continue
        for name in section.repeated if isinstance(section, _Object) else ():
            dropped.append((name, f"{where} names it more than once: the last one counts (as in Claude Code)"))
        for name, entry in cast(dict[str, Any], section).items():
            if not isinstance(entry, dict):
                dropped.append((name, f"its entry in {where} is not a JSON object"))
            elif name in found:
                same = "the same entry" if entry == found[name] else "another entry"
                dropped.append((name, f"{where} has {same} by this name; the one in {origin[name]} was imported"))
            else:
                found[name], origin[name] = cast(dict[str, Any], entry), where
    if not found:
        raise ConfigError("no `mcpServers` entries found", path=str(source), key="mcpServers")
    return found


def _str_dict(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in cast(dict[object, object], value).items()}


def _inline(values: dict[str, str]) -> InlineTable:
    inline = tomlkit.inline_table()
    for key, value in values.items():
        inline[key] = value
    return inline


_CONFINE_HINT = (
    'sandbox = "default"   # uncomment to confine it: writes only to its own directory, no network',
    "(or sandbox = { network = true, write_roots = [...] }: see docs/servers.md, Confined servers)",
)


_KNOWN_FIELDS = frozenset({"type", "command", "args", "env", "cwd", "url", "headers", "disabled"})


def _entry_table(entry: dict[str, Any]) -> tuple[Table | None, str | None]:
    """A `[servers.X]` table for one JSON entry, or why it cannot be imported."""
    table = tomlkit.table()
    kind = entry.get("type", "stdio" if "command" in entry else "http")
    if kind == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            return None, "stdio entry without a `command`"
        table.add("command", command)
        args: object = entry.get("args") or []
        if not isinstance(args, list):
            return None, "`args` is not a list"
        words = [str(a) for a in cast(list[object], args)]
        if launches_omega(command, words):
            return None, "it launches omega itself (omega never runs itself)"
        if words:
            table.add("args", words)
        if env := _str_dict(entry.get("env")):
            table.add("env", _inline(env))
        if isinstance(entry.get("cwd"), str):
            table.add("cwd", entry["cwd"])
        table.add(tomlkit.comment(_CONFINE_HINT[0]))
        table.add(tomlkit.comment(_CONFINE_HINT[1]))
    elif kind in ("http", "sse", "streamable-http", "streamableHttp"):
        url = entry.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return None, f"{kind} entry without an http(s) `url`"
        table.add("url", url)
        if headers := _str_dict(entry.get("headers")):
            table.add("headers", _inline(headers))
    else:
        return None, f"transport type {kind!r} is not supported"
    if entry.get("disabled") is True:
        table.add("enabled", False)
    try:
        # What servers.toml would refuse is reported, not written (validated as load_config does).
        ServerConfig.model_validate_json(json.dumps(table.unwrap()))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return None, f"{where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')}"
    return table, None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def import_servers(
    source: Path,
    target: Path,
    *,
    overwrite: bool = False,
    dry_run: bool = False,
    environ: Mapping[str, str] | None = None,
) -> ImportReport:
    """Merge the servers of `source` into the servers.toml at `target` (created if missing).

    `environ` (default `os.environ`) is where `${VAR}` references are looked up for `report.unset`.

    Raises:
        ConfigError: the source cannot be read, the target cannot be parsed, or the result is invalid.
    """
    report = ImportReport()
    servers = read_mcp_servers(source, report.dropped)
    try:
        document = tomlkit.parse(target.read_text(encoding="utf-8")) if target.exists() else tomlkit.document()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path=str(target)) from None
    except ParseError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=str(target)) from None
    section: object = cast(dict[str, object], document).get("servers")
    if section is None:
        section = tomlkit.table(is_super_table=True)
        document.add("servers", section)
    elif not isinstance(section, Table):
        raise ConfigError("`servers` must be a table", path=str(target), key="servers")
    for name, entry in servers.items():
        key = _server_key(name)
        # Two source names may map to one key (`a__b`, `a_b`): the second gets a suffix, not dropped.
        base, n = key, 2
        while key in report.added or key in report.replaced:
            key, n = f"{base}-{n}", n + 1
        if key != name:
            report.renamed[name] = key
        table, problem = _entry_table(entry)
        if table is None:
            report.unsupported[name] = problem or "unsupported"
            continue
        if ignored := sorted(set(entry) - _KNOWN_FIELDS):
            report.ignored[name] = ignored
        if key in section:
            if not overwrite:
                report.skipped.append(key)
                continue
            del section[key]
            report.replaced.append(key)
        else:
            report.added.append(key)
        section.add(key, table)
        if entry.get("disabled") is not True:  # a disabled entry is never expanded
            unset = unset_variables(table.unwrap(), os.environ if environ is None else environ)
            report.unset += [(key, where, variable) for where, variable in unset]
    text = tomlkit.dumps(document)
    # Validate exactly what would be written. In an empty environment every `${VAR}` without default
    # stays unresolved, which only marks its server failed: this checks syntax and keys only.
    with tempfile.TemporaryDirectory() as scratch:
        candidate = Path(scratch) / "servers.toml"
        candidate.write_text(text, encoding="utf-8")
        try:
            load_config(candidate, environ={})
        except ConfigError as exc:
            problems = [line.removeprefix(f"{candidate}: ") for line in exc.problems]
            errors = [ConfigError(f"the imported result would be invalid: {p}", path=str(target)) for p in problems]
            raise ConfigError.combine(errors) from None
    if not dry_run:
        _write_atomically(target, text)
    return report
