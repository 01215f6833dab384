"""`omega-mcp agent` without PROMPT on a terminal: the real CLI on a pseudo-terminal, a fake model on 127.0.0.1.

Two prompts share one conversation; Ctrl-C during a turn cancels it (a stalled request, a running
`bash` whose `sleep` must not survive) and the conversation goes on as it was; Ctrl-C at the prompt
leaves with 130, `/exit` and Ctrl-D with 0; an empty line is ignored. Without a terminal the
prompt comes from stdin.
"""

from __future__ import annotations

import json
import termios
import uuid
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agent_cli_support import processes_with
from session_support import KEY, Fake, Terminal, cli, last_user_text, run, start_fake, stop_fakes, wait_until


@pytest.fixture
def fake() -> Iterator[Callable[..., Fake]]:
    servers: list[tuple[ThreadingHTTPServer, Fake]] = []
    yield lambda wire="openai": start_fake(servers, wire)
    stop_fakes(servers)


@pytest.fixture
def terminals() -> Iterator[Callable[[list[str], dict[str, str], Path], Terminal]]:
    opened: list[Terminal] = []

    def open_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> Terminal:
        opened.append(Terminal(argv, env, cwd))
        return opened[-1]

    yield open_terminal
    for terminal in opened:
        terminal.close()


def saved_lines(tmp_path: Path) -> list[dict[str, Any]]:
    files = list((tmp_path / "home" / "sessions").glob("*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text(encoding="utf-8").splitlines()]


def conversation(body: dict[str, Any]) -> list[tuple[str, object]]:
    """A request's messages without the system prompt, as (role, content)."""
    messages = body["messages"]
    return [(m["role"], m["content"]) for m in messages if m["role"] != "system"]


def test_two_prompts_share_the_conversation_and_ctrl_d_leaves_with_0(tmp_path, fake, terminals) -> None:
    model = fake()
    term = terminals(*cli(tmp_path, model), tmp_path)
    term.expect("Ctrl-D or /exit leaves")
    term.prompt()
    term.send("first question\n")
    term.expect("echo: first question")
    term.prompt()
    term.send("   \n")  # an empty line is ignored: no request
    term.prompt()
    term.send("second question\n")
    term.expect("echo: second question")
    term.prompt()
    term.send(b"\x04")
    assert term.wait_exit() == 0, term.screen
    assert len(model.bodies) == 2
    assert conversation(model.bodies[1]) == [
        ("user", "first question"),
        ("assistant", "echo: first question"),
        ("user", "second question"),
    ]
    assert "session" in term.after and "saved" in term.after
    lines = saved_lines(tmp_path)
    assert lines[0]["first_prompt"] == "first question" and lines[0]["provider"] == "openai"
    assert [line["role"] for line in lines[1:]] == ["user", "assistant", "user", "assistant"]


def test_exit_leaves_with_0(tmp_path, fake, terminals) -> None:
    term = terminals(*cli(tmp_path, fake()), tmp_path)
    term.prompt()
    term.send("/exit\n")
    assert term.wait_exit() == 0, term.screen


def test_ctrl_c_at_the_prompt_leaves_with_130_and_the_terminal_as_it_was(tmp_path, fake, terminals) -> None:
    term = terminals(*cli(tmp_path, fake()), tmp_path)
    term.prompt()
    term.send(b"\x03")
    assert term.wait_exit() == 130, term.screen
    assert "Traceback" not in term.screen
    lflag = termios.tcgetattr(term.master)[3]
    assert lflag & termios.ICANON and lflag & termios.ECHO and lflag & termios.ISIG


def test_ctrl_c_cancels_a_running_bash_and_its_sleep_then_the_conversation_goes_on(tmp_path, fake, terminals) -> None:
    model = fake()
    marker = f"300.{uuid.uuid4().int % 10**9:09d}"
    term = terminals(*cli(tmp_path, model), tmp_path)
    term.prompt()
    term.send("hello\n")
    term.expect("echo: hello")
    term.prompt()
    term.send(f"bash touch started && sleep {marker}\n")
    wait_until(lambda: (tmp_path / "ws" / "started").exists() and bool(processes_with(marker)), what="the sleep")
    term.send(b"\x03")
    term.expect("cancelled")
    term.prompt()
    wait_until(lambda: not processes_with(marker), seconds=10, what="the sleep to die")
    assert term.process.poll() is None
    term.send("after\n")
    term.expect("echo: after")
    term.prompt()
    # The cancelled turn is gone: the next request carries the conversation from before it.
    assert conversation(model.bodies[-1]) == [("user", "hello"), ("assistant", "echo: hello"), ("user", "after")]
    term.send("/exit\n")
    assert term.wait_exit() == 0, term.screen
    messages = saved_lines(tmp_path)[1:]
    assert [m["content"] for m in messages if m["role"] == "user"] == ["hello", "after"]
    assert all(part["type"] != "tool_call" for m in messages if m["role"] == "assistant" for part in m["content"])


def test_ctrl_c_cancels_a_request_the_model_never_answers(tmp_path, fake, terminals) -> None:
    model = fake()
    term = terminals(*cli(tmp_path, model), tmp_path)
    term.prompt()
    term.send("stall\n")
    model.wait_requests(1)
    term.send(b"\x03")
    term.expect("cancelled")
    term.prompt()
    term.send("next\n")
    term.expect("echo: next")
    assert conversation(model.bodies[-1]) == [("user", "next")]
    term.prompt()
    term.send(b"\x04")
    assert term.wait_exit() == 0, term.screen


def test_resumed_conversation_continues_the_saved_one(tmp_path, fake, terminals) -> None:
    model = fake()
    argv, env = cli(tmp_path, model, "one-shot question")
    assert run(argv, env, tmp_path).returncode == 0
    term = terminals(*cli(tmp_path, model, "--continue"), tmp_path)
    term.expect("continuing session")
    term.prompt()
    term.send("and then?\n")
    term.expect("echo: and then?")
    term.prompt()
    term.send(b"\x04")
    assert term.wait_exit() == 0, term.screen
    assert conversation(model.bodies[-1]) == [
        ("user", "one-shot question"),
        ("assistant", "echo: one-shot question"),
        ("user", "and then?"),
    ]
    assert len(saved_lines(tmp_path)) == 5


def test_without_a_terminal_the_prompt_comes_from_stdin(tmp_path, fake) -> None:
    model = fake()
    argv, env = cli(tmp_path, model)
    done = run(argv, env, tmp_path, stdin="piped question\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "echo: piped question\n"
    assert last_user_text(model.bodies[0]) == "piped question"
    assert KEY not in "".join(p.read_text() for p in (tmp_path / "home" / "sessions").iterdir())


def test_without_a_terminal_and_nothing_on_stdin_it_is_a_usage_error(tmp_path, fake) -> None:
    model = fake()
    argv, env = cli(tmp_path, model)
    done = run(argv, env, tmp_path)
    assert done.returncode == 2
    assert "no PROMPT" in done.stderr and "Traceback" not in done.stderr
    assert model.bodies == []


def test_json_without_a_prompt_on_a_terminal_is_a_usage_error(tmp_path, fake, terminals) -> None:
    argv, env = cli(tmp_path, fake(), "--json")
    term = terminals(argv, env, tmp_path)
    assert term.wait_exit() == 2
    assert "--json needs a PROMPT" in term.screen
