"""`omega-mcp agent` end to end for issue 14: streaming, the usage line, `--model auto`, the default
system prompt and context overflow, with the real CLI in a subprocess against a fake OpenAI-compatible
server on 127.0.0.1.

The fake answers streamed requests (`"stream": true`) with chat.completion.chunk SSE events and can
hold a stream half sent until the test releases it, so the test sees the text on omega's stdout
while the turn is still open.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agent_cli_support import without_root_warning

from omega_mcp.agent.routing import CLASSIFIER_SYSTEM

USAGE = re.compile(r"omega-mcp agent: (\d+) turns?, ([\d,]+) in( \((.*)\))? / ([\d,]+) out, \d+\.\d s")
BASH = {"command": "echo from-bash"}


@dataclass
class Turn:
    """One answer: text (sent in `pieces` when streamed), an optional bash call, or an HTTP error."""

    pieces: tuple[str, ...] = ()
    bash: bool = False
    status: int = 200
    error: dict[str, Any] | None = None
    hold_after: int | None = None  # streamed: wait for `release` after this many pieces


@dataclass
class FakeOpenAI:
    turns: list[Turn]
    bodies: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def next_turn(self, body: dict[str, Any]) -> Turn:
        self.bodies.append(body)
        if "tools" not in body and body["messages"][0]["content"] == CLASSIFIER_SYSTEM:
            return Turn(("simple",))
        return self.turns.pop(0)


def _message(turn: Turn, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(turn.pieces) or None}
    if turn.bash:
        function = {"name": "bash", "arguments": json.dumps(BASH)}
        message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": function}]
    return message


def _chunks(turn: Turn, number: int) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": piece}}]} for piece in turn.pieces
    ]
    if turn.bash:
        function = {"name": "bash", "arguments": json.dumps(BASH)}
        call = {"index": 0, "id": f"call_{number}", "type": "function", "function": function}
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    finish = "tool_calls" if turn.bash else "stop"
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
    return chunks


@pytest.fixture
def fake() -> Iterator[Callable[[list[Turn]], FakeOpenAI]]:
    servers: list[tuple[ThreadingHTTPServer, FakeOpenAI]] = []

    def start(turns: list[Turn]) -> FakeOpenAI:
        model = FakeOpenAI(turns)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
                turn = model.next_turn(body)
                number = len(model.bodies)
                if turn.error is not None or not body.get("stream"):
                    data = turn.error or {
                        "choices": [{"index": 0, "finish_reason": "stop", "message": _message(turn, number)}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
                    }
                    payload = json.dumps(data).encode()
                    self.send_response(turn.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for sent, chunk in enumerate(_chunks(turn, number)):
                    if turn.hold_after is not None and sent == turn.hold_after:
                        model.release.wait(30)
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                return None

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        servers.append((server, model))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        model.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        return model

    yield start
    for server, model in servers:
        model.release.set()
        server.shutdown()
        server.server_close()


def command(tmp_path: Path, url: str, *extra: str, agent: str = "") -> tuple[list[str], dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    text = f'[sandbox]\nmode = "rwx"\nworkspace = {json.dumps(str(workspace))}\n'
    config.write_text(text + (f"[agent]\n{agent}\n" if agent else ""), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OMEGA_")}
    env.update({"OMEGA_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": "test-key"})
    argv = [sys.executable, "-m", "omega_mcp", "agent", "What does bash say?", "--provider", "openai"]
    return [*argv, "--base-url", url, "--config", str(config), *extra], env


def run(tmp_path: Path, url: str, *extra: str, agent: str = "") -> subprocess.CompletedProcess[str]:
    argv, env = command(tmp_path, url, *extra, agent=agent)
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL
    )


def test_streamed_text_is_on_stdout_while_the_turn_is_still_open(tmp_path: Path, fake) -> None:
    model = fake([Turn(("Checking.",), bash=True), Turn(("The answer ", "is here."), hold_after=1)])
    argv, env = command(tmp_path, model.url, "--model", "m")
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stdout is not None
        seen = b""
        while b"The answer " not in seen:
            ready, _, _ = select.select([process.stdout], [], [], 30)
            assert ready, f"no streamed text within 30 s; stdout so far: {seen!r}"
            piece = os.read(process.stdout.fileno(), 4096)
            assert piece, f"stdout closed early: {seen!r}"
            seen += piece
        assert b"is here." not in seen  # the rest is still held by the fake
        model.release.set()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert (seen + out).decode() == "Checking.\nThe answer is here.\n"
    lines = without_root_warning(err.decode())
    assert lines[0] == '[tool] bash {"command": "echo from-bash"}'
    assert lines[1] == "[result] bash: from-bash"
    assert USAGE.fullmatch(lines[-1]) and len(lines) == 3
    assert all(body.get("stream") for body in model.bodies)


def test_no_stream_prints_the_final_answer_only_and_the_usage_line(tmp_path: Path, fake) -> None:
    model = fake([Turn(("Checking.",), bash=True), Turn(("The answer is here.",))])
    done = run(tmp_path, model.url, "--model", "m", "--no-stream")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "The answer is here.\n"
    lines = without_root_warning(done.stderr)
    assert lines[:2] == ["Checking.", '[tool] bash {"command": "echo from-bash"}']
    found = USAGE.fullmatch(lines[-1])
    assert found is not None and found.group(1, 2, 5) == ("2", "20", "4")
    assert not any(body.get("stream") for body in model.bodies)


def test_model_auto_classifies_on_model_fast_without_tools_and_reports_the_route(tmp_path: Path, fake) -> None:
    model = fake([Turn(("The answer is here.",))])
    agent = 'model_fast = "fast-m"\nmodel_complex = "big-m"'
    done = run(tmp_path, model.url, "--model", "auto", "--json", agent=agent)
    assert done.returncode == 0, done.stderr
    classify, loop = model.bodies
    assert classify["model"] == "fast-m" and "tools" not in classify and not classify.get("stream")
    assert loop["model"] == "fast-m" and loop["tools"]
    data = json.loads(done.stdout)
    assert (data["model"], data["route"]) == ("fast-m", {"tier": "fast", "fallback": False})
    assert data["turns"] == 1 and data["usage"]["input_tokens"] == 20
    lines = without_root_warning(done.stderr)
    assert lines[0] == "omega-mcp agent: routed to model_fast (fast-m): the request looks simple"
    assert USAGE.fullmatch(lines[-1]) and lines[-1].startswith("omega-mcp agent: 1 turn, 20 in / 4 out")


def test_model_auto_without_the_two_models_exits_2(tmp_path: Path, fake) -> None:
    model = fake([Turn(("never",))])
    done = run(tmp_path, model.url, "--model", "auto")
    assert done.returncode == 2 and done.stdout == "" and model.bodies == []
    assert without_root_warning(done.stderr) == [
        "omega-mcp agent: --model: auto needs model_fast and model_complex in [agent] "
        "(model_fast and model_complex not set)"
    ]


def test_the_default_system_prompt_describes_the_configured_sandbox(tmp_path: Path, fake) -> None:
    model = fake([Turn(("Checking.",), bash=True), Turn(("ok",))])
    done = run(tmp_path, model.url, "--model", "m", "--no-stream", agent='system_append = "Reply in haiku."')
    assert done.returncode == 0, done.stderr
    systems = [body["messages"][0] for body in model.bodies]
    assert systems[0] == systems[1] and systems[0]["role"] in ("system", "developer")
    text = systems[0]["content"]
    assert f"Workspace: {tmp_path / 'ws'}." in text and "Sandbox mode: rwx." in text
    assert "bash has network access." in text and text.endswith("Reply in haiku.")


def test_a_context_overflow_elides_the_tool_result_and_retries(tmp_path: Path, fake) -> None:
    overflow = {
        "error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages resulted "
            "in 130000 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    model = fake([Turn(("Checking.",), bash=True), Turn(status=400, error=overflow), Turn(("fits",))])
    done = run(tmp_path, model.url, "--model", "m", "--no-stream")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "fits\n"
    assert (
        "omega-mcp agent: the conversation exceeded the model's context window: elided 1 older tool result "
        "(10 characters); retrying" in done.stderr
    )
    tool = [m["content"] for m in model.bodies[-1]["messages"] if m["role"] == "tool"]
    assert tool == ["[elided: output of bash, 10 characters, to fit the context window]"]


def test_a_second_context_overflow_exits_1_with_a_clear_message(tmp_path: Path, fake) -> None:
    overflow = {"error": {"message": "prompt is too long", "type": "invalid_request_error"}}
    model = fake([Turn(("Checking.",), bash=True), Turn(status=400, error=overflow), Turn(status=400, error=overflow)])
    done = run(tmp_path, model.url, "--model", "m", "--no-stream")
    assert done.returncode == 1 and done.stdout == ""
    last = without_root_warning(done.stderr)[-1]
    assert last.startswith("omega-mcp agent: the conversation does not fit the model's context window even with 1")
    assert "prompt is too long" in last and "Traceback" not in done.stderr
