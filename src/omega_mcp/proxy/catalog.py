"""Downstream prompts and resources, re-exported: the naming and collision rules.

Prompts are exported as `<server>__<prompt>` (server keys never contain `__`, so the name is
unambiguous). Resources and resource templates keep their own URIs; when two servers list the
same URI (or the same template), the first server in config order wins and each hidden one is
logged once (`ui://` URIs never collide: each server's have a form of their own, apps.py).
`resources/read` goes to the server a `ui://` URI names, else to the server that lists the URI, else
to the first server (config order) with a template matching it. Results are parsed into SDK models here: this is
not the hot path, and the 2026-era wire needs fields (`resultType`) older servers leave out;
`prompts/get` and `resources/read` come back raw, since a 2026-era client may get an input-required
round for them (the MCP server turns them into models).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from mcp import types
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from omega_mcp.calling import Caller
from omega_mcp.names import prompt_name, server_of_prompt
from omega_mcp.proxy.apps import client_contents, owner_named, prompt_for_client, server_uri, unknown_resource
from omega_mcp.proxy.session import DownstreamSession
from omega_mcp.proxy.spec import Catalog

__all__ = ["Connected", "Exports"]

logger = logging.getLogger(__name__)

Connected = Sequence[tuple[str, Catalog, DownstreamSession]]
"""The connected servers in config order: `(server_name, catalog, session)`."""


def _matches(template: str, uri: str) -> bool:
    try:
        return UriTemplate.parse(template).match(uri) is not None
    except (InvalidUriTemplate, ValueError):
        return False


Calling = Callable[[str, Caller | None], AbstractContextManager[None]]


def _untracked(server_name: str, caller: Caller | None) -> AbstractContextManager[None]:
    return nullcontext()


class Exports:
    """The re-exported prompts and resources of a changing set of connected servers."""

    def __init__(self, connected: Callable[[], Connected], calling: Calling | None = None) -> None:
        """`calling(server_name, caller)` marks the client's request as running on that server while it
        does (`ClientRequests.calling`), so that what the server asks meanwhile finds its client."""
        self._connected = connected
        self._calling: Calling = calling if calling is not None else _untracked
        self._warned: set[tuple[str, str, str]] = set()

    def prompts(self) -> list[types.Prompt]:
        """Every downstream prompt as `<server>__<prompt>`, config order."""
        return [
            p.model_copy(update={"name": prompt_name(name, p.name)})
            for name, c, _ in self._connected()
            for p in c.prompts
        ]

    async def get_prompt(self, name: str, params: dict[str, Any], caller: Caller | None = None) -> dict[str, Any]:
        """Fetch an exported prompt from its server as `caller`'s request; `params` are the client's (its
        name is replaced). The `ui://` URIs its messages name come back in their per-server form (apps.py).

        Raises:
            MCPError: unknown prompt (or its server is down), or the server's own error.
        """
        for server_name, catalog, session in self._connected():
            own = server_of_prompt(server_name, name)
            if own is not None and any(p.name == own for p in catalog.prompts):
                sent = {**params, "name": own}
                with self._calling(server_name, caller):
                    timeout = session.spec.timeout_seconds
                    raw = await session.request("prompts/get", sent, timeout_seconds=timeout, caller=caller)
                return prompt_for_client(server_name, raw)
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name!r}")

    async def complete(self, params: types.CompleteRequestParams) -> types.CompleteResult:
        """Forward `completion/complete` for an exported prompt or a resource (template) to its server.

        A server that does not offer completions yields no suggestions rather than an error.

        Raises:
            MCPError: the prompt or resource is unknown, or the server's own error.
        """
        ref = params.ref
        owner: DownstreamSession | None = None
        wire_ref: dict[str, Any]
        if isinstance(ref, types.PromptReference):
            for server_name, catalog, session in self._connected():
                own = server_of_prompt(server_name, ref.name)
                if own is not None and any(p.name == own for p in catalog.prompts):
                    owner = session
                    break
            else:
                raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {ref.name!r}")
            wire_ref = {"type": "ref/prompt", "name": own}
        else:
            owner = next(
                (s for _, c, s in self._connected() if any(t.uri_template == ref.uri for t in c.resource_templates)),
                None,
            ) or next((s for _, c, s in self._connected() if any(r.uri == ref.uri for r in c.resources)), None)
            if owner is None:
                raise unknown_resource(ref.uri)
            wire_ref = {"type": "ref/resource", "uri": server_uri(owner.spec.server_name, ref.uri)}
        capabilities = owner.capabilities
        if capabilities.completions is None:
            return types.CompleteResult(completion=types.Completion(values=[]))
        # `_meta` carries the caller's per-hop envelope (protocol version, client info): never forwarded.
        wire = params.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"meta"})
        wire["ref"] = wire_ref
        raw = await owner.request("completion/complete", wire, timeout_seconds=owner.spec.timeout_seconds)
        return types.CompleteResult.model_validate(raw, by_name=False)

    def _first_wins(self, kind: str, items: list[tuple[str, str, Any]]) -> list[Any]:
        owners: dict[str, str] = {}
        kept: list[Any] = []
        for server_name, key, item in items:
            if key not in owners:
                owners[key] = server_name
                kept.append(item)
            elif (kind, server_name, key) not in self._warned:
                self._warned.add((kind, server_name, key))
                logger.warning(
                    "%s %s of server %s is hidden: server %s lists it first", kind, key, server_name, owners[key]
                )
        return kept

    def resources(self) -> list[types.Resource]:
        """Every downstream resource under its own URI; on a collision the first server wins."""
        return self._first_wins("resource", [(n, r.uri, r) for n, c, _ in self._connected() for r in c.resources])

    def resource_templates(self) -> list[types.ResourceTemplate]:
        """Every downstream resource template; on a collision the first server wins."""
        items = [(n, t.uri_template, t) for n, c, _ in self._connected() for t in c.resource_templates]
        return self._first_wins("resource template", items)

    def template_owner(self, uri_template: str) -> str | None:
        """The server whose resource template `uri_template` is exported (the first listing it)."""
        return next(
            (n for n, c, _ in self._connected() if any(t.uri_template == uri_template for t in c.resource_templates)),
            None,
        )

    def owner_of(self, uri: str) -> tuple[str, DownstreamSession] | None:
        """The server a URI belongs to: the one listing it, else the first with a matching template."""
        connected = self._connected()
        if (named := owner_named(uri, [n for n, _, _ in connected])) is not None:
            return next((n, s) for n, _, s in connected if n == named)
        listed = next(((n, s) for n, c, s in connected if any(r.uri == uri for r in c.resources)), None)
        if listed is not None:
            return listed
        return next(
            ((n, s) for n, c, s in connected if any(_matches(t.uri_template, uri) for t in c.resource_templates)), None
        )

    async def read_resource(
        self, uri: str, extra: dict[str, Any] | None = None, caller: Caller | None = None
    ) -> dict[str, Any]:
        """Read a resource from the server it belongs to (`owner_of`) as `caller`'s request; the raw result
        (`extra`: a 2026-era retry's fields, passed on).

        Raises:
            MCPError: no connected server has the URI, or the server's own error.
        """
        owner = self.owner_of(uri)
        if owner is None:
            raise unknown_resource(uri)
        server_name, session = owner
        params = {**(extra or {}), "uri": server_uri(server_name, uri)}
        with self._calling(server_name, caller):
            timeout = session.spec.timeout_seconds
            raw = await session.request("resources/read", params, timeout_seconds=timeout, caller=caller)
        return client_contents(server_name, raw)
