"""Shared by the agent CLI tests: a scripted fake provider on 127.0.0.1 and subprocess helpers.

The fake answers each request with the next canned `Reply` (the last one repeats): a provider's
own error body, retry hints, a broken or truncated body, or a stall until released.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from waits import until_sync

KEYS = {
    "openai": "OPENAI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "ollama": "OLLAMA_API_KEY",
}
BASE_PATHS = {"openai": "/v1", "openrouter": "/api/v1"}


def error_body(provider: str, status: int, kind: str, message: str) -> dict[str, Any]:
    """Each provider's documented error shape (PROVIDERS.md §8)."""
    if provider == "openai":
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    if provider == "openrouter":
        return {"error": {"code": status, "message": message, "metadata": {}}}
    if provider == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}
    if provider == "gemini":
        return {"error": {"code": status, "message": message, "status": kind}}
    return {"error": message}


def answer(provider: str, text: str) -> dict[str, Any]:
    if provider in ("openai", "openrouter"):
        message = {"role": "assistant", "content": text}
        return {"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": {}}
    if provider == "anthropic":
        return {"type": "message", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
    if provider == "gemini":
        return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}]}
    return {"message": {"role": "assistant", "content": text}, "done": True, "done_reason": "stop"}


def bash_call(provider: str, command: str) -> dict[str, Any]:
    arguments = {"command": command}
    if provider == "anthropic":
        block = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": arguments}
        return {"type": "message", "content": [block], "stop_reason": "tool_use"}
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(arguments)}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | None = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict[str, str])
    truncate: bool = False
    stall: bool = False


@dataclass
class Fake:
    url: str
    replies: list[Reply]
    bodies: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    got_request: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


def start_fake(servers: list[tuple[ThreadingHTTPServer, Fake]], provider: str, replies: list[Reply]) -> Fake:
    """Start a fake for `provider` answering with `replies`; stop it with `stop_fakes(servers)`."""
    fake = Fake("", replies)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            fake.bodies.append(json.loads(self.rfile.read(length) or b"{}"))
            reply = fake.replies[min(len(fake.bodies), len(fake.replies)) - 1]
            fake.got_request.set()
            if reply.stall:
                fake.release.wait(30)
                return
            payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload) + (50 if reply.truncate else 0)))
            self.end_headers()
            self.wfile.write(payload)
            if reply.truncate:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    servers.append((server, fake))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}{BASE_PATHS.get(provider, '')}"
    return fake


def stop_fakes(servers: list[tuple[ThreadingHTTPServer, Fake]]) -> None:
    for server, fake in servers:
        fake.release.set()
        server.shutdown()
        server.server_close()


def argv_env(tmp_path: Path, provider: str, base_url: str, prompt: str) -> tuple[list[str], dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = {json.dumps(str(workspace))}\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OMEGA_")}
    env.update({"OMEGA_HOME": str(tmp_path / "home"), KEYS[provider]: "test-key"})
    argv = [sys.executable, "-m", "omega_mcp", "agent", prompt, "--provider", provider, "--model", "m"]
    return [*argv, "--base-url", base_url, "--config", str(config)], env


def run_cli(tmp_path: Path, provider: str, base_url: str, prompt: str = "hi ü") -> subprocess.CompletedProcess[str]:
    argv, env = argv_env(tmp_path, provider, base_url, prompt)
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL
    )


def _root_warning(line: str) -> bool:
    """omega's one warning when it runs as root (as CI does): not part of what these tests look at."""
    return line.startswith("omega-mcp: warning: running as root:")


def without_root_warning(stderr: str) -> list[str]:
    """The lines of `stderr` but the root warning."""
    return [line for line in stderr.strip().splitlines() if not _root_warning(line)]


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if "WARNING" not in line and not _root_warning(line)]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("omega-mcp agent: ")
    return lines[0]


def wait_for(predicate: Callable[[], bool], seconds: float = 20) -> None:
    until_sync(predicate, "the condition", seconds, interval=0.05)


def processes_with(marker: str) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
