"""What a downstream server is: where to reach it and the rules for its tools and requests.

`DownstreamSpec.from_config` turns a validated `[servers.NAME]` entry into one: a stdio command
(`StdioServerParameters`, env merged over the SDK's safe defaults when started) or a URL; tests
pass a transport factory instead (an in-process server's, for one). `tools` are allow globs and
`exclude_tools` deny globs over the server's own tool names (`fnmatch`, case-sensitive).
`usable_tools` reads a raw `tools/list` page one tool at a time: a tool no client could use (an
invalid or missing `inputSchema`, an empty name, a name listed twice) is skipped with a warning instead
of taking the whole server down. A tool that runs only as a task is exported like any other (tasks.py).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp_types.methods import validate_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from omega_mcp._sdk import Transport
from omega_mcp.config import HubConfig, ServerConfig, ServersSection, omega_home
from omega_mcp.envvars import SESSION_DIR_VARIABLE
from omega_mcp.narrow import as_object
from omega_mcp.proxy.eras import EraChoice
from omega_mcp.proxy.oauth import OAuthSettings, token_file
from omega_mcp.proxy.recursion import launches_omega
from omega_mcp.proxy.spawn import launch_problem
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.servers import server_policy
from omega_mcp.sandbox.untrusted import LaunchGuard

__all__ = ["Catalog", "DownstreamSpec", "Target", "specs_from_config", "usable_tools"]

logger = logging.getLogger(__name__)

_MAX_MESSAGE_MB = HubConfig().max_message_mb

Target = StdioServerParameters | str | Callable[[], Transport]
"""What a downstream is: a stdio command, a URL, or a transport factory (tests connect in-process servers so)."""


@dataclass(frozen=True, slots=True)
class DownstreamSpec:
    """One downstream server: where it is and the rules for its tools and requests."""

    server_name: str
    target: Target
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    timeout_seconds: float = 120.0
    connect_timeout_seconds: float = 30.0
    tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] = ()
    enabled: bool = True
    problem: str | None = None
    """Why the server cannot start although the config is valid (`Config.server_problem`), or None."""
    confinement: SandboxPolicy | None = None
    """The sandbox a stdio server starts in (`sandbox/servers.py`), None when it runs unconfined."""
    oauth: OAuthSettings | None = None
    """`auth = "oauth"` of a remote server (proxy/oauth.py), or None."""
    guard: LaunchGuard | None = None
    """Where a stdio server may start from (`sandbox/untrusted.py`): every start asks it, restarts too."""
    max_message_bytes: int = _MAX_MESSAGE_MB << 20
    """`[hub] max_message_mb`: the longest message taken from the server (a longer answer fails its request)."""
    era: EraChoice = "auto"
    """`era` in servers.toml: the era it offers (2026-07-28 first), or only `handshake` / `modern`."""
    share: Literal["shared", "session"] = "shared"
    """`share` in servers.toml: one connection for every client, or one per client session (pool.py)."""

    @classmethod
    def from_config(
        cls,
        server_name: str,
        config: ServerConfig,
        *,
        problem: str | None = None,
        confinement: SandboxPolicy | None = None,
        home: Path | None = None,
        guard: LaunchGuard | None = None,
        max_message_mb: int = _MAX_MESSAGE_MB,
    ) -> DownstreamSpec:
        """The spec of a `[servers.NAME]` entry (already validated and `${VAR}`-expanded).

        `problem` is `Config.server_problem(server_name)`: an entry that uses an unset variable keeps
        its unresolved `${VAR}` text and must not be started. `home` is `Config.home`, where the
        OAuth tokens of a server with `auth = "oauth"` live (default: `$OMEGA_HOME`). A stdio server
        that `guard` refuses (unconfined, its launch reaching into a write root) gets that as its `problem`.
        """
        target: Target
        if config.command is not None:
            target = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            if problem is None and guard is not None:
                problem = launch_problem(
                    guard,
                    server_name,
                    config.command,
                    dict(config.env) or None,
                    config.cwd,
                    args=config.args,
                    confined=confinement is not None,
                )
        else:
            assert config.url is not None  # config validation guarantees exactly one transport
            target = config.url
        oauth = None
        if config.auth == "oauth" and config.url is not None:
            oauth = OAuthSettings(
                server_name=server_name,
                url=config.url,
                record=token_file(home or omega_home(), server_name),
                client_id=config.client_id,
                scopes=config.scopes,
                client_metadata_url=config.client_metadata_url,
                client_secret_env=config.client_secret_env,
            )
        return cls(
            server_name=server_name,
            target=target,
            headers=dict(config.headers),
            timeout_seconds=config.timeout,
            connect_timeout_seconds=config.connect_timeout,
            tools=config.tools,
            exclude_tools=config.exclude_tools,
            enabled=config.enabled,
            problem=problem,
            confinement=confinement,
            oauth=oauth,
            guard=guard,
            max_message_bytes=max_message_mb << 20,
            era=config.era,
            share=config.share,
        )

    def for_session(self, directory: Path, client: str | None = None) -> DownstreamSpec:
        """This stdio server's spec for one session's own process: `directory` is its working
        directory (writable when confined, which it is as `client`: the other clients' trees hidden)
        and `${OMEGA_SESSION_DIR}` in its args and env expands to it."""
        target = self.target
        if not isinstance(target, StdioServerParameters):
            return self
        reference, where = f"${{{SESSION_DIR_VARIABLE}}}", str(directory)
        args = [a.replace(reference, where) for a in target.args]
        env = {k: v.replace(reference, where) for k, v in target.env.items()} if target.env is not None else None
        session_target = target.model_copy(update={"args": args, "env": env, "cwd": directory})
        confinement = self.confinement
        if confinement is not None:
            client = client if client is not None else confinement.client
            confinement = dataclasses.replace(confinement, workspace=directory, client=client)
        guard = self.guard
        if guard is not None:  # the tools never write a session directory (SandboxPolicy.protected_paths)
            spellings = dict.fromkeys((Path(os.path.normpath(directory)), Path(os.path.realpath(directory))))
            guard = dataclasses.replace(guard, exempt=(*guard.exempt, *spellings))
        return dataclasses.replace(self, target=session_target, confinement=confinement, guard=guard)

    def refusal(self, started_by: str | None = None) -> str | None:
        """Why this server must never be started (a config problem, or omega running itself), else None.

        `started_by` is the pid of the omega that started this one, if any (`recursion.started_by_omega`).
        """
        if self.problem is not None:
            return self.problem
        if isinstance(self.target, StdioServerParameters):
            if launches_omega(self.target.command, self.target.args):
                return "its command starts omega itself, and omega never runs itself (remove this entry)"
            if started_by is not None:
                return (
                    f"this omega was started by another omega (pid {started_by}) and starts no stdio servers, "
                    "so omega never runs itself"
                )
        return None

    def unmatched_globs(self, tool_names: Sequence[str]) -> list[str]:
        """The `tools` and `exclude_tools` globs that match none of these names (a typo, most likely)."""
        globs = [*(self.tools or ()), *self.exclude_tools]
        return [g for g in globs if not any(fnmatch.fnmatchcase(name, g) for name in tool_names)]

    def exports(self, tool_name: str) -> bool:
        """Whether the `tools` allow globs and `exclude_tools` deny globs let this tool through."""
        if self.tools is not None and not any(fnmatch.fnmatchcase(tool_name, g) for g in self.tools):
            return False
        return not any(fnmatch.fnmatchcase(tool_name, g) for g in self.exclude_tools)


def specs_from_config(section: ServersSection, guard: LaunchGuard | None = None) -> list[DownstreamSpec]:
    """One spec per `[servers.NAME]` entry, in config order (a server with a config problem never starts,
    nor one that `guard` refuses: see `sandbox/untrusted.py`)."""
    return [
        DownstreamSpec.from_config(
            name,
            entry,
            problem=section.server_problem(name),
            confinement=server_policy(section, name, guard),
            home=section.place.home,
            guard=guard,
            max_message_mb=section.max_message_mb,
        )
        for name, entry in section.servers.items()
    ]


@dataclass(frozen=True, slots=True)
class Catalog:
    """What one server exports (its tools already filtered by the spec's globs)."""

    tools: tuple[types.Tool, ...] = ()
    prompts: tuple[types.Prompt, ...] = ()
    resources: tuple[types.Resource, ...] = ()
    resource_templates: tuple[types.ResourceTemplate, ...] = ()


# Results are checked against each version's schema when omega sends them upstream: a tool that
# fails any of them would fail the whole tools/list of a client speaking that version.
_SURFACES: tuple[tuple[str, dict[str, Any]], ...] = (
    *((v, {}) for v in HANDSHAKE_PROTOCOL_VERSIONS),
    *((v, {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}) for v in MODERN_PROTOCOL_VERSIONS),
)


def _skip(server_name: str, message: str, warned: set[str]) -> None:
    # Warned once per server and problem: a re-list after every list_changed must not flood the log.
    logger.log(logging.DEBUG if message in warned else logging.WARNING, "server %s: %s", server_name, message)
    warned.add(message)


def _problem(item: object) -> str | None:
    """Why a raw tool cannot be re-exported (it must fit every protocol version omega may serve), or None."""
    for version, stub in _SURFACES:
        try:
            validate_server_result("tools/list", version, {**stub, "tools": [item]})
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"][2:]) or "the tool"  # past `tools.0.`
            return f"`{where}`: {problem['msg']}"
        except (KeyError, ValueError):
            continue  # a protocol version this SDK has no tools/list surface for
    return None


def _parse(item: object) -> types.Tool | str:
    """A raw tool as a model, or why it cannot be re-exported."""
    problem = _problem(item)
    if problem is not None:
        return problem
    try:
        return types.Tool.model_validate(item, by_name=False)
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"])


def usable_tools(server_name: str, raw: list[object], seen: set[str], warned: set[str]) -> list[types.Tool]:
    """The tools of one raw `tools/list` page that a client can use; `seen` collects the names so far.

    `warned` holds the problems already logged for this server (the supervisor keeps it across
    restarts): each is a warning once, and debug after that.
    """
    tools: list[types.Tool] = []
    for item in raw:
        tool = _parse(item)
        name = as_object(item).get("name")
        label = repr(name) if isinstance(name, str) else "without a name"
        if isinstance(tool, str):
            _skip(server_name, f"skipping tool {label}: {tool}", warned)
        elif not tool.name:
            _skip(server_name, "skipping a tool with an empty name", warned)
        elif tool.name in seen:
            _skip(server_name, f"lists tool {label} twice; only the first is exported", warned)
        else:
            seen.add(tool.name)
            tools.append(tool)
    return tools
