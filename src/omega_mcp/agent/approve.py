"""Write approvals on the terminal, for `omega-mcp agent` with `[sandbox] on_denied = "ask"`.

A write the policy refuses but lets the user allow (`sandbox/approvals.py`) is put to the user on
stderr: the question names the tool, the path and the reason and ends with `[o]nce / [s]ession /
[d]eny`. The answer is one key from the controlling terminal, read with the terminal in
non-canonical, no-echo, no-signal mode (restored afterwards, on cancellation too), so Ctrl-C is a
key that denies rather than a signal that cancels the turn; keys typed before the question are
discarded, and a question left unanswered for `ASK_SECONDS` is a denial. `o`/`y` approve once
(the 300 s one-time grant), `s` approves the path for the rest of this process (in memory only),
`d`, `n`, Enter or Ctrl-C deny, and the model gets "Operation canceled by user". Without a
terminal (or with `--json`) nothing is asked: the write is denied with the policy's reason.
Questions of concurrent tool calls are asked one at a time.
"""

from __future__ import annotations

import os
import sys
import termios
from collections.abc import Generator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, Literal, Protocol, TextIO

import anyio
from mcp import types

from omega_mcp.calling import PROCESS, CallContext
from omega_mcp.errors import PathDeniedError, ToolError
from omega_mcp.sandbox.approvals import ApprovalRequest, Approver

__all__ = [
    "ASK_SECONDS",
    "ApprovableTools",
    "ApprovingTools",
    "TerminalApprover",
    "approving_tools",
    "canceled_by_user",
    "no_terminal_approver",
    "terminal_approver",
]

ASK_SECONDS = 600.0
"""How long a question waits for its key before it counts as a denial."""

Answer = Literal["once", "session", "deny"]
_KEYS: Mapping[bytes, Answer] = {
    b"o": "once",
    b"y": "once",
    b"s": "session",
    b"d": "deny",
    b"n": "deny",
    b"\r": "deny",
    b"\n": "deny",
    b"\x03": "deny",  # Ctrl-C: ISIG is off while asking, so it arrives as a key
    b"\x04": "deny",  # Ctrl-D
}
_ENDING = "[o]nce / [s]ession / [d]eny"


def canceled_by_user(tool: str, path: str) -> str:
    """The error text the model gets when the user denies a write."""
    return f"Operation canceled by user: the {tool} of {_shown(path)} was not approved"


def _shown(path: str) -> str:
    return path if path.isprintable() else repr(path)  # control or invisible characters, escaped


def question(tool: str, request: ApprovalRequest) -> str:
    """What the user is asked: the tool, the path and the first clause of the policy's reason."""
    reason = request.reason.split(";", 1)[0].strip() or "outside the writable roots"
    return f"omega-mcp: {tool} wants to write {_shown(request.path)} ({reason}). Allow? {_ENDING}"


class TerminalApprover:
    """Asks on terminal `fd` (the question goes to `out`); remembers the paths approved for the session."""

    def __init__(self, fd: int, out: TextIO, *, ask_seconds: float | None = None) -> None:
        self._fd = fd
        self._out = out
        self._ask_seconds = ASK_SECONDS if ask_seconds is None else ask_seconds
        self._lock = anyio.Lock()
        self.session_paths: set[str] = set()

    def for_tool(self, tool: str) -> Approver:
        """The `Approver` for one call of `tool` (the name the question shows)."""

        async def approve(request: ApprovalRequest) -> bool:
            return await self.ask(tool, request)

        return approve

    async def ask(self, tool: str, request: ApprovalRequest) -> bool:
        """True to approve; a denial raises.

        Raises:
            ToolError: the user denied the write ("Operation canceled by user").
        """
        if request.path in self.session_paths:
            return True
        async with self._lock:  # concurrent calls: one question at a time
            if request.path in self.session_paths:  # approved for the session while this call waited
                return True
            answer: Answer = "deny"
            with _single_keys(self._fd):
                # Asked only once the terminal takes single keys: a key typed after seeing the
                # question must not be discarded with the typed-ahead ones.
                self._say(question(tool, request) + " ")
                with anyio.move_on_after(self._ask_seconds) as scope:
                    answer = await self._read_answer()
            self._say(f"{'no answer, denied' if scope.cancelled_caught else _SAID[answer]}\n")
        if answer == "deny":
            raise ToolError(canceled_by_user(tool, request.path))
        if answer == "session":
            self.session_paths.add(request.path)
        return True

    def _say(self, text: str) -> None:
        with suppress(OSError, ValueError):
            self._out.write(text)
            self._out.flush()

    async def _read_answer(self) -> Answer:
        while True:
            await anyio.wait_readable(self._fd)
            try:
                data = os.read(self._fd, 64)
            except BlockingIOError:
                continue
            except OSError:
                return "deny"  # the terminal went away (EIO after a hangup)
            if not data:
                return "deny"
            answer = _first_answer(data)
            if answer is not None:
                return answer
            # Any other key (an arrow, a stray letter) is no answer: keep waiting.


def _first_answer(data: bytes) -> Answer | None:
    """The first key in `data` that answers, skipping escape sequences (an arrow's `ESC [ D` is no `d`)."""
    index = 0
    while index < len(data):
        byte = data[index : index + 1]
        index += 1
        if byte == b"\x1b":
            kind = data[index : index + 1]
            index += 1
            if kind == b"[":  # CSI: parameters up to a final byte in @..~
                while index < len(data) and not 0x40 <= data[index] <= 0x7E:
                    index += 1
                index += 1
            elif kind == b"O":  # SS3 (F1-F4, keypad arrows): one more byte
                index += 1
            continue
        answer = _KEYS.get(byte.lower())
        if answer is not None:
            return answer
    return None


_SAID: Mapping[Answer, str] = {"once": "approved once", "session": "approved for this session", "deny": "denied"}


@contextmanager
def _single_keys(fd: int) -> Generator[None]:
    """The terminal in one-key mode (no line buffering, no echo, Ctrl-C as a key); restored on exit."""
    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
    mode[6][termios.VMIN] = 1
    mode[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, mode)
    try:
        termios.tcflush(fd, termios.TCIFLUSH)  # keys typed before the question never answer it
        yield
    finally:
        with suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


def no_terminal_approver(why: str) -> Approver:
    """An `Approver` that asks nobody: the write is denied with the policy's reason and `why`."""

    async def deny(request: ApprovalRequest) -> bool:
        raise PathDeniedError(request.path, f"{request.reason}; not asked: {why}")

    return deny


@contextmanager
def terminal_approver(out: TextIO, *, ask: bool) -> Generator[TerminalApprover | None]:
    """A `TerminalApprover` on the controlling terminal, or None when there is none to ask on.

    Asks only when `ask` (no `--json`) and `out` is a terminal, reading from stdin when it is the
    terminal, else from /dev/tty (opened here and closed on exit).
    """
    if not ask or not _isatty(out):
        yield None
        return
    stdin = sys.stdin
    if stdin is not None and _isatty(stdin):
        yield TerminalApprover(stdin.fileno(), out)
        return
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        yield TerminalApprover(fd, out)
    finally:
        os.close(fd)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False


class ApprovableTools(Protocol):
    """A tool host whose calls take the call's context, its approver included (`omega_mcp.toolbox.Toolbox`)."""

    async def list_tools(self) -> list[types.Tool]: ...

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, context: CallContext = PROCESS
    ) -> types.CallToolResult: ...


class ApprovingTools:
    """The agent loop's `ToolHost` over `tools`, each call carrying `approver` under the tool's name."""

    def __init__(self, tools: ApprovableTools, approver: TerminalApprover | Approver | None) -> None:
        self._tools = tools
        self._approver = approver

    async def list_tools(self) -> list[types.Tool]:
        return await self._tools.list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Run a tool; failures are `is_error` results.

        Raises:
            UnknownToolError: no tool by that name.
        """
        approver = self._approver
        approve = approver.for_tool(name) if isinstance(approver, TerminalApprover) else approver
        return await self._tools.call_tool(name, arguments, CallContext(approve=approve))


@contextmanager
def approving_tools(tools: ApprovableTools, out: TextIO, *, json_output: bool) -> Generator[ApprovingTools]:
    """`tools` for the agent loop, asking on the terminal when there is one and `--json` is not given."""
    with terminal_approver(out, ask=not json_output) as approver:
        if approver is not None:
            yield ApprovingTools(tools, approver)
        else:
            why = "--json asks nobody" if json_output else "there is no terminal to ask on"
            yield ApprovingTools(tools, no_terminal_approver(why))
