"""Shared by the session, interactive and approval tests: a fake model that acts on the prompt, and a pty.

The fake speaks the OpenAI or the Anthropic wire format (non-streamed) on 127.0.0.1 and decides
each reply from the last message only: after a tool result it answers `result: <text>`; a prompt
`write PATH CONTENT` calls `write`, `bash COMMAND` calls `bash`, `stall` never answers (until the
test ends), anything else is echoed as `echo: <prompt>`. Every request body is kept.
`Terminal` runs the real CLI with a pseudo-terminal as its controlling terminal and its three
standard streams, and reads what it shows with bounded waits that fail with what was seen.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from waits import until_sync

KEY = "sk-omega-session-test-4f1c2e"
"""The API key the CLI gets: it must never show up in a saved session."""

# Makes the pty the controlling terminal of the new session, then runs the CLI (no preexec_fn).
_TAKE_TTY = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"


@dataclass
class Fake:
    url: str
    wire: str
    bodies: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    headers: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    release: threading.Event = field(default_factory=threading.Event)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_requests(self, count: int, seconds: float = 30) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.bodies) >= count, timeout=seconds):
                raise AssertionError(f"expected {count} requests, got {len(self.bodies)}: {self.bodies}")

    def record(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        with self._changed:
            self.headers.append(headers)
            self.bodies.append(body)
            self._changed.notify_all()


def last_user_text(body: dict[str, Any]) -> str | None:
    """The text of the last message when it is a plain user prompt (not a tool result)."""
    last = body["messages"][-1]
    if last["role"] != "user":
        return None
    content = last["content"]
    if isinstance(content, str):
        return content
    if all(block.get("type") == "text" for block in content):  # Anthropic, with a cache breakpoint
        return "".join(block["text"] for block in content)
    return None


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool-result texts of a request body, in order (OpenAI and Anthropic formats)."""
    found: list[str] = []
    for message in body["messages"]:
        if message["role"] == "tool":
            found.append(message["content"])
        elif message["role"] == "user" and isinstance(message["content"], list):
            found += [b["content"] for b in message["content"] if b.get("type") == "tool_result"]
    return found


def _openai(turn: int, text: str | None, call: tuple[str, dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call is not None:
        function = {"name": call[0], "arguments": json.dumps(call[1])}
        message["tool_calls"] = [{"id": f"call_{turn}", "type": "function", "function": function}]
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": usage}


def _anthropic(turn: int, text: str | None, call: tuple[str, dict[str, Any]] | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if call is not None:
        content.append({"type": "thinking", "thinking": f"plan {turn}", "signature": f"sig-{turn}-Zm9v"})
        content.append({"type": "tool_use", "id": f"toolu_{turn}", "name": call[0], "input": call[1]})
    else:
        content.append({"type": "text", "text": text})
    stop = "tool_use" if call is not None else "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 2}
    return {"type": "message", "role": "assistant", "content": content, "stop_reason": stop, "usage": usage}


def decide(body: dict[str, Any]) -> tuple[str | None, tuple[str, dict[str, Any]] | None] | None:
    """The fake model's next move: (text, None), (None, (tool, arguments)), or None to stall."""
    prompt = last_user_text(body)
    if prompt is None:
        return f"result: {tool_results(body)[-1]}", None
    if prompt.startswith("write "):
        _, path, content = prompt.split(" ", 2)
        return None, ("write", {"file_path": path, "content": content})
    if prompt.startswith("bash "):
        return None, ("bash", {"command": prompt.removeprefix("bash ")})
    if prompt == "stall":
        return None
    return f"echo: {prompt}", None


def start_fake(servers: list[tuple[ThreadingHTTPServer, Fake]], wire: str = "openai") -> Fake:
    """A fake model for `wire` ("openai" or "anthropic"); stop it with `stop_fakes(servers)`."""
    fake = Fake("", wire)
    reply = _openai if wire == "openai" else _anthropic

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            fake.record({k.lower(): v for k, v in self.headers.items()}, body)
            move = decide(body)
            if move is None:
                fake.release.wait(60)
                return
            payload = json.dumps(reply(len(fake.bodies), *move)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    servers.append((server, fake))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}" + ("/v1" if wire == "openai" else "")
    return fake


def stop_fakes(servers: list[tuple[ThreadingHTTPServer, Fake]]) -> None:
    for server, fake in servers:
        fake.release.set()
        server.shutdown()
        server.server_close()


def cli(
    tmp_path: Path, fake: Fake, *extra: str, mode: str = "rwx", on_denied: str = "deny"
) -> tuple[list[str], dict[str, str]]:
    """argv and environment for `omega-mcp agent` against `fake`, with `extra` arguments (PROMPT, flags)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[sandbox]\nmode = "{mode}"\non_denied = "{on_denied}"\nworkspace = {json.dumps(str(workspace))}\n',
        encoding="utf-8",
    )
    key_env = "OPENAI_API_KEY" if fake.wire == "openai" else "ANTHROPIC_API_KEY"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OMEGA_")}
    env.update({"OMEGA_HOME": str(tmp_path / "home"), key_env: KEY, "TERM": "dumb"})
    argv = [sys.executable, "-m", "omega_mcp", "agent", *extra, "--provider", fake.wire, "--model", "m"]
    return [*argv, "--base-url", fake.url, "--config", str(config), "--no-stream"], env


def run(argv: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI without a terminal (pipes, a new session: no /dev/tty either), bounded."""
    return subprocess.run(
        argv,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=90,
        start_new_session=True,
    )


class Terminal:
    """The CLI on a pseudo-terminal: `send` types, `expect` waits (bounded) for text on the screen."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, b"\x18\x00\x78\x00\x00\x00\x00\x00")  # 24 x 120
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _TAKE_TTY, argv[0], *argv[1:]],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        finally:
            os.close(slave)
        self._raw = b""
        self.screen = ""
        self._mark = 0

    def _read(self, until: float) -> bool:
        """Read what is available before `until`; False once the terminal is closed (the CLI exited)."""
        ready, _, _ = select.select([self.master], [], [], max(0.0, min(0.2, until - time.monotonic())))
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: no process has the terminal open any more
            return False
        if not data:
            return False
        self._raw += data  # decoded whole each time: a character or a CR LF may span two reads
        self.screen = self._raw.decode("utf-8", "replace").replace("\r\n", "\n")
        return True

    def expect(self, text: str, seconds: float = 30) -> str:
        """Wait until `text` appears after what earlier calls matched; returns the screen up to it."""
        deadline = time.monotonic() + seconds
        while (found := self.screen.find(text, self._mark)) < 0:
            if time.monotonic() > deadline or not self._read(deadline):
                raise AssertionError(f"{text!r} did not appear; the screen after the last match:\n{self.after}")
        start, self._mark = self._mark, found + len(text)
        return self.screen[start : self._mark]

    @property
    def after(self) -> str:
        return self.screen[self._mark :]

    def send(self, text: str | bytes) -> None:
        os.write(self.master, text.encode() if isinstance(text, str) else text)

    def prompt(self, seconds: float = 30) -> str:
        """Wait for the next prompt (`> ` at the start of a line)."""
        return self.expect("\n> ", seconds)

    def wait_exit(self, seconds: float = 30) -> int:
        deadline = time.monotonic() + seconds
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the CLI did not exit; the screen after the last match:\n{self.after}")
            self._read(deadline)
        while self._read(time.monotonic() + 0.2) and self.process.poll() is None:
            pass
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        os.close(self.master)


def wait_until(predicate: Callable[[], bool], seconds: float = 20, what: str = "condition") -> None:
    until_sync(predicate, what, seconds, interval=0.05)
