"""The one rule from what a downstream did with a `tools/call` to what the client gets: `outcome`.

Pure: a JSON-RPC answer (a dict, as the wire carries it) or what happened instead (`TimedOut`, `WentAway`,
`Oversized`, `Broke`) goes in, a decision comes out (`Outcome`): the client's result (the server's own with
its `ui://` URIs in their per-server form, apps.py; or an isError result a model can act on), or the
server's JSON-RPC error passed on as it is (code, message, data), and whether the connection is no longer to
be trusted. The SDK path (`proxy/calls.py`) and both relays (`fastpath/relay.py`, stdio and HTTP) call it,
so the relays answer as the SDK path does by construction; what each then does (raise, write a line, mark
the session lost) stays with it. The isError sentences of every failure are here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omega_mcp.narrow import object_or_none
from omega_mcp.proxy.apps import result_for_client
from omega_mcp.results import Wire, checked_wire, error_wire, invalid_result
from omega_mcp.wire.oversize import is_too_large, limit_text

__all__ = [
    "Answer",
    "Broke",
    "Called",
    "Outcome",
    "Oversized",
    "TimedOut",
    "WentAway",
    "outcome",
    "refused",
    "timed_out",
    "too_long",
    "went_away",
]

CLOSED = "the server closed the connection"
"""Why a connection is lost when the server went away and omega did not end it itself."""


@dataclass(frozen=True, slots=True)
class Called:
    """The call whose outcome is decided: which tool of which server, and how it was spoken to."""

    server_name: str
    tool_name: str
    max_message_bytes: int
    remote: bool = False
    """An HTTP server (omega reconnects to it) rather than a process (omega restarts it)."""
    rounds: bool = True
    """An input-required round goes back as it is (a 2026-era client's call to a 2026-era server; the SDK
    path hands one on whenever it sees one)."""


@dataclass(frozen=True, slots=True)
class TimedOut:
    """The call ran past the server's `timeout` (and was cancelled downstream)."""

    timeout: float


@dataclass(frozen=True, slots=True)
class WentAway:
    """The connection closed under the call; `why` when omega ended it itself (`stopped_because()`)."""

    why: str | None = None


@dataclass(frozen=True, slots=True)
class Oversized:
    """The answer was longer than `[hub] max_message_mb` and was dropped as it was read."""


@dataclass(frozen=True, slots=True)
class Broke:
    """The transport failed during the call (`failure`: the exception's type and text)."""

    failure: str


Answer = dict[str, Any] | TimedOut | WentAway | Oversized | Broke
"""What came back: a JSON-RPC answer (`result` or `error`), or what happened instead of one."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the client gets: `result` (the server's, or an isError one), or `error` (the server's JSON-RPC
    error as it is; `refusal` is its sentence for a caller that is no MCP client). `lose`: the connection
    is no longer to be trusted, for that reason (the caller marks its session lost)."""

    result: Wire | None = None
    error: dict[str, Any] | None = None
    refusal: str = ""
    lose: str | None = None


def timed_out(server_name: str, tool_name: str, timeout: float) -> str:
    """The isError text of a call that ran past the server's `timeout`."""
    return (
        f"{tool_name} on server {server_name} timed out after {timeout:g} s and was cancelled "
        f"(raise `timeout` in [servers.{server_name}] if it needs longer)"
    )


def went_away(server_name: str, tool_name: str, *, remote: bool = False, why: str | None = None) -> str:
    """The isError text of a call whose server died (or, `remote`, whose connection broke) under it.

    `why` is `DownstreamSession.stopped_because()`: omega ended the connection itself, for that reason.
    """
    again = "reconnect to it" if remote else "restart it"
    if why is not None:
        return f"server {server_name} was stopped during the call to {tool_name}: {why}; omega will {again}"
    return f"server {server_name} went away during the call to {tool_name}; omega will {again}"


def too_long(server_name: str, tool_name: str, limit: int) -> str:
    """The isError text of a call whose result was longer than `[hub] max_message_mb` (the server is fine)."""
    return (
        f"the result of {tool_name} from server {server_name} is longer than {limit_text(limit)} and was dropped "
        "(raise max_message_mb in [hub] for larger results)"
    )


def refused(server_name: str, tool_name: str, message: str, code: int) -> str:
    """The isError text of a call the server answered with a JSON-RPC error."""
    return f"server {server_name} refused the call to {tool_name}: {message} (error {code})"


def outcome(call: Called, answer: Answer) -> Outcome:
    """What the client gets for `answer` to `call` (see the module docstring)."""
    server, tool = call.server_name, call.tool_name
    if isinstance(answer, dict):
        return _answered(call, answer)
    if isinstance(answer, TimedOut):
        return Outcome(error_wire(timed_out(server, tool, answer.timeout)))
    if isinstance(answer, WentAway):
        text = went_away(server, tool, remote=call.remote, why=answer.why)
        return Outcome(error_wire(text), lose=answer.why or CLOSED)
    if isinstance(answer, Oversized):
        return Outcome(error_wire(too_long(server, tool, call.max_message_bytes)))
    text = f"server {server} failed during the call to {tool}: {answer.failure}"
    return Outcome(error_wire(text), lose=answer.failure)


def _answered(call: Called, message: dict[str, Any]) -> Outcome:
    server, tool = call.server_name, call.tool_name
    error = object_or_none(message.get("error"))
    if error is not None:
        if is_too_large(error.get("data")):  # omega's stand-in for a dropped answer: that call fails, not the server
            return Outcome(error_wire(too_long(server, tool, call.max_message_bytes)))
        code, text = error.get("code"), str(error.get("message"))
        if isinstance(code, int):  # the server's own error, as it is: e.g. -32042 drives a flow
            return Outcome(error=error, refusal=refused(server, tool, text, code))
        return Outcome(error_wire(refused(server, tool, text, 0)))
    result = object_or_none(message.get("result"))
    if "error" in message or result is None:
        return Outcome(error_wire(f"{invalid_result(server, tool)}: no `result` object"))
    if call.rounds and result.get("resultType") == "input_required":
        return Outcome(result)  # the client's own round to answer
    if not isinstance(result.get("content"), list):  # anything else is checked against the SDK's model
        return Outcome(result_for_client(server, checked_wire(result, invalid=invalid_result(server, tool))))
    # Handed on as it came (the hot path parses nothing it does not have to), `ui://` URIs per server (apps.py).
    return Outcome(result_for_client(server, result))
