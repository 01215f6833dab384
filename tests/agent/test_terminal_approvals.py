"""`on_denied = "ask"` in `omega-mcp agent`: the write outside the roots is put to the user on the terminal.

End to end, the real CLI on a pseudo-terminal in sandbox mode against a fake model: the question
names the tool, the path and the reason and ends with `[o]nce / [s]ession / [d]eny`; `o` writes,
`s` writes and does not ask again for that path, `d`, Enter and Ctrl-C deny, and the model's next
request carries "Operation canceled by user". Without a terminal the write is denied with the
reason, at once. In process, on a pty pair: the keys, the terminal mode restored, typed-ahead
keys ignored, one question at a time, and the bound on an unanswered question.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import termios
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from session_support import Fake, Terminal, cli, run, start_fake, stop_fakes, tool_results

from omega_mcp.agent.approve import ApprovingTools, TerminalApprover, approving_tools, question
from omega_mcp.calling import PROCESS, CallContext
from omega_mcp.errors import PathDeniedError, ToolError
from omega_mcp.sandbox.approvals import ApprovalRequest, Approver
from waits import deadline

ENDING = "[o]nce / [s]ession / [d]eny"
CANCELED = "Operation canceled by user"


@pytest.fixture
def fake() -> Iterator[Fake]:
    servers: list[tuple[ThreadingHTTPServer, Fake]] = []
    yield start_fake(servers)
    stop_fakes(servers)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside every write root of sandbox mode (the roots include /tmp, so not under it)."""
    path = Path(tempfile.mkdtemp(prefix="omega-approve-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def term(tmp_path: Path, fake: Fake) -> Iterator[Terminal]:
    terminal = Terminal(*cli(tmp_path, fake, mode="sandbox", on_denied="ask"), tmp_path)
    terminal.prompt()
    yield terminal
    terminal.close()


def ask_and_answer(term: Terminal, path: Path, content: str, key: bytes) -> str:
    """Prompt a write of `path`, check the question, answer `key`; the screen up to the next prompt."""
    term.send(f"write {path} {content}\n")
    shown = term.expect(ENDING)
    assert "write" in shown and str(path) in shown and "outside the writable roots" in shown
    term.send(key)
    return term.prompt()


@pytest.mark.e2e
def test_approve_once_writes_the_file(term: Terminal, fake: Fake, outside: Path) -> None:
    target = outside / "once.txt"
    screen = ask_and_answer(term, target, "one", b"o")
    assert "approved once" in screen and "result: Wrote" in screen
    assert target.read_text() == "one"
    assert "approved by the user" in tool_results(fake.bodies[-1])[-1]
    screen = ask_and_answer(term, outside / "yes.txt", "two", b"y\n")  # `y` too, with Enter after it
    assert (outside / "yes.txt").read_text() == "two"
    term.send("/exit\n")
    assert term.wait_exit() == 0, term.screen


@pytest.mark.e2e
def test_approve_for_the_session_writes_and_does_not_ask_again_for_that_path(
    term: Terminal, fake: Fake, outside: Path
) -> None:
    target = outside / "session.txt"
    screen = ask_and_answer(term, target, "first", b"s")
    assert "approved for this session" in screen
    assert target.read_text() == "first"
    term.send(f"write {target} second\n")
    screen = term.prompt()
    assert ENDING not in screen and "result: Wrote" in screen
    assert target.read_text() == "second"
    term.send(b"\x04")
    assert term.wait_exit() == 0, term.screen


@pytest.mark.parametrize("key", [b"d", b"n", b"\r", b"\x03"], ids=["d", "n", "Enter", "Ctrl-C"])
@pytest.mark.e2e
def test_a_denial_reaches_the_model_as_operation_canceled(term: Terminal, fake: Fake, outside: Path, key) -> None:
    target = outside / "denied.txt"
    screen = ask_and_answer(term, target, "no", key)
    assert "denied" in screen and "cancelled" not in screen  # Ctrl-C here denies, it does not cancel the turn
    assert not target.exists()
    result = tool_results(fake.bodies[-1])[-1]
    assert CANCELED in result and str(target) in result
    assert fake.bodies[-1]["messages"][-1]["role"] == "tool"
    lflag = termios.tcgetattr(term.master)[3]
    assert lflag & termios.ICANON and lflag & termios.ECHO and lflag & termios.ISIG  # restored
    term.send("/exit\n")
    assert term.wait_exit() == 0, term.screen


@pytest.mark.e2e
def test_without_a_terminal_the_write_is_denied_with_the_reason(tmp_path: Path, fake: Fake, outside: Path) -> None:
    target = outside / "x.txt"
    argv, env = cli(tmp_path, fake, f"write {target} data", mode="sandbox", on_denied="ask")
    done = run(argv, env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert ENDING not in done.stderr
    result = tool_results(fake.bodies[-1])[-1]
    assert "denied" in result and "outside the writable roots" in result and "no terminal" in result
    assert not target.exists()


@pytest.mark.e2e
def test_blocklisted_paths_are_never_asked(tmp_path: Path, fake: Fake, term: Terminal) -> None:
    config = tmp_path / "servers.toml"
    before = config.read_text()
    term.send(f"write {config} [servers.evil]\n")
    screen = term.prompt()
    assert ENDING not in screen and "denied" in screen
    assert config.read_text() == before
    term.send("/exit\n")
    assert term.wait_exit() == 0, term.screen


# -- in process, on a pty pair ---------------------------------------------------------------


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int]]:
    master, slave = os.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)


REQUEST = ApprovalRequest("/srv/data/a.txt", "outside the writable roots; writable (sandbox mode): /ws")


class Screen(io.StringIO):
    """The approver's `out`: what it wrote, and a way to wait for its questions."""

    def __init__(self) -> None:
        super().__init__()
        self._written = anyio.Event()

    def write(self, text: str) -> int:
        self._written.set()
        return super().write(text)

    async def questions(self, count: int) -> None:
        with deadline(10):
            while self.getvalue().count(ENDING) < count:
                self._written = anyio.Event()
                await self._written.wait()


async def until_asked(out: Screen, count: int = 1) -> None:
    await out.questions(count)


async def answer(approver: TerminalApprover, out: Screen, master: int, keys: bytes) -> bool | str:
    outcome: list[bool | str] = []

    async def ask() -> None:
        try:
            outcome.append(await approver.ask("edit", REQUEST))
        except ToolError as exc:
            outcome.append(str(exc))

    with deadline(10):
        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            await until_asked(out)
            os.write(master, keys)
    return outcome[0]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("keys", "approved"),
    [
        (b"o", True),
        (b"O", True),
        (b"y", True),
        (b"s", True),
        (b"d", False),
        (b"n", False),
        (b"\n", False),
        (b"\x03", False),  # Ctrl-C
        (b"\x04", False),  # Ctrl-D
        (b"x\x1b[Do", True),  # a stray key and an arrow (ESC [ D, no `d`) are no answer
        (b"\x1b[1;5D\x1bOBs", True),
    ],
)
async def test_each_key_answers_the_question(pty_pair, keys: bytes, approved: bool) -> None:
    master, slave = pty_pair
    out = Screen()
    before = termios.tcgetattr(slave)
    outcome = await answer(TerminalApprover(slave, out), out, master, keys)
    assert (outcome is True) == approved
    if not approved:
        assert outcome == f"{CANCELED}: the edit of /srv/data/a.txt was not approved"
    assert termios.tcgetattr(slave) == before
    assert out.getvalue().startswith(question("edit", REQUEST))


def test_the_question_names_tool_path_and_reason_and_ends_with_the_keys() -> None:
    text = question("write", REQUEST)
    assert text.endswith(ENDING)
    assert "write" in text and "/srv/data/a.txt" in text and "(outside the writable roots)" in text
    assert "\n" not in question("write", ApprovalRequest("/srv/x\nok", "why"))


@pytest.mark.anyio
async def test_keys_typed_before_the_question_do_not_answer_it(pty_pair) -> None:
    master, slave = pty_pair
    os.write(master, b"o")
    out = Screen()
    assert await answer(TerminalApprover(slave, out), out, master, b"d") != True  # noqa: E712


@pytest.mark.anyio
async def test_a_path_approved_for_the_session_is_not_asked_again(pty_pair) -> None:
    master, slave = pty_pair
    out = Screen()
    approver = TerminalApprover(slave, out)
    assert await answer(approver, out, master, b"s") is True
    with deadline(5):
        assert await approver.ask("write", REQUEST) is True
    assert out.getvalue().count(ENDING) == 1


@pytest.mark.anyio
async def test_concurrent_questions_are_asked_one_at_a_time(pty_pair) -> None:
    master, slave = pty_pair
    out = Screen()
    approver = TerminalApprover(slave, out)
    answers: list[bool | str] = []

    async def ask(path: str) -> None:
        try:
            answers.append(await approver.ask("write", ApprovalRequest(path, "outside")))
        except ToolError as exc:
            answers.append(str(exc))

    async with anyio.create_task_group() as group:
        group.start_soon(ask, "/srv/1")
        group.start_soon(ask, "/srv/2")
        await until_asked(out, 1)
        await anyio.wait_all_tasks_blocked()
        assert out.getvalue().count(ENDING) == 1  # the second waits for the first answer
        os.write(master, b"o")
        await until_asked(out, 2)
        os.write(master, b"d")
    assert answers[0] is True and isinstance(answers[1], str) and answers[1].startswith(CANCELED)


@pytest.mark.anyio
async def test_an_unanswered_question_is_a_denial_and_the_terminal_is_restored(pty_pair) -> None:
    _master, slave = pty_pair
    out = Screen()
    before = termios.tcgetattr(slave)
    with deadline(10), pytest.raises(ToolError, match=CANCELED):
        await TerminalApprover(slave, out, ask_seconds=0.2).ask("write", REQUEST)
    assert "no answer, denied" in out.getvalue()
    assert termios.tcgetattr(slave) == before


@pytest.mark.anyio
async def test_a_cancelled_question_restores_the_terminal(pty_pair) -> None:
    _master, slave = pty_pair
    out = Screen()
    before = termios.tcgetattr(slave)
    with anyio.move_on_after(0.3):
        await TerminalApprover(slave, out).ask("write", REQUEST)
    assert ENDING in out.getvalue()
    assert termios.tcgetattr(slave) == before


class Host:
    def __init__(self) -> None:
        self.approvers: list[Approver | None] = []

    async def list_tools(self) -> list[types.Tool]:
        return []

    async def call_tool(self, name: str, arguments: Any = None, context: CallContext = PROCESS) -> types.CallToolResult:
        self.approvers.append(context.approve)
        return types.CallToolResult(content=[])


@pytest.mark.anyio
async def test_json_output_asks_nobody_and_denies_with_the_reason() -> None:
    host = Host()
    with approving_tools(host, io.StringIO(), json_output=True) as tools:
        assert isinstance(tools, ApprovingTools)
        await tools.call_tool("write", {})
    approve = host.approvers[0]
    assert approve is not None
    with pytest.raises(PathDeniedError, match=r"outside the writable roots.*not asked: --json asks nobody"):
        await approve(REQUEST)
