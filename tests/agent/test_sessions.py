"""Saved sessions: every run is kept under `$OMEGA_HOME/sessions/` and can be continued unchanged.

The message records round-trip exactly (raw turns, thinking signatures, images); the store keeps
its files private, appends whole turns, cuts a broken tail, refuses path tricks as ids. Through
the real CLI against a fake model: a one-shot run is saved, `--continue` and `--resume ID` send
the earlier messages byte for byte, `--sessions` lists them newest first, an unknown id exits 2,
and the API key is in no file.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from session_support import KEY, Fake, Terminal, cli, run, start_fake, stop_fakes

from omega_mcp.agent.sessions import SessionRecorder, SessionStore, format_sessions
from omega_mcp.errors import ConfigError
from omega_mcp.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
    message_from_json,
    message_to_json,
    message_to_record,
)

CALL = AssistantMessage(
    (
        ThinkingPart("plan", signature="c2ln"),
        ThinkingPart("", redacted_data="cmVk"),
        TextPart("calling"),
        ToolCallPart("toolu_1", "bash", {"command": "ls", "n": [1, 2.5, None, True]}),
        ToolCallPart(None, "write", None, arguments_error="not JSON"),
    ),
    raw={"role": "assistant", "content": [{"type": "text", "text": "calling", "extra": {"x": 1}}]},
    raw_format="anthropic",
)
RESULTS = ToolResultsMessage(
    (
        ToolResult("toolu_1", "bash", (TextPart("a\nb \udcff"), ImagePart("image/png", "iVBORw0K"))),
        ToolResult(None, "write", (), is_error=True),
    )
)
CONVERSATION: tuple[Message, ...] = (
    UserMessage("héllo"),
    CALL,
    RESULTS,
    AssistantMessage((TextPart("done"),), raw={"content": "done"}, raw_format="openai"),
)


def test_every_message_round_trips_exactly() -> None:
    for message in CONVERSATION:
        record = json.loads(json.dumps(message_to_record(message)))
        assert message_from_json(record) == message


def test_the_lossy_json_view_still_reads_back() -> None:
    assert message_from_json(message_to_json(UserMessage("hi"))) == UserMessage("hi")
    back = message_from_json(message_to_json(RESULTS))
    assert isinstance(back, ToolResultsMessage)
    assert back.results[0].text() == RESULTS.results[0].text()
    assert message_from_json(message_to_json(CALL)).parts[3] == CALL.parts[3]  # pyright: ignore[reportAttributeAccessIssue]


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"role": "system", "content": "x"},
        {"role": "user", "content": 3},
        {"role": "assistant", "content": "text"},
        {"role": "assistant", "content": [{"type": "image"}]},
        {"role": "assistant", "content": [], "raw": [1]},
        {"role": "assistant", "content": [{"type": "tool_call", "name": "x", "arguments": [1]}]},
        {"role": "tool", "content": [{"type": "tool_result", "name": "x", "content": [{"type": "audio"}]}]},
    ],
)
def test_what_is_not_a_message_is_a_value_error(bad: Any) -> None:
    with pytest.raises(ValueError):
        message_from_json(bad)


def new_session(store: SessionStore, prompt: str = "first") -> Any:
    return store.create(provider="anthropic", model="m", first_prompt=prompt, workspace="/ws")


def test_files_are_private_and_hold_the_header_then_the_messages(tmp_path: Path) -> None:
    os.umask(0o002)
    try:
        store = SessionStore(tmp_path)
        session = new_session(store)
        store.append(session, CONVERSATION)
    finally:
        os.umask(0o022)
    assert stat.S_IMODE(os.stat(store.directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(session.path).st_mode) == 0o600
    lines = session.path.read_bytes().splitlines()
    header = json.loads(lines[0])
    assert header["id"] == session.id and header["first_prompt"] == "first" and header["workspace"] == "/ws"
    assert len(lines) == 1 + len(CONVERSATION)
    assert store.load(store.find(session.id)) == CONVERSATION


def test_a_loose_directory_is_made_private(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir(mode=0o755)
    new_session(SessionStore(tmp_path))
    assert stat.S_IMODE(os.stat(tmp_path / "sessions").st_mode) == 0o700


def test_a_cut_off_last_line_and_a_dangling_tool_call_are_left_out(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = new_session(store)
    store.append(session, CONVERSATION)
    store.append(session, (UserMessage("next"), CALL))  # a turn that never got its results
    with session.path.open("ab") as file:
        file.write(b'{"role":"tool","cont')  # a write cut short
    assert store.load(session) == CONVERSATION


def test_a_broken_line_in_the_middle_is_a_config_error(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = new_session(store)
    with session.path.open("ab") as file:
        file.write(b"not json\n")
    store.append(session, CONVERSATION)
    with pytest.raises(ConfigError, match="line 2 is not a message"):
        store.load(session)


@pytest.mark.parametrize("bad", ["../sessions/x", "/etc/passwd", "ABCDEF12", "abcdef1", "abcdef123", "", "..", "a/b"])
def test_ids_that_are_not_ours_are_refused_before_touching_a_file(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="not a session id"):
        SessionStore(tmp_path).find(bad)


def test_an_unknown_id_names_the_listing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--sessions"):
        SessionStore(tmp_path).find("0123abcd")


def test_a_symlinked_session_file_is_not_followed(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    real = new_session(store)
    os.symlink(real.path, store.directory / "0123abcd.jsonl")
    with pytest.raises(ConfigError):
        store.find("0123abcd")


def test_the_listing_is_newest_first_and_skips_foreign_files(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    old = new_session(store, "the old one")
    recent = new_session(store, "the new one\nwith two lines " + "x" * 100)
    os.utime(old.path, (time.time() - 3600, time.time() - 3600))
    (store.directory / "notes.txt").write_text("hi")
    (store.directory / "fedcba98.jsonl").write_text("not a session\n")
    listed = store.saved()
    assert [info.id for info in listed] == [recent.id, old.id]
    assert store.latest() == listed[0]
    lines = format_sessions(listed)
    assert lines[0].startswith(f"{recent.id}  ") and "anthropic  m  the new one with two lines x" in lines[0]
    assert lines[0].endswith("…") and "\n" not in lines[0]


def test_an_elided_history_replaces_the_file(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = new_session(store)
    store.save(session, (), CONVERSATION)
    stub = ToolResultsMessage(tuple(ToolResult(r.call_id, r.name, (TextPart("[elided]"),)) for r in RESULTS.results))
    elided = (*CONVERSATION[:2], stub, CONVERSATION[3], UserMessage("more"), CONVERSATION[3])
    store.save(session, CONVERSATION, elided)
    assert store.load(session) == elided
    assert stat.S_IMODE(os.stat(session.path).st_mode) == 0o600
    assert sorted(p.name for p in store.directory.iterdir()) == [session.path.name]


def test_the_recorder_creates_the_file_once_and_keeps_the_history(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    warnings: list[str] = []
    recorder = store.recorder(resume=None, continue_latest=False, workspace="/ws", warn=warnings.append)
    recorder.record("failing", provider="openai", model="m", conversation=None)
    assert recorder.session is not None and recorder.history == ()
    recorder.record("works", provider="openai", model="m", conversation=CONVERSATION)
    assert [info.id for info in store.saved()] == [recorder.session.id]
    resumed = store.recorder(resume=None, continue_latest=True, workspace="/ws", warn=warnings.append)
    assert resumed.session == store.latest() and resumed.history == CONVERSATION
    assert warnings == []


def test_a_failing_save_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "sessions").write_text("a file where the directory should be")
    warnings: list[str] = []
    recorder = SessionRecorder(SessionStore(tmp_path), workspace="/ws", warn=warnings.append)
    recorder.record("a", provider="openai", model="m", conversation=CONVERSATION)
    recorder.record("b", provider="openai", model="m", conversation=CONVERSATION)
    assert len(warnings) == 1 and "cannot save the session" in warnings[0]
    assert recorder.history == CONVERSATION


def test_continue_without_any_session_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no saved session to continue"):
        SessionStore(tmp_path).recorder(resume=None, continue_latest=True, workspace="", warn=print)


# -- through the CLI -------------------------------------------------------------------------


@pytest.fixture
def fakes() -> Iterator[Callable[[], Fake]]:
    servers: list[tuple[ThreadingHTTPServer, Fake]] = []
    yield lambda: start_fake(servers, "anthropic")
    stop_fakes(servers)


@pytest.fixture
def fake(fakes: Callable[[], Fake]) -> Fake:
    return fakes()


def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "home" / "sessions"


@pytest.mark.e2e
def test_continue_sends_what_one_unbroken_conversation_sends(tmp_path: Path, fakes: Callable[[], Fake]) -> None:
    """The same two prompts, once in one interactive conversation and once as a run and its
    `--continue`: the request for the second prompt is the same, byte for byte (the signed
    thinking block of the first turn and Anthropic's cache breakpoints included)."""
    prompts = ("write a.txt hello", "what next?")
    unbroken = fakes()
    term = Terminal(*cli(tmp_path, unbroken), tmp_path)
    try:
        for prompt in prompts:
            term.prompt()
            term.send(prompt + "\n")
        term.expect("echo: what next?")
        term.prompt()
        term.send(b"\x04")
        assert term.wait_exit() == 0, term.screen
    finally:
        term.close()
    shutil.rmtree(sessions_dir(tmp_path))
    (tmp_path / "ws" / "a.txt").unlink()

    resumed = fakes()
    argv, env = cli(tmp_path, resumed, prompts[0])
    done = run(argv, env, tmp_path)
    assert done.returncode == 0, done.stderr
    files = list(sessions_dir(tmp_path).iterdir())
    assert len(files) == 1
    assert stat.S_IMODE(os.stat(sessions_dir(tmp_path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(files[0]).st_mode) == 0o600
    assert KEY not in files[0].read_text() and "x-api-key" not in files[0].read_text()
    argv, env = cli(tmp_path, resumed, prompts[1], "--continue")
    done = run(argv, env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(sessions_dir(tmp_path).iterdir()) == files  # continued, not copied
    assert KEY not in files[0].read_text()

    assert len(unbroken.bodies) == len(resumed.bodies) == 3
    assert json.dumps(resumed.bodies[2]) == json.dumps(unbroken.bodies[2])
    assert resumed.bodies[2]["messages"][1]["content"][0]["signature"] == "sig-1-Zm9v"
    assert "what next?" in json.dumps(resumed.bodies[2]["messages"][-1])


def flat(message: dict[str, Any]) -> tuple[str, str]:
    """(role, text) of a wire message, whatever cache breakpoints it carries."""
    content = message["content"]
    text = content if isinstance(content, str) else "".join(block.get("text", "") for block in content)
    return message["role"], text


@pytest.mark.e2e
def test_resume_by_id_and_the_listing(tmp_path: Path, fake: Fake) -> None:
    for prompt in ("first session", "second session"):
        argv, env = cli(tmp_path, fake, prompt)
        assert run(argv, env, tmp_path).returncode == 0
    listing = run(cli(tmp_path, fake, "--sessions")[0], env, tmp_path)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert len(lines) == 2 and lines[0].endswith("anthropic  m  second session")
    assert lines[1].endswith("anthropic  m  first session")
    first_id = lines[1].split()[0]

    argv, env = cli(tmp_path, fake, "more", "--resume", first_id)
    done = run(argv, env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert [flat(message) for message in fake.bodies[-1]["messages"]] == [
        ("user", "first session"),
        ("assistant", "echo: first session"),
        ("user", "more"),
    ]
    assert run(cli(tmp_path, fake, "--sessions")[0], env, tmp_path).stdout.split()[0] == first_id


@pytest.mark.parametrize("session_id", ["0123abcd", "../../servers"])
@pytest.mark.e2e
def test_an_unknown_or_tricky_id_exits_2_and_points_at_the_listing(tmp_path: Path, fake: Fake, session_id) -> None:
    argv, env = cli(tmp_path, fake, "hi", "--resume", session_id)
    done = run(argv, env, tmp_path)
    assert done.returncode == 2
    assert "--sessions" in done.stderr and "Traceback" not in done.stderr
    assert fake.bodies == []


@pytest.mark.e2e
def test_continue_and_resume_do_not_go_together(tmp_path: Path, fake: Fake) -> None:
    argv, env = cli(tmp_path, fake, "hi", "--continue", "--resume", "0123abcd")
    done = run(argv, env, tmp_path)
    assert done.returncode == 2 and "not allowed with" in done.stderr
