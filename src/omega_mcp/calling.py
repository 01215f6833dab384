"""The call's context: who calls a tool and how, in one frozen value passed down unchanged.

Each front end builds one `CallContext` per call (the MCP server per request, from the SDK's request
context; the agent with its approver; the CLI's one-shot calls take `PROCESS`, the process itself)
and hands it to `Toolbox.call_tool_wire`, which passes it on as it is: to the built-ins (whose
background shells and private /tmp `owner` has, writes `approve` asks about) and to `proxy/` (the
downstream call's `progress`, `meta`, `extra`, the `caller` its server's requests go to, and the
`share = "session"` connection `session_key` names). Nothing here does anything: it only describes.
`Profile` and `Caller` are the shapes the context needs of the server's hub clients and client
requests; they live here so that every layer can name them without importing `server/` or `proxy/`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import mcp_types as types

from omega_mcp.names import Route
from omega_mcp.sandbox.approvals import Approver
from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = ["PROCESS", "CallContext", "Caller", "InputRequest", "Profile", "ProgressFn", "SessionDirs"]


class ProgressFn(Protocol):
    """`(progress, total, message)`: the SDK's progress callback shape (its `ProgressFnT`), named here so
    that the call's context, like the rest of the Toolbox, needs only the wire types (`mcp_types`)."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


InputRequest = types.CreateMessageRequest | types.ElicitRequest | types.ListRootsRequest
"""What a downstream server may ask omega's client (sampling, elicitation, roots)."""

_R = TypeVar("_R", bound=types.Result)


class Profile(Protocol):
    """Who is calling (`server/profiles.py`: a hub client): the tools it may call, where its built-ins run."""

    @property
    def policy(self) -> SandboxPolicy | None:
        """The sandbox of its built-in calls (its own workspace and mode); None: the Toolbox's."""
        ...

    def permits(self, route: Route) -> bool:
        """Whether it may see and call the tool at `route`."""
        ...


class Caller(Protocol):
    """One request of one of omega's clients, as the channel for the requests it causes downstream."""

    @property
    def client(self) -> object:
        """Which client this is (its connection): calls of one client share it."""
        ...

    @property
    def name(self) -> str:
        """The client's name, for messages."""
        ...

    @property
    def capabilities(self) -> types.ClientCapabilities | None: ...

    async def ask(
        self, request: InputRequest, result_type: type[_R], *, timeout_seconds: float, progress: ProgressFn | None
    ) -> _R:
        """Send `request` to the client and return its answer.

        Raises:
            MCPError: the client answered with an error, did not answer within `timeout_seconds`
                (REQUEST_TIMEOUT) or cannot be asked (no back-channel).
            ValidationError: the answer is not a `result_type`.
        """
        ...

    async def notify(self, notification: types.ServerNotification) -> None:
        """Send a notification to the client (best effort)."""
        ...

    @property
    def modern(self) -> bool:
        """Whether the client speaks 2026-07-28 (no back-channel; its requests carry their envelope)."""
        ...

    @property
    def client_info(self) -> types.Implementation | None:
        """The `clientInfo` the client gave, if any (forwarded in a 2026-era request's envelope)."""
        ...

    @property
    def log_level(self) -> types.LoggingLevel | None:
        """The lowest level of a downstream's log messages this call's client wants (None: none)."""
        ...

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """Deliver a downstream's log message of this call to the client, as it is (best effort)."""
        ...


@dataclass(frozen=True, slots=True)
class SessionDirs:
    """Where the processes of a client's `share = "session"` connections get their own directories."""

    client: str
    """The client's name (`HUB_CLIENT` for the hub's own token)."""
    root: Path
    """`$OMEGA_HOME/clients/<client>/sessions`."""


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who calls and how; every field's default is the process itself calling, with nothing to pass on."""

    owner: object | None = None
    """The caller's session (the MCP server's connection, a window's profile, `NO_SESSION` for a
    2026-era HTTP request; None for the process itself): it owns its background shells and /tmp."""
    profile: Profile | None = None
    """A hub client's view (its tools, its sandbox); None: every tool, the Toolbox's sandbox."""
    approve: Approver | None = None
    """Asks the caller's user to allow a write outside the roots once (`on_denied = "ask"`); None denies."""
    caller: Caller | None = None
    """The client request the downstream's own requests (sampling, elicitation, roots, logs) go to."""
    progress: ProgressFn | None = None
    """The caller's progress callback (None: it asked for none)."""
    meta: Mapping[str, Any] | None = None
    """The caller's request `_meta`, passed on to a downstream server."""
    extra: Mapping[str, Any] | None = None
    """The client's other call fields (a 2026-era retry's `inputResponses` and `requestState`)."""
    session_key: Hashable | None = None
    """Whose `share = "session"` connections the call uses (`proxy/pool.py`); None: the shared one."""
    session_dirs: SessionDirs | None = None
    """Where those connections' processes get their directories; None: below the pool's default."""


PROCESS = CallContext()
"""The process itself calling (the CLI's one-shot calls, tests): no session, no client, nothing passed on."""
