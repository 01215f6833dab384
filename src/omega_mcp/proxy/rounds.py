"""A 2026-era downstream's input-required rounds, answered for a client that has no such rounds.

A 2026-07-28 server that needs input answers a call (or `prompts/get`, `resources/read`) with an
`InputRequiredResult`: `inputRequests` keyed by the server, and an opaque `requestState`. A
2026-era client gets that result as it is and retries itself. A handshake-era client (and the
agent or `omega-mcp call`, which have no client at all) cannot: for them omega answers each input
request exactly as it answers a handshake-era server's own request (`ServerRequests`: the
client's sampling, elicitation or roots, or omega's provider and roots), then retries with the
answers under the server's own keys and its `requestState` unchanged, for at most `MAX_ROUNDS`.
A request nobody can answer ends the call with that error, as it does for an SDK client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from mcp import types
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.exceptions import MCPError

from omega_mcp.narrow import object_or_none
from omega_mcp.proxy.client_requests import ServerRequests

__all__ = ["MAX_ROUNDS", "answer_rounds"]

MAX_ROUNDS = 10
"""As the SDK client: a server still asking after this many rounds fails the call."""

Retry = Callable[[dict[str, Any], str | None], Awaitable[dict[str, Any]]]
"""`retry(input_responses, request_state)`: the same request again, with the answers (raw JSON)."""


async def _answer(
    requests: ServerRequests, session: ClientSession, key: str, request: types.InputRequest
) -> types.InputResponse | types.ErrorData:
    meta = request.params.meta if request.params is not None else None
    ctx = ClientRequestContext(session=session, request_id=key, meta=meta)
    match request:
        case types.CreateMessageRequest(params=params):
            return await requests.sampling(ctx, params)
        case types.ElicitRequest(params=params):
            return await requests.elicitation(ctx, params)
        case types.ListRootsRequest():
            return await requests.list_roots(ctx)


class _Round:
    """The answers of one round, as they come in."""

    def __init__(self, requests: ServerRequests | None, session: ClientSession) -> None:
        self.requests = requests
        self.session = session
        self.answers: dict[str, Any] = {}
        self.refused: list[types.ErrorData] = []

    async def answer(self, key: str, request: types.InputRequest) -> None:
        if self.requests is None:
            message = f"omega cannot answer {request.method}"
            self.refused.append(types.ErrorData(code=types.INVALID_REQUEST, message=message))
            return
        answer = await _answer(self.requests, self.session, key, request)
        if isinstance(answer, types.ErrorData):
            self.refused.append(answer)
        else:
            self.answers[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)


async def answer_rounds(
    first: dict[str, Any], retry: Retry, requests: ServerRequests | None, session: ClientSession
) -> dict[str, Any]:
    """`first`, or after answering its input requests, the final result of the retried request.

    Raises:
        MCPError: an input request could not be answered (its error), a round failed, or the
            server was still asking after `MAX_ROUNDS`.
    """
    result = first
    for _ in range(MAX_ROUNDS):
        if result.get("resultType") != "input_required":
            return result
        asked = types.InputRequiredResult.model_validate(result, by_name=False)
        this = _Round(requests, session)
        async with anyio.create_task_group() as asking:
            for key, request in (asked.input_requests or {}).items():
                asking.start_soon(this.answer, key, request)
        if this.refused:
            raise MCPError.from_error_data(this.refused[0])
        answers = this.answers
        result = await retry(answers, asked.request_state)
    raise MCPError(types.INTERNAL_ERROR, f"the server was still asking for input after {MAX_ROUNDS} rounds")


def without_modern_fields(result: Mapping[str, Any]) -> dict[str, Any]:
    """A 2026-era result as a handshake-era client expects it: no `resultType`, cache hints or envelope stamp."""
    plain = {k: v for k, v in result.items() if k not in ("resultType", "ttlMs", "cacheScope")}
    meta = object_or_none(plain.get("_meta"))
    if meta is not None:
        kept = {k: v for k, v in meta.items() if not k.startswith("io.modelcontextprotocol/")}
        if kept:
            plain["_meta"] = kept
        else:
            del plain["_meta"]
    return plain
