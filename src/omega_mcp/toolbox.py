"""The Toolbox: one routing table for built-in and downstream tools, shared by every front-end.

`list_tools()` returns built-ins first, then each downstream server's tools in config order
under their `mcp__<server>__<tool>` names (waiting, as the downstreams allow, for servers still
starting; a call waits only for the server its name belongs to);
`call_tool_wire()`, the one call path, resolves a name (or alias) through the namespace's reverse
map, validates the arguments (a validator compiled once per tool), runs the tool and returns wire
JSON (a downstream's result untouched); `call_tool()` wraps it for callers that want a model.
Every tool failure comes back as an isError result; only an unknown name raises
(`UnknownToolError`), which the MCP server turns into a JSON-RPC error and the agent loop into an
error result. A new built-in tool goes in `builtin/` with its schema, and gets a case here.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, Self

import anyio
import mcp_types as types
from anyio import AsyncContextManagerMixin
from pydantic import BaseModel, ValidationError

from omega_mcp.arguments import ArgumentCheck
from omega_mcp.builtin import bash as _bash
from omega_mcp.builtin import read as _read
from omega_mcp.builtin import shells as _shells
from omega_mcp.builtin import write as _write
from omega_mcp.builtin.schemas import (
    BUILTIN_TOOLS,
    BashArgs,
    BashOutputArgs,
    EditArgs,
    KillShellArgs,
    ReadArgs,
    WriteArgs,
)
from omega_mcp.builtin.workplace import Workplace, Workplaces
from omega_mcp.calling import PROCESS, CallContext, Profile
from omega_mcp.errors import (
    DownstreamError,
    DownstreamRefusedError,
    InvalidArgumentsError,
    ToolError,
    UnknownToolError,
)
from omega_mcp.names import FULL, Namespace, Naming, Route
from omega_mcp.results import Wire, error_wire, from_wire, to_wire
from omega_mcp.sandbox import zygote_client
from omega_mcp.sandbox.approvals import Grants
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.world import Worlds

__all__ = ["DownstreamTools", "Toolbox"]

logger = logging.getLogger(__name__)


class DownstreamTools(Protocol):
    """What the Toolbox needs from the downstream servers (`proxy.supervisor.Downstreams` provides it)."""

    @property
    def version(self) -> int:
        """Changes whenever the set of exported tools changes."""
        ...

    def tools(self) -> Sequence[tuple[str, types.Tool]]:
        """Every exported downstream tool as `(server_name, tool)`, config order then server order."""
        ...

    def get_tool(self, server_name: str, tool_name: str) -> types.Tool | None:
        """One exported tool by its route, or None."""
        ...

    def unavailable(self, name: str, permits: Callable[[Route], bool] | None = None) -> str | None:
        """Why a name of a server that is down (or disabled) cannot be called, or None; with `permits`, None
        too for a name whose route it does not permit (to a caller that may not use it, no such server is down)."""
        ...

    @property
    def ready(self) -> bool:
        """Whether the first connection round has settled."""
        ...

    async def wait_ready(self) -> None:
        """Wait (bounded) until the first connection round has settled."""
        ...

    def starting(self, name: str) -> list[str]:
        """The servers still in their first connection attempt that a tool `name` may belong to."""
        ...

    async def wait_settled(self, server_names: Sequence[str]) -> None:
        """Wait (bounded by their connect timeouts) until these servers connected or failed once."""
        ...

    def unsettled(self) -> list[str]:
        """The enabled servers still in their first connection attempt."""
        ...

    async def call_tool(
        self,
        server_name: str,
        tool_name: str,
        arguments: dict[str, Any],
        context: CallContext,
    ) -> Wire:
        """Forward one call; the downstream's result as wire JSON, untouched (failures are isError).

        From `context`: the progress, `_meta` and other call fields passed on, the client its server's
        requests go to, the session whose own connection it uses."""
        ...


_STATELESS_READS = object()
"""The owner of every session-less (2026-era HTTP) `read`: one world per workplace, only ever read in."""


def _made(policy: SandboxPolicy) -> bool:
    return policy.private_tmp is not None and os.path.lexists(policy.private_tmp)  # one lstat, no thread


def _field_path(path: Sequence[Any]) -> str:
    return ".".join(str(p) for p in path) or "(arguments)"


def _pydantic_message(tool: str, error: ValidationError) -> str:
    problems: list[str] = []
    for item in error.errors():
        field = _field_path(item["loc"])
        if item["type"] == "extra_forbidden":
            problems.append(f"`{field}`: unknown field")
        elif item["type"].endswith("_type"):  # strict: say what came, e.g. a number sent as a string
            problems.append(f"`{field}`: {item['msg']}, got {json.dumps(item.get('input'), default=str)[:100]}")
        else:
            problems.append(f"`{field}`: {item['msg']}")
    return f"Invalid arguments for {tool}: " + "; ".join(problems)


@dataclass(frozen=True, slots=True)
class _Builtin:
    tool: types.Tool
    model: type[BaseModel]


class Toolbox(AsyncContextManagerMixin):
    """Built-in tools under a sandbox policy, plus (optionally) the downstream servers' tools.

    Use as an async context manager: it owns the background shells and kills them on exit, each
    session's private /tmp (`sandbox/world.py`: removed when the session ends) and the protected
    names of the write roots (`sandbox/tracker.py`: bound read-only for bash, creations undone).
    The downstream servers' lifetime is the caller's (enter the `proxy.supervisor.Downstreams` first).
    """

    def __init__(
        self, policy: SandboxPolicy, downstreams: DownstreamTools | None = None, *, naming: Naming = FULL
    ) -> None:
        """`naming` shapes the exported downstream names for the client (`[hub]`); the agent keeps FULL."""
        self.policy = policy
        self.naming = naming
        self.downstreams = downstreams
        self._builtins: dict[str, _Builtin] = {t.name: _Builtin(t, m) for t, m in BUILTIN_TOOLS}
        self._shells = _shells.ShellRegistry()
        self._workplaces = Workplaces(policy)
        self._namespace_version: int | None = None
        self._namespace = Namespace(self._builtins, ())
        self._validators: dict[tuple[str, str], tuple[int, ArgumentCheck | None]] = {}
        self.grants = Grants()
        """One-time write approvals (`on_denied = "ask"`), shared by every front-end of this Toolbox."""

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        self._workplaces.own.prime()  # the first look walks the write roots: not in the first bash call
        zygote_client.prestart()  # the bash launcher, likewise
        try:
            async with self._shells:
                yield self
        finally:
            await self._workplaces.close()

    async def end_session(self, owner: object) -> None:
        """Kill the background shells `owner` started (whole process trees, bounded) and remove its
        private /tmp: its session ended."""
        await self._shells.close_owner(owner)
        await self._workplaces.end_session(owner)

    # -- namespace ---------------------------------------------------------------------------

    def _downstream_tools(self) -> Sequence[tuple[str, types.Tool]]:
        return self.downstreams.tools() if self.downstreams is not None else ()

    def namespace(self) -> Namespace:
        """The current namespace (rebuilt only when the downstream tool set changed)."""
        if self.downstreams is None:
            return self._namespace
        version = self.downstreams.version
        if version != self._namespace_version:
            routes = [(server_name, tool.name) for server_name, tool in self.downstreams.tools()]
            self._namespace = Namespace(self._builtins, routes, self.naming)
            self._namespace_version = version
        return self._namespace

    async def list_tools(self) -> list[types.Tool]:
        """Every tool, built-ins first, downstream tools under their exported names, in stable order.

        While the downstream servers are still starting, this waits for them as the downstreams allow
        (`Downstreams(startup_wait_seconds=...)`: `serve` answers at once with the servers that are
        ready; the others are announced with list_changed as they connect).
        """
        if self.downstreams is not None and not self.downstreams.ready:
            await self.downstreams.wait_ready()
        namespace = self.namespace()
        tools = [b.tool for b in self._builtins.values()]
        for server_name, tool in self._downstream_tools():
            exported = namespace.name_of(Route(server_name, tool.name))
            tools.append(tool if exported == tool.name else tool.model_copy(update={"name": exported}))
        return tools

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        """The `inputSchema` of the tool a name leads to (the SDK's 2026-era Mcp-Param-* check): a dict lookup."""
        route = self.namespace().resolve(name)
        if route is None:
            return None
        if route.server_name is None:
            builtin = self._builtins.get(route.tool_name)
            return builtin.tool.input_schema if builtin is not None else None
        tool = self.downstreams.get_tool(route.server_name, route.tool_name) if self.downstreams is not None else None
        return tool.input_schema if tool is not None else None

    def resolve(self, name: str, profile: Profile | None = None) -> Route:
        """The route of a tool name or alias, as `profile` (a hub client's) may know it: a tool it may not
        call is unknown to it, and so is one of a server that is down when it may not call that name (a
        down-reason would tell it the server exists); its hints name only tools it may call.

        Raises:
            UnknownToolError: no such tool (for `profile`); carries the closest names.
            DownstreamError: the name belongs to a downstream server that is down or disabled.
        """
        namespace = self.namespace()
        route = namespace.resolve(name)
        if route is None:
            downstreams = self.downstreams
            permits = profile.permits if profile is not None else None
            reason = downstreams.unavailable(name, permits) if downstreams is not None else None
            if reason is not None:
                raise DownstreamError(reason)
            if profile is not None:
                raise self._unknown_to(profile, name)
            raise UnknownToolError(name, namespace.suggest(name))
        if profile is not None and not profile.permits(route):
            raise self._unknown_to(profile, name)
        return route

    async def _resolve(self, name: str, profile: Profile | None = None) -> Route:
        downstreams = self.downstreams
        if downstreams is not None and self.namespace().resolve(name) is None:
            # The name may belong to a server still in its first attempt: wait for that one only.
            starting = downstreams.starting(name)
            if starting:
                await downstreams.wait_settled(starting)
        return self.resolve(name, profile)

    # -- calls -------------------------------------------------------------------------------

    async def call_tool_wire(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        context: CallContext = PROCESS,
    ) -> Wire:
        """Run one tool call; the result as wire JSON (a downstream's, untouched). The one call path.

        Every failure but an unknown name is an isError result. `context` (`calling.py`) says who calls
        and how, and is passed on unchanged: its `profile` (a hub client's) limits the tools (another is
        unknown to it) and runs built-ins in its sandbox; its `owner` sees only its own background
        shells; its `approve` asks the user about a write outside the roots; a downstream gets its
        `meta`, `extra` (its answer may then be an input-required round) and `progress`.
        This is the proxy's hot path: the route comes from a dict, the arguments are checked by a
        validator compiled once per tool, and the downstream's result is not parsed into models.

        Raises:
            UnknownToolError: no tool has this name (or alias).
            DownstreamRefusedError: the downstream answered with a JSON-RPC error.
        """
        args = dict(arguments or {})
        profile = context.profile
        try:
            route = await self._resolve(name, profile)  # what it may not call is unknown to it
            if route.server_name is None:
                workplace = self._workplaces.of(profile.policy if profile is not None else None)
                return to_wire(await self._call_builtin(route.tool_name, args, context, workplace))
            self.check_arguments(route, args)
            assert self.downstreams is not None
            return await self.downstreams.call_tool(route.server_name, route.tool_name, args, context)
        except (UnknownToolError, DownstreamRefusedError):
            raise
        except ToolError as exc:
            return error_wire(str(exc))
        except Exception as exc:  # boundary: a bug must not take the server down; the model gets a message
            logger.exception("tool %s failed unexpectedly", name)
            return error_wire(f"internal error in {name}: {type(exc).__name__}: {exc}")

    def _unknown_to(self, profile: Profile, name: str) -> UnknownToolError:
        """The error of a tool `profile` may not call: the one of an unknown name, suggesting only its tools."""
        namespace = self.namespace()
        suggestions = [
            n
            for n in namespace.suggest(name, limit=10)
            if (r := namespace.resolve(n)) is not None and profile.permits(r)
        ]
        return UnknownToolError(name, suggestions[:3])

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        context: CallContext = PROCESS,
    ) -> types.CallToolResult:
        """`call_tool_wire` with the result as an SDK model (for the agent loop and the CLI).

        Raises:
            UnknownToolError: no tool has this name (or alias).
        """
        raw = await self.call_tool_wire(name, arguments, context)
        return from_wire(raw, invalid=f"tool {name} returned an invalid result")

    async def _call_builtin(
        self,
        tool_name: str,
        raw: dict[str, Any],
        context: CallContext = PROCESS,
        workplace: Workplace | None = None,
    ) -> types.CallToolResult:
        builtin = self._builtins[tool_name]
        try:
            args = builtin.model.model_validate(raw)
        except ValidationError as exc:
            raise InvalidArgumentsError(_pydantic_message(tool_name, exc)) from None
        workplace = workplace or self._workplaces.own
        worlds, owner = workplace.worlds, context.owner
        if owner is _shells.NO_SESSION and worlds.private and isinstance(args, ReadArgs):
            # A read writes nothing, so every session-less read can share one world whose /tmp nobody
            # writes (it looks as empty as a fresh one): its file worker starts once, not once per call.
            owner = _STATELESS_READS
        elif owner is _shells.NO_SESSION and worlds.private:
            # No session to end: this call's /tmp lasts as long as the call.
            policy = await anyio.to_thread.run_sync(worlds.fresh)
            try:
                return await self._run_builtin(args, policy, context, workplace)
            finally:
                if _made(policy):  # a `read` never makes it
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(Worlds.discard, policy)
        policy = worlds.known(owner) or await anyio.to_thread.run_sync(worlds.policy_for, owner)
        return await self._run_builtin(args, policy, context, workplace)

    async def _run_builtin(
        self,
        args: BaseModel,
        policy: SandboxPolicy,
        context: CallContext,
        workplace: Workplace,
    ) -> types.CallToolResult:
        tree, owner, approve = workplace.tree, context.owner, context.approve
        match args:
            case BashArgs():
                return await _bash.run_bash(policy, args, self._shells, owner=owner, tree=tree)
            case ReadArgs():
                return await _read.read_file(policy, args, tree=tree)
            case WriteArgs():
                return await _write.write_file(policy, args, approve=approve, grants=self.grants, tree=tree)
            case EditArgs():
                return await _write.edit_file(policy, args, approve=approve, grants=self.grants, tree=tree)
            case BashOutputArgs():
                return await self._shells.output(args.shell_id, owner=owner, tree=tree)
            case KillShellArgs():
                return await self._shells.kill(args.shell_id, owner=owner)
            case _:
                raise ToolError(f"built-in tool {type(args).__name__} has no handler")

    def _validator(self, route: Route, schema: dict[str, Any]) -> ArgumentCheck | None:
        key = (route.server_name or "", route.tool_name)
        cached = self._validators.get(key)
        if cached is not None and cached[0] == id(schema):
            return cached[1]
        validator = ArgumentCheck.compile(schema)
        if validator is None:
            # A downstream with a broken schema still gets its calls: the server validates for itself.
            logger.warning(
                "tool %s of %s has an invalid inputSchema; not validating", route.tool_name, route.server_name
            )
        self._validators[key] = (id(schema), validator)
        return validator

    def check_arguments(self, route: Route, args: dict[str, Any]) -> None:
        """Validate a downstream call's arguments against the tool's `inputSchema`.

        An optional argument given as `null` counts as absent (models send them so, and a direct
        client would pass them on for the server to judge); the call is forwarded as it is.

        Raises:
            InvalidArgumentsError: a field is wrong; the message names it.
        """
        assert self.downstreams is not None and route.server_name is not None
        tool = self.downstreams.get_tool(route.server_name, route.tool_name)
        if tool is None:
            return
        validator = self._validator(route, tool.input_schema)
        if validator is None:
            return
        if None in args.values():
            required = tool.input_schema.get("required") or ()
            args = {k: v for k, v in args.items() if v is not None or k in required}
        try:
            error = validator.first_error(args)
        except Exception as exc:  # a `$ref` to a URL, a pattern that is no regex: the server validates for itself
            logger.warning(
                "cannot check arguments of tool %s of %s against its inputSchema (%s); forwarding unchecked",
                route.tool_name,
                route.server_name,
                exc,
            )
            return
        if error is not None:
            exported = self.namespace().name_of(route)
            raise InvalidArgumentsError(
                f"Invalid arguments for {exported}: `{_field_path(error.absolute_path)}`: {error.message}"
            )
