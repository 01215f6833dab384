"""What `omega-mcp agent` shows a person: streamed text, tool activity, the usage line.

Streamed (the default when stdout is a terminal, a pipe or a socket; not with `--no-stream`,
`--json`, or stdout redirected to a file): every turn's answer text goes to stdout as it arrives,
and a newline ends each turn's text, so the text a model writes before calling tools is on stdout
too, between the `[tool]` lines on stderr; the final answer is the last text on stdout and is not
printed a second time. A provider that ignores `on_text` still works: whatever of the turn was not
streamed is printed when the turn ends. Not streamed: stdout holds only the final answer, and the
text of turns that call tools goes to stderr. Tool calls and results (shortened) always go to
stderr as they happen. Lines that cannot be encoded (LANG=C) are escaped, never a crash.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from omega_mcp.agent.loop import (
    AgentEvent,
    ContextElidedEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    ToolsInfo,
)
from omega_mcp.messages import Message, ModelResponse, RequestSettings, ToolSpec, Usage
from omega_mcp.providers import Provider
from omega_mcp.visible import json_safe

__all__ = ["PREFIX", "Printer", "StreamedTurns", "json_line", "line", "streams_live", "usage_line"]

PREFIX = "omega-mcp agent: "
_SHORT = 300
_PER_TURN_SHOWN = 8


def streams_live(stream: TextIO) -> bool:
    """Whether someone may read `stream` as it is written: a terminal, a pipe or a socket (not a
    regular file, /dev/null, or an in-memory stream)."""
    try:
        if stream.isatty():
            return True
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class Printer:
    """Writes one run's output to `stdout` / `stderr`; `stream` as described in the module docstring."""

    def __init__(self, stdout: TextIO, stderr: TextIO, *, stream: bool) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.stream = stream
        self._turn = ""  # the text of the current turn streamed so far

    def text(self, piece: str) -> None:
        """A piece of streamed answer text (`run_agent(on_text=...)`)."""
        if piece:
            _write(self.stdout, piece)
            self._turn += piece

    def turn_ended(self, text: str | None) -> None:
        """A request ended with a turn whose whole text is `text` (None: it failed)."""
        shown = self._turn
        if text is not None and text.startswith(shown) and len(text) > len(shown):
            _write(self.stdout, text[len(shown) :])  # what the provider did not stream
            shown = text
        if shown and not shown.endswith("\n"):
            _write(self.stdout, "\n")
        self._turn = ""

    def event(self, event: AgentEvent) -> None:
        """Tool activity for stderr (`run_agent(on_event=...)`)."""
        if isinstance(event, TextEvent):
            if not event.final and not self.stream:  # streamed text is on stdout already
                line(self.stderr, event.text)
        elif isinstance(event, ToolCallEvent):
            arguments = (
                "(unparsable arguments)" if event.arguments is None else json.dumps(event.arguments, ensure_ascii=False)
            )
            suffix = "" if event.run else " (not run: turn limit reached)"
            line(self.stderr, f"[tool] {event.name} {_shorten(arguments)}{suffix}")
        elif isinstance(event, ToolResultEvent):
            label = "error" if event.is_error else "result"
            line(self.stderr, f"[{label}] {event.name}: {_shorten(event.text)}")
        elif isinstance(event, ContextElidedEvent):
            results = "result" if event.count == 1 else "results"
            self.note(
                f"the conversation exceeded the model's context window: elided {event.count} older tool "
                f"{results} ({event.characters:,} characters); retrying"
            )
        # Thinking is not shown: it can be long, and the answer matters more.

    def answer(self, output: str) -> None:
        """The final answer, unless it was streamed already."""
        if not self.stream:
            line(self.stdout, output)

    def note(self, text: str) -> None:
        """One `omega-mcp agent: ...` line on stderr."""
        line(self.stderr, PREFIX + text)


class StreamedTurns:
    """A `Provider` wrapper that tells the `Printer` where each streamed turn ends."""

    def __init__(self, provider: Provider, printer: Printer) -> None:
        self._provider = provider
        self._printer = printer

    @property
    def name(self) -> str:
        return self._provider.name

    @property
    def defers_tools(self) -> bool:
        """Whether the wrapped provider loads deferred tools itself (`agent/deferred.py`)."""
        return getattr(self._provider, "defers_tools", False) is True

    async def request(
        self,
        *,
        model: str,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None] | None = None,
        settings: RequestSettings | None = None,
    ) -> ModelResponse:
        try:
            # `settings` only when there are some: a provider written before they existed still works.
            extra = {"settings": settings} if settings is not None else {}
            response = await self._provider.request(
                model=model, system=system, messages=messages, tools=tools, on_text=on_text, **extra
            )
        except BaseException:
            self._printer.turn_ended(None)  # the error line must start on a line of its own
            raise
        self._printer.turn_ended(response.message.text)
        return response

    async def aclose(self) -> None:
        await self._provider.aclose()


def usage_line(
    turns: int, usage: Usage, seconds: float, *, per_turn: Sequence[Usage] = (), tools: ToolsInfo | None = None
) -> str:
    """`3 turns, 12,345 in (8,000 cached) / 456 out, 4.2 s`: cache reads, cache writes and the
    cost only when the provider reported them. With tool search on (`tools.search`), then the input
    tokens of each request and how many of the offered tools the model had in full:
    `; in per turn: 2,100 / 2,350; tool search: 5 of 471 tools loaded`."""
    cache: list[str] = []
    if usage.cache_read_tokens:
        cache.append(f"{usage.cache_read_tokens:,} cached")
    if usage.cache_write_tokens:
        cache.append(f"{usage.cache_write_tokens:,} written to cache")
    tokens = f"{usage.input_tokens:,} in" + (f" ({', '.join(cache)})" if cache else "")
    cost = f", ${usage.cost:.4f}" if usage.cost is not None else ""
    text = f"{turns} turn{'' if turns == 1 else 's'}, {tokens} / {usage.output_tokens:,} out{cost}, {seconds:.1f} s"
    if tools is not None and tools.search:
        shown = [f"{u.input_tokens:,}" for u in per_turn[:_PER_TURN_SHOWN]]
        if len(per_turn) > _PER_TURN_SHOWN:
            shown.append("...")
        if shown:
            text += f"; in per turn: {' / '.join(shown)}"
        text += f"; tool search: {tools.loaded} of {tools.offered} tools loaded"
    return text


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHORT else f"{flat[:_SHORT]}... ({len(text)} chars)"


def _write(stream: TextIO, text: str) -> None:
    try:
        stream.write(text)
    except UnicodeEncodeError:
        # A terminal that cannot show the text (LANG=C, old consoles): escape rather than crash.
        encoding = stream.encoding or "ascii"
        stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()


def line(stream: TextIO, text: str) -> None:
    """`text` and a newline (unless it ends with one), flushed."""
    _write(stream, text if text.endswith("\n") else text + "\n")


def json_line(stream: TextIO, data: dict[str, Any]) -> None:
    """One JSON object; plain ASCII escapes when the stream cannot encode the text itself."""
    text = json_safe(json.dumps(data, ensure_ascii=False))
    try:
        text.encode(stream.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(data)
    line(stream, text)
