"""The interactive conversation of `omega-mcp agent` without a PROMPT on a terminal.

Prompt, answer, next prompt, each turn continuing the conversation so far. Keys (SPEC "Agent
loop"): Enter sends the line (an empty one is ignored); Ctrl-D or `/exit` at the prompt leaves
with status 0; Ctrl-C during a turn cancels that turn's scope (the provider request and every tool
call in flight, whose process trees die with their cancelled calls) and returns to the prompt,
and the conversation goes on as it was before the turn; Ctrl-C at the prompt leaves with 130,
SIGTERM anywhere with 143. Lines are read with the kernel's line editing (the terminal is put in
canonical mode for it), asynchronously, so waiting for a line is cancellable like any other wait.
The prompt and notes go to stderr; what a turn prints is the turn runner's business.

The session hooks for `run_agent_command(session=)` live here too: `one_shot` runs the one prompt
after a resumed history and saves it, `conversation` holds the interactive conversation, saving
each finished turn (`sessions.SessionRecorder`); `prompt_from_stdin` reads the prompt of
`omega-mcp agent` without PROMPT when stdin is not a terminal.
"""

from __future__ import annotations

import os
import signal
import termios
from collections.abc import Awaitable, Callable, Generator, Sequence
from contextlib import contextmanager, suppress
from typing import BinaryIO, Protocol, TextIO

import anyio
import anyio.lowlevel
import anyio.to_thread

from omega_mcp.agent.command import PromptOutcome, PromptRunner, SessionHook
from omega_mcp.agent.sessions import SessionRecorder, SessionStore, format_sessions
from omega_mcp.agent.settings import AgentSettings
from omega_mcp.messages import Message

__all__ = [
    "EXIT_COMMAND",
    "MAX_STDIN_PROMPT_BYTES",
    "HeldSignals",
    "TurnRunner",
    "conversation",
    "converse",
    "list_sessions",
    "one_shot",
    "prompt_from_stdin",
]

MAX_STDIN_PROMPT_BYTES = 10 * 1024 * 1024

EXIT_COMMAND = "/exit"
PROMPT = "> "

TurnRunner = Callable[[str, tuple[Message, ...]], Awaitable[tuple[Message, ...] | None]]
"""Runs one prompt after the conversation so far; returns the whole conversation after the turn,
or None when the turn failed (the runner has said why). Cancellation ends it from outside."""


class HeldSignals(Protocol):
    """The CLI's `SignalGuard`: signals noted before anyone listened, and re-arming it afterwards."""

    @property
    def held(self) -> Sequence[int]: ...

    def hold(self) -> None: ...


class _State:
    def __init__(self) -> None:
        self.turn: anyio.CancelScope | None = None
        self.exit_code: int | None = None


def one_shot(prompt: str, recorder: SessionRecorder) -> SessionHook:
    """Run `prompt` after the recorder's history (a resumed session) and save the run."""

    async def run(run_one: PromptRunner, settings: AgentSettings) -> int:
        outcome = await run_one(prompt, recorder.history)
        _record(recorder, prompt, settings, outcome)
        return outcome.code

    return run


def conversation(recorder: SessionRecorder, *, fd: int, out: TextIO, guard: HeldSignals) -> SessionHook:
    """The interactive conversation on terminal `fd` (`converse`), each finished turn saved."""

    async def run(run_one: PromptRunner, settings: AgentSettings) -> int:
        resumed = recorder.session
        if resumed is not None:
            _say(out, f"omega-mcp agent: continuing session {resumed.id} ({len(recorder.history)} messages)\n")
        _say(
            out,
            f"omega-mcp agent: {settings.provider} {settings.model}; Enter sends, Ctrl-C cancels a turn, "
            f"Ctrl-D or {EXIT_COMMAND} leaves\n",
        )

        async def turn(prompt: str, history: tuple[Message, ...]) -> tuple[Message, ...] | None:
            outcome = await run_one(prompt, history)
            _record(recorder, prompt, settings, outcome)
            return recorder.history if outcome.code == 0 else None

        try:
            return await converse(turn, fd=fd, out=out, guard=guard, history=recorder.history)
        finally:
            if recorder.session is not None:
                session_id = recorder.session.id
                _say(out, f"omega-mcp agent: session {session_id} saved; resume it with --resume {session_id}\n")

    return run


def _record(recorder: SessionRecorder, prompt: str, settings: AgentSettings, outcome: PromptOutcome) -> None:
    finished = outcome.result.messages if outcome.code == 0 and outcome.result is not None else None
    recorder.record(prompt, provider=settings.provider, model=outcome.model, conversation=finished)


def list_sessions(store: SessionStore, out: TextIO, err: TextIO) -> int:
    """`omega-mcp agent --sessions`: one line per saved session, newest first."""
    sessions = store.saved()
    if not sessions:
        _say(err, f"omega-mcp agent: no saved sessions in {store.directory}\n")
    for line in format_sessions(sessions):
        _say(out, line + "\n")
    return 0


async def prompt_from_stdin(stdin: BinaryIO) -> str | None:
    """The prompt piped to `omega-mcp agent` without PROMPT (decoded as UTF-8, stripped), None if empty.

    Raises:
        ValueError: over `MAX_STDIN_PROMPT_BYTES`.
    """

    def read() -> bytes:
        return stdin.read(MAX_STDIN_PROMPT_BYTES + 1)

    data = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)  # an open pipe must not block Ctrl-C
    if len(data) > MAX_STDIN_PROMPT_BYTES:
        raise ValueError(f"the prompt on stdin is over {MAX_STDIN_PROMPT_BYTES // (1024 * 1024)} MiB")
    text = data.decode("utf-8", "replace").strip()
    return text or None


async def converse(
    run_turn: TurnRunner,
    *,
    fd: int,
    out: TextIO,
    guard: HeldSignals,
    history: Sequence[Message] = (),
) -> int:
    """Hold the conversation on terminal `fd` (lines in) and `out` (prompt and notes) until the user leaves.

    Returns the exit status: 0 for Ctrl-D or `/exit`, 128 + the signal for Ctrl-C at the prompt or SIGTERM.
    """
    state = _State()
    conversation = tuple(history)
    try:
        async with anyio.create_task_group() as group:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

                async def watch() -> None:
                    async for signum in signals:
                        turn = state.turn
                        if signum == signal.SIGINT and turn is not None:
                            turn.cancel()  # only this turn; the conversation goes on
                            continue
                        state.exit_code = 128 + signum
                        group.cancel_scope.cancel()
                        return

                group.start_soon(watch)
                if guard.held:  # Ctrl-C while omega was starting: the user left before the first prompt
                    state.exit_code = 128 + guard.held[0]
                    group.cancel_scope.cancel()
                    await anyio.lowlevel.checkpoint()
                while True:
                    _say(out, PROMPT)
                    line = await read_line(fd)
                    if line is None:
                        _say(out, "\n")  # Ctrl-D left the cursor after the prompt
                        break
                    text = line.strip()
                    if not text:
                        continue
                    if text == EXIT_COMMAND:
                        break
                    with anyio.CancelScope() as scope:
                        state.turn = scope
                        try:
                            after = await run_turn(line, conversation)
                        finally:
                            state.turn = None
                        if after is not None:
                            conversation = after
                    if scope.cancelled_caught:
                        _say(out, "\nomega-mcp agent: cancelled; this turn is not kept\n")
                group.cancel_scope.cancel()
    finally:
        guard.hold()  # from here on a signal must not cut the cleanup short
    if state.exit_code is not None:
        _say(out, "\n")
        return state.exit_code
    return 0


async def read_line(fd: int) -> str | None:
    """One line from terminal `fd` without its newline, or None at end of input (Ctrl-D on an empty line)."""
    buffer = b""
    with _line_mode(fd):
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""  # the terminal went away (EIO after a hangup): end of input
            if not chunk:
                return buffer.decode("utf-8", "replace") if buffer else None
            buffer += chunk
            if buffer.endswith(b"\n"):
                return buffer[:-1].decode("utf-8", "replace")


@contextmanager
def _line_mode(fd: int) -> Generator[None]:
    """The terminal in canonical mode with echo and signals (how a shell reads a line); restored on exit."""
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:  # not a terminal after all (a test's pipe): read it as it is
        yield
        return
    mode = termios.tcgetattr(fd)
    mode[0] |= termios.ICRNL
    mode[3] |= termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN
    termios.tcsetattr(fd, termios.TCSANOW, mode)
    try:
        yield
    finally:
        with suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


def _say(out: TextIO, text: str) -> None:
    with suppress(OSError, ValueError):
        out.write(text)
        out.flush()
