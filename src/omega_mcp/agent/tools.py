"""The agent's view of the tool namespace: wire-safe names, allow globs, and results as model input.

Every provider accepts `^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$`, so one mapping serves all of them: a name
that already fits is kept (the Toolbox's `mcp__<server>__<tool>` names normally do); anything else
is normalized and shortened with the namespace codec's hash suffix, and the reverse map routes a
call back. Nothing is ever recovered by splitting a name. A tool for its app alone (MCP Apps: its
`_meta.ui.visibility` leaves out "model", proxy/apps.py) is never offered, and a call to it is an
error result saying why. `CallToolResult`s become neutral result parts: text blocks joined, images
kept as images, other blocks described in one line.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
from collections.abc import Iterable, Sequence

from mcp import types

from omega_mcp.messages import ImagePart, ResultPart, TextPart, ToolSpec, decoded_size
from omega_mcp.names import fit_name, normalize
from omega_mcp.proxy.apps import app_only, app_only_message

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "ToolCatalog", "capped", "result_parts"]

DEFAULT_MAX_RESULT_CHARS = 100_000
"""What one tool result may put in front of the model (about 25k tokens, Claude Code's default for
MCP output). The hub passes downstream results on whole; the agent is the client here, and one
runaway result must not overflow the context window and end the run."""

_WIRE_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")


class ToolCatalog:
    """The tools offered to the model, with the wire-name → tool-name reverse map."""

    def __init__(self, tools: Iterable[types.Tool], allowed: Sequence[str] | None = None) -> None:
        self.specs: tuple[ToolSpec, ...]
        self._to_tool: dict[str, str] = {}
        self._to_wire: dict[str, str] = {}
        self._app_only: set[str] = set()
        chosen: dict[str, types.Tool] = {}
        for tool in tools:
            if allowed is not None and not any(fnmatch.fnmatchcase(tool.name, glob) for glob in allowed):
                continue
            if app_only(tool):  # the host's to call for its app, never the model's
                self._app_only.add(tool.name)
                continue
            chosen.setdefault(tool.name, tool)
        # Names that already fit are claimed first, so a sanitized name can never take the name
        # of a real tool (the model calling it would reach the wrong one).
        wire_of = {name: name for name in chosen if _WIRE_NAME.match(name)}
        self._to_tool = {wire: name for name, wire in wire_of.items()}
        for name in chosen:
            if name not in wire_of:
                wire_of[name] = self._wire_name(name)
                self._to_tool[wire_of[name]] = name
        self._to_wire = wire_of
        self.specs = tuple(
            ToolSpec(wire_of[tool.name], tool.description or tool.title or tool.name, tool.input_schema)
            for tool in chosen.values()
        )

    def _wire_name(self, name: str) -> str:
        candidate = normalize(name) or "tool"
        if not re.match(r"[a-zA-Z_]", candidate):
            candidate = "_" + candidate
        candidate = fit_name(candidate)
        if candidate in self._to_tool:
            candidate = fit_name(candidate, key=name)
        return candidate

    def wire_name(self, tool_name: str) -> str | None:
        """The wire name of an offered tool (by its ToolHost name), or None when it is not offered."""
        return self._to_wire.get(tool_name)

    def tool_name(self, wire_name: str) -> str | None:
        """The ToolHost name behind a wire name, or None for a name this catalog never offered."""
        return self._to_tool.get(wire_name)

    def unknown_message(self, wire_name: str) -> str:
        """An error text for a call to a name the model was not offered."""
        if wire_name in self._app_only:
            return app_only_message(wire_name)
        if not self._to_tool:
            return f"Unknown tool: {wire_name!r}. No tools are available in this conversation; answer in text."
        close = difflib.get_close_matches(wire_name, list(self._to_tool), n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else f" Available tools: {', '.join(self._to_tool)}."
        return f"Unknown tool: {wire_name!r}.{hint}"


def result_parts(result: types.CallToolResult) -> tuple[ResultPart, ...]:
    """A tool result as model input; `structuredContent` is used only when there is no content."""
    parts: list[ResultPart] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(TextPart(block.text))
        elif isinstance(block, types.ImageContent):
            parts.append(ImagePart(block.mime_type, block.data))
        elif isinstance(block, types.AudioContent):
            parts.append(TextPart(f"[audio: {block.mime_type}, {decoded_size(block.data)} bytes]"))
        elif isinstance(block, types.ResourceLink):
            label = f" ({block.name})" if block.name else ""
            parts.append(TextPart(f"[resource link: {block.uri}{label}]"))
        elif isinstance(block, types.EmbeddedResource):  # pyright: ignore[reportUnnecessaryIsInstance]
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(TextPart(f"[resource {resource.uri}]\n{resource.text}"))
            else:
                kind = resource.mime_type or "binary"
                parts.append(TextPart(f"[resource {resource.uri}: {kind}, {decoded_size(resource.blob)} bytes]"))
    if not parts and result.structured_content is not None:
        parts.append(TextPart(json.dumps(result.structured_content, ensure_ascii=False, default=str)))
    return tuple(parts)


def capped(parts: tuple[ResultPart, ...], limit: int = DEFAULT_MAX_RESULT_CHARS) -> tuple[ResultPart, ...]:
    """`parts` with their text cut in the middle when it exceeds `limit` characters in total.

    Head and tail are kept (errors and summaries tend to sit at either end) and the marker gives
    the full size, so the model can ask for less. Images are not text and stay as they are.
    """
    texts = [part.text for part in parts if isinstance(part, TextPart)]
    joined = "\n".join(texts)
    if len(joined) <= limit:
        return parts
    head = joined[: limit // 2]
    tail = joined[len(joined) - limit // 2 :]
    marker = (
        f"\n\n[... output truncated: {len(joined):,} characters in total, the middle "
        f"{len(joined) - len(head) - len(tail):,} left out; ask for a smaller part to see it ...]\n\n"
    )
    return (TextPart(head + marker + tail), *(part for part in parts if not isinstance(part, TextPart)))
