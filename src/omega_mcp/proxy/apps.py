"""MCP Apps (`io.modelcontextprotocol/ui`) through the aggregator: per-server `ui://` URIs, app-only tools.

Servers name their UI resources freely, and many name them alike (`ui://widget/index.html`), so
omega gives every `ui://` URI of a server a per-server form, `ui://<server>/<the rest>`: still a
`ui://` URI (what a host checks before it renders one), reversible without a table (server keys
are `[A-Za-z0-9_-]+`, so the first segment is the key), and the same in both eras. The form is
given where a server offers URIs (`resources/list`, `resources/templates/list`, a tool's
`_meta.ui.resourceUri` and the flat `_meta["ui/resourceUri"]`, `resources/updated`, the contents
of a read, a `tools/call` result's resource links, embedded resources and `_meta`, and those of a
`prompts/get` result's messages) and taken back where a client names one (`resources/read`,
subscriptions). Only `ui://` URIs change; every other URI is the server's own. A result's
`structuredContent` is never rewritten: it is data (the model reads it, the client checks it against
the tool's `outputSchema`, its serialized copy in a text block stays the server's words), and MCP Apps
links a UI only through `_meta`, which is.

A tool whose `_meta.ui.visibility` leaves out `"model"` is for the app alone: it stays listed (the
host needs its `_meta`) but is never a model's to find or run, so `search_tools` never returns it,
`call_tool` refuses it (`app_only`) and the agent loop never offers it to its model (agent/tools.py).

A URI no server offers is `unknown_resource`: -32602 with the URI the client named in `data.uri`
(SEP-2164), wherever omega answers for a resource (read, subscribe, complete).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast

from mcp import types
from mcp.shared.exceptions import MCPError

from omega_mcp.calling import Profile
from omega_mcp.errors import ToolError
from omega_mcp.names import Route

__all__ = [
    "app_only",
    "app_only_message",
    "app_only_refusal",
    "client_contents",
    "client_uri",
    "owner_named",
    "prompt_for_client",
    "resources_for_client",
    "result_for_client",
    "server_uri",
    "templates_for_client",
    "tool_for_client",
    "unknown_resource",
]

_SCHEME = "ui://"
_FLAT_KEY = "ui/resourceUri"


def _is_ui(uri: str) -> bool:
    return uri[: len(_SCHEME)].lower() == _SCHEME


def client_uri(server_name: str, uri: str) -> str:
    """The namespace's form of a URI `server_name` offers: `ui://<server>/<rest>` for a `ui://` URI."""
    return f"{_SCHEME}{server_name}/{uri[len(_SCHEME) :]}" if _is_ui(uri) else uri


def server_uri(server_name: str, uri: str) -> str:
    """The URI `server_name` itself knows for a namespace URI (the inverse of `client_uri`)."""
    if not _is_ui(uri):
        return uri
    owner, slash, rest = uri[len(_SCHEME) :].partition("/")
    return f"{_SCHEME}{rest}" if slash and owner.lower() == server_name.lower() else uri


def unknown_resource(uri: str) -> MCPError:
    """The error for a URI no connected server offers, or that the caller may not see: -32602 naming
    the URI in its message and in `data.uri` (SEP-2164), as the client spelled it."""
    return MCPError(code=types.INVALID_PARAMS, message=f"Unknown resource: {uri}", data={"uri": uri})


def owner_named(uri: str, server_names: Iterable[str]) -> str | None:
    """The server a namespace `ui://` URI names, among `server_names` (None: not such a URI)."""
    if not _is_ui(uri):
        return None
    owner, slash, _ = uri[len(_SCHEME) :].partition("/")
    if not slash:
        return None
    names = list(server_names)
    if owner in names:
        return owner
    # A host may normalise the authority to lower case, as URI hosts are compared.
    return next((name for name in names if name.lower() == owner.lower()), None)


def _ui_meta(meta: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    ui = meta.get("ui") if meta is not None else None
    return cast(Mapping[str, Any], ui) if isinstance(ui, Mapping) else None


def _meta_for_client(server_name: str, meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """`meta` with the `ui://` URIs of `ui.resourceUri` and the flat `ui/resourceUri` in the namespace's form
    (the same object when it names none)."""
    changed: dict[str, Any] | None = None
    ui = _ui_meta(meta)
    if ui is not None and isinstance(uri := ui.get("resourceUri"), str) and _is_ui(uri):
        changed = {**meta, "ui": {**ui, "resourceUri": client_uri(server_name, uri)}}
    if isinstance(flat := meta.get(_FLAT_KEY), str) and _is_ui(flat):
        changed = {**(changed if changed is not None else meta), _FLAT_KEY: client_uri(server_name, flat)}
    return meta if changed is None else changed


def tool_for_client(server_name: str, tool: types.Tool) -> types.Tool:
    """`tool` with the `ui://` URIs of its `_meta` in the namespace's form (the same tool when it has none)."""
    meta = tool.meta
    if meta is None:
        return tool
    changed = _meta_for_client(server_name, meta)
    return tool if changed is meta else tool.model_copy(update={"meta": dict(changed)})


def result_for_client(server_name: str, result: dict[str, Any]) -> dict[str, Any]:
    """A raw `tools/call` result with the `ui://` URIs it names in the namespace's form: its resource links',
    its embedded resources', and those of its own and each block's `_meta` (the same dict when it names none).

    On the hot path of every call: a result naming no `ui://` URI is looked at, never copied.
    """
    changed: dict[str, Any] | None = None
    meta = result.get("_meta")
    if isinstance(meta, dict):
        own = _meta_for_client(server_name, cast(dict[str, Any], meta))
        if own is not meta:
            changed = {**result, "_meta": own}
    content = result.get("content")
    if isinstance(content, list):
        blocks = cast(list[object], content)
        rewritten = [_block_for_client(server_name, block) for block in blocks]
        if any(new is not old for new, old in zip(rewritten, blocks, strict=True)):
            changed = {**(changed if changed is not None else result), "content": rewritten}
    return result if changed is None else changed


def prompt_for_client(server_name: str, result: dict[str, Any]) -> dict[str, Any]:
    """A raw `prompts/get` result with the `ui://` URIs it names in the namespace's form: those of each
    message's content block (as in a tool result) and of its own `_meta` (the same dict when it names none)."""
    changed: dict[str, Any] | None = None
    meta = result.get("_meta")
    if isinstance(meta, dict):
        own = _meta_for_client(server_name, cast(dict[str, Any], meta))
        if own is not meta:
            changed = {**result, "_meta": own}
    messages = result.get("messages")
    if isinstance(messages, list):
        listed = cast(list[object], messages)
        rewritten = [_message_for_client(server_name, message) for message in listed]
        if any(new is not old for new, old in zip(rewritten, listed, strict=True)):
            changed = {**(changed if changed is not None else result), "messages": rewritten}
    return result if changed is None else changed


def _message_for_client(server_name: str, message: object) -> object:
    if not isinstance(message, dict):
        return message
    entry = cast(dict[str, Any], message)
    content = entry.get("content")
    block = _block_for_client(server_name, content)
    return entry if block is content else {**entry, "content": block}


def _block_for_client(server_name: str, block: object) -> object:
    if not isinstance(block, dict):
        return block
    entry = cast(dict[str, Any], block)
    changed: dict[str, Any] | None = None
    kind = entry.get("type")
    if kind == "resource_link" and isinstance(uri := entry.get("uri"), str) and _is_ui(uri):
        changed = {**entry, "uri": client_uri(server_name, uri)}
    elif kind == "resource" and isinstance(embedded := entry.get("resource"), dict):
        embedded = cast(dict[str, Any], embedded)
        inner = _content_for_client(server_name, embedded)
        if inner is not embedded:
            changed = {**entry, "resource": inner}
    meta = entry.get("_meta")
    if isinstance(meta, dict):
        own = _meta_for_client(server_name, cast(dict[str, Any], meta))
        if own is not meta:
            changed = {**(changed if changed is not None else entry), "_meta": own}
    return entry if changed is None else changed


def resources_for_client(server_name: str, resources: Iterable[types.Resource]) -> tuple[types.Resource, ...]:
    """`resources` under their namespace URIs."""
    return tuple(
        r.model_copy(update={"uri": client_uri(server_name, r.uri)}) if _is_ui(r.uri) else r for r in resources
    )


def templates_for_client(
    server_name: str, templates: Iterable[types.ResourceTemplate]
) -> tuple[types.ResourceTemplate, ...]:
    """`templates` under their namespace URI templates."""
    return tuple(
        t.model_copy(update={"uri_template": client_uri(server_name, t.uri_template)}) if _is_ui(t.uri_template) else t
        for t in templates
    )


def client_contents(server_name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A raw `resources/read` result with its contents' `ui://` URIs in the namespace's form."""
    contents = raw.get("contents")
    if not isinstance(contents, list):
        return raw
    items = cast(list[object], contents)
    return {**raw, "contents": [_content_for_client(server_name, item) for item in items]}


def _content_for_client(server_name: str, item: object) -> object:
    """A resource's contents under its namespace URI (the same object when it is no `ui://` URI)."""
    if not isinstance(item, dict):
        return item
    entry = cast(dict[str, Any], item)
    uri = entry.get("uri")
    return {**entry, "uri": client_uri(server_name, uri)} if isinstance(uri, str) and _is_ui(uri) else entry


def app_only(tool: types.Tool) -> bool:
    """Whether `tool` is for its app alone (`_meta.ui.visibility` given, without `"model"`)."""
    ui = _ui_meta(tool.meta)
    visibility = ui.get("visibility") if ui is not None else None
    return isinstance(visibility, list) and "model" not in cast(list[object], visibility)


class _Tools(Protocol):
    def get_tool(self, server_name: str, tool_name: str) -> types.Tool | None: ...


class _Lookup(Protocol):
    """What `app_only_refusal` needs of the Toolbox."""

    @property
    def downstreams(self) -> _Tools | None: ...

    def resolve(self, name: str, profile: Profile | None = None) -> Route: ...


def app_only_refusal(toolbox: _Lookup, name: str, profile: Profile | None = None) -> str | None:
    """Why `call_tool` refuses `name` (an app-only tool: the model may not run it), or None (also for a
    tool `profile` may not call: the call itself answers as for an unknown one)."""
    try:
        route = toolbox.resolve(name, profile)
    except ToolError:
        return None  # the call itself says what is wrong with the name
    downstreams = toolbox.downstreams
    if route.server_name is None or downstreams is None:
        return None
    tool = downstreams.get_tool(route.server_name, route.tool_name)
    if tool is None or not app_only(tool):
        return None
    return app_only_message(name)


def app_only_message(name: str) -> str:
    """Why the model may not run the app-only tool `name` (`call_tool`'s refusal, the agent's error result)."""
    return f"{name} is a tool for its app's interface only (_meta.ui.visibility); the model cannot call it"
