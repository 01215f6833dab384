"""What a downstream server is: where to reach it and the rules for its tools and requests.

`DownstreamSpec.from_config` turns a validated `[servers.NAME]` entry into one: a stdio command
(`StdioServerParameters`, env merged over the SDK's safe defaults when started) or a URL; tests
pass an in-process `Server` or a transport factory instead. `tools` are allow globs and
`exclude_tools` deny globs over the server's own tool names (`fnmatch`, case-sensitive).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.server.lowlevel import Server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from omega_mcp.config import ServerConfig

__all__ = ["Catalog", "DownstreamSpec", "Streams", "Target"]

Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]
Target = Server[Any] | StdioServerParameters | str | Callable[[], AbstractAsyncContextManager[Streams]]
"""What a downstream is: an in-process `Server` (tests), a stdio command, a URL, or a transport factory."""


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

    @classmethod
    def from_config(cls, server_name: str, config: ServerConfig) -> DownstreamSpec:
        """The spec of a `[servers.NAME]` entry (already validated and `${VAR}`-expanded)."""
        target: Target
        if config.command is not None:
            target = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
        else:
            assert config.url is not None  # config validation guarantees exactly one transport
            target = config.url
        return cls(
            server_name=server_name,
            target=target,
            headers=dict(config.headers),
            timeout_seconds=config.timeout,
            connect_timeout_seconds=config.connect_timeout,
            tools=config.tools,
            exclude_tools=config.exclude_tools,
            enabled=config.enabled,
        )

    def exports(self, tool_name: str) -> bool:
        """Whether the `tools` allow globs and `exclude_tools` deny globs let this tool through."""
        if self.tools is not None and not any(fnmatch.fnmatchcase(tool_name, g) for g in self.tools):
            return False
        return not any(fnmatch.fnmatchcase(tool_name, g) for g in self.exclude_tools)


@dataclass(frozen=True, slots=True)
class Catalog:
    """What one server exports (its tools already filtered by the spec's globs)."""

    tools: tuple[types.Tool, ...] = ()
    prompts: tuple[types.Prompt, ...] = ()
    resources: tuple[types.Resource, ...] = ()
    resource_templates: tuple[types.ResourceTemplate, ...] = ()
