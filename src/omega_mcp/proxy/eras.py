"""Which protocol era a downstream speaks, found out the way the SDK client does, and its handshake channel.

A connection opens with both questions at once: `server/discover` (the 2026-07-28 probe) and
`initialize` (the handshake). A 2026-era server answers the probe (and refuses the handshake that
follows it); a handshake-era server refuses or ignores the probe and answers the handshake. The
first usable answer decides (a valid `DiscoverResult` naming a 2026 version, or an `InitializeResult`:
a lenient handshake server that answers the probe with `{}` is waited on for its handshake), so
neither kind of server waits for a timeout, and a stdio
server started early (`spawn.py`) had both lines written before the SDK was even imported. Over
streamable HTTP the two are asked in turn (the SDK's own `negotiate_auto`): a handshake creates a
session there. `era = "handshake"` in servers.toml asks only the handshake. The handshake-era
side of a connection is a `HandshakeChannel`; the 2026 side a `modern.ModernChannel`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions, Dispatcher, ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from omega_mcp._sdk import client_capabilities, client_info, negotiate_auto

__all__ = ["Era", "EraChoice", "HandshakeChannel", "modern_envelope", "negotiate", "settle_early", "usable_answer"]

Era = Literal["handshake", "modern"]
EraChoice = Literal["auto", "handshake", "modern"]
"""`[servers.NAME] era`: find out (`auto`), or speak only this era."""


class HandshakeChannel:
    """Requests to a downstream over its initialized handshake-era session (raw JSON in and out)."""

    def __init__(self, session: ClientSession, dispatcher: Dispatcher[Any], result: types.InitializeResult) -> None:
        self.session = session
        self.result = result
        self.capabilities = result.capabilities
        self.server_info: types.Implementation | None = result.server_info
        self._dispatcher = dispatcher
        # What the SDK's handshake-era stamp sets; only the HTTP transport reads it.
        self._headers = {MCP_PROTOCOL_VERSION_HEADER: result.protocol_version}

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout_seconds: float,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send one request and return the raw result dict.

        Raises:
            MCPError: the server's error, a timeout (REQUEST_TIMEOUT) or a closed connection.
        """
        opts: CallOptions = {"timeout": timeout_seconds, "headers": dict(self._headers)}
        if progress is not None:
            opts["on_progress"] = progress
        return await self._dispatcher.send_raw_request(method, params, opts)


def modern_envelope(session: ClientSession, version: str) -> dict[str, Any]:
    """omega's own 2026-era `_meta` envelope at `version`: its client info and the capabilities it declares."""
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": client_info(session).model_dump(
            by_alias=True, mode="json", exclude_none=True
        ),
        "io.modelcontextprotocol/clientCapabilities": client_capabilities(session, version).model_dump(
            by_alias=True, mode="json", exclude_none=True
        ),
    }


def _modern(raw: Mapping[str, Any]) -> types.DiscoverResult | None:
    try:
        result = types.DiscoverResult.model_validate(raw, by_name=False)
    except ValidationError:
        return None
    return result if any(v in result.supported_versions for v in MODERN_PROTOCOL_VERSIONS) else None


def _handshake(raw: Mapping[str, Any]) -> types.InitializeResult | None:
    try:
        return types.InitializeResult.model_validate(raw, by_name=False)
    except ValidationError:
        return None


def usable_answer(key: str, answer: Mapping[str, Any] | MCPError) -> bool:
    """Whether `answer` to the probe ("discover") or the handshake ("initialize") settles the era: a
    success that is not that method's result (a lenient server's `{}`) settles nothing."""
    if isinstance(answer, MCPError):
        return False
    return (_modern(answer) if key == "discover" else _handshake(answer)) is not None


def _initialize_params(session: ClientSession) -> dict[str, Any]:
    request = types.InitializeRequestParams(
        protocol_version=HANDSHAKE_PROTOCOL_VERSIONS[-1],
        capabilities=client_capabilities(session, HANDSHAKE_PROTOCOL_VERSIONS[-1]),
        client_info=client_info(session),
    )
    return request.model_dump(by_alias=True, mode="json", exclude_none=True)


async def _finish_handshake(session: ClientSession, raw: Mapping[str, Any]) -> Era:
    result = types.InitializeResult.model_validate(raw, by_name=False)
    if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        raise MCPError(types.INVALID_REQUEST, f"unsupported protocol version {result.protocol_version}")
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())
    return "handshake"


async def settle_early(session: ClientSession, answers: Mapping[str, Mapping[str, Any] | MCPError]) -> Era:
    """Adopt what a server answered to the probe and handshake written before the SDK was loaded.

    `answers` maps "discover" and/or "initialize" to the raw result or the error; the probe's
    success wins (an SDK server that answered it refuses the handshake after it).

    Raises:
        MCPError: neither was answered successfully (the handshake's error when it was asked).
    """
    discovered = answers.get("discover")
    if isinstance(discovered, Mapping) and (result := _modern(discovered)) is not None:
        session.adopt(result)
        return "modern"
    initialized = answers.get("initialize")
    if isinstance(initialized, Mapping):
        return await _finish_handshake(session, initialized)
    failure = initialized if isinstance(initialized, MCPError) else discovered
    raise (
        failure if isinstance(failure, MCPError) else MCPError(types.INVALID_REQUEST, "no usable answer to initialize")
    )


async def negotiate(session: ClientSession, dispatcher: Dispatcher[Any], choice: EraChoice, *, http: bool) -> Era:
    """Find out (or insist on) the server's era and adopt it on `session`.

    Raises:
        MCPError: the server speaks no era omega may use (or refused the handshake).
    """
    if choice == "handshake":
        await session.initialize()
        return "handshake"
    if http:  # asked in turn: a handshake creates a session, which must not be left behind unused
        if choice == "modern":
            await session.discover()
            return "modern"
        await negotiate_auto(session)
        return "modern" if session.discover_result is not None else "handshake"
    answers: dict[str, Mapping[str, Any] | MCPError] = {}
    decided = anyio.Event()

    async def ask(key: str, method: str, params: dict[str, Any]) -> None:
        opts: CallOptions = {"cancel_on_abandon": False}
        try:
            answers[key] = await dispatcher.send_raw_request(method, params, opts)
        except MCPError as exc:
            answers[key] = exc
        if usable_answer(key, answers[key]) or len(answers) == (1 if choice == "modern" else 2):
            decided.set()

    probe = {"_meta": modern_envelope(session, LATEST_MODERN_VERSION)}
    async with anyio.create_task_group() as asking:
        asking.start_soon(ask, "discover", "server/discover", probe)
        if choice == "auto":
            asking.start_soon(ask, "initialize", "initialize", _initialize_params(session))
        await decided.wait()
        asking.cancel_scope.cancel()
    if choice == "modern" and not isinstance(answers.get("discover"), Mapping):
        failure = answers.get("discover")
        raise (
            failure
            if isinstance(failure, MCPError)
            else MCPError(types.INVALID_REQUEST, "no answer to server/discover")
        )
    return await settle_early(session, answers)
