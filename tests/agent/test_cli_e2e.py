"""`omega-mcp agent` end to end: the real CLI in a subprocess against a fake provider on 127.0.0.1.

For each wire format a tiny threaded HTTP server plays a model that writes a file with `write`,
runs `bash`, reads the file back with `read`, and then answers quoting what the tools returned:
the answer can only be right if every call ran and every result made the round trip.
"""

from __future__ import annotations

import json
import os
import re
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

PROMPT = "Write note.txt, run bash, read it back."
CONTENT = "hello from the e2e model"

Action = tuple[str, dict[str, Any]] | str  # a tool call (name, arguments) or a final answer


def next_action(results: list[str]) -> Action:
    """The fake model's policy, driven only by the tool results it has been sent so far."""
    if len(results) == 0:
        return ("write", {"file_path": "note.txt", "content": CONTENT})
    if len(results) == 1:
        return ("bash", {"command": "wc -c < note.txt && echo ran-bash"})
    if len(results) == 2:
        return ("read", {"file_path": "note.txt"})
    return f"FILE<{results[2].strip()}> BASH<{' '.join(results[1].split())}>"


# -- per-provider wire formats for the fake -------------------------------------------------


def openai_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def openai_reply(action: Action, turn: int) -> dict[str, Any]:
    if isinstance(action, str):
        message: dict[str, Any] = {"role": "assistant", "content": action}
    else:
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": action[0], "arguments": json.dumps(action[1])},
        }
        message = {"role": "assistant", "content": f"step {turn}", "tool_calls": [call]}
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": usage}


def anthropic_results(body: dict[str, Any]) -> list[str]:
    return [
        block["content"]
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block["type"] == "tool_result"
    ]


def anthropic_reply(action: Action, turn: int) -> dict[str, Any]:
    if isinstance(action, str):
        content: list[dict[str, Any]] = [{"type": "text", "text": action}]
    else:
        content = [
            {"type": "thinking", "thinking": "plan", "signature": f"sig{turn}"},
            {"type": "tool_use", "id": f"toolu_{turn}", "name": action[0], "input": action[1]},
        ]
    stop = "end_turn" if isinstance(action, str) else "tool_use"
    return {
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }


def ollama_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def ollama_reply(action: Action, turn: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": action if isinstance(action, str) else ""}
    if not isinstance(action, str):
        message["tool_calls"] = [{"function": {"index": 0, "name": action[0], "arguments": action[1]}}]  # no id
    return {"model": "m", "message": message, "done": True, "done_reason": "stop", "eval_count": 2}


def gemini_results(body: dict[str, Any]) -> list[str]:
    return [
        part["functionResponse"]["response"].get("output", "")
        for content in body["contents"]
        for part in content["parts"]
        if "functionResponse" in part
    ]


def gemini_reply(action: Action, turn: int) -> dict[str, Any]:
    if isinstance(action, str):
        parts: list[dict[str, Any]] = [{"text": action}]
    else:
        parts = [{"functionCall": {"name": action[0], "args": action[1]}, "thoughtSignature": f"c2ln{turn}"}]
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 2}
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
        "usageMetadata": usage,
    }


@dataclass
class Wire:
    path_suffix: str
    base_path: str
    key_env: str
    results: Callable[[dict[str, Any]], list[str]]
    reply: Callable[[Action, int], dict[str, Any]]


WIRES = {
    "openai": Wire("/v1/chat/completions", "/v1", "OPENAI_API_KEY", openai_results, openai_reply),
    "openrouter": Wire("/api/v1/chat/completions", "/api/v1", "OPENROUTER_API_KEY", openai_results, openai_reply),
    "anthropic": Wire("/v1/messages", "", "ANTHROPIC_API_KEY", anthropic_results, anthropic_reply),
    "ollama": Wire("/api/chat", "", "OLLAMA_API_KEY", ollama_results, ollama_reply),
    "gemini": Wire("/v1beta/models/test-model:generateContent", "", "GEMINI_API_KEY", gemini_results, gemini_reply),
}


@dataclass
class FakeModel:
    wire: Wire
    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append((path, headers, body))
        if path != self.wire.path_suffix:
            self.errors.append(f"unexpected path {path}")
            return 404, {"error": {"message": f"no route {path}"}}
        results = self.wire.results(body)
        return 200, self.wire.reply(next_action(results), len(self.requests))


@pytest.fixture
def serve() -> Iterator[Callable[[Wire], tuple[str, FakeModel]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(wire: Wire) -> tuple[str, FakeModel]:
        model = FakeModel(wire)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                status, data = model.answer(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}{wire.base_path}", model

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run_cli(tmp_path: Path, provider: str, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = {json.dumps(str(workspace))}\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OMEGA_")}
    env.update({"OMEGA_HOME": str(tmp_path / "home"), WIRES[provider].key_env: "test-key"})
    argv = [sys.executable, "-m", "omega_mcp", "agent", PROMPT, "--provider", provider, "--model", "test-model"]
    argv += ["--base-url", base_url, "--config", str(config), *extra]
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize("provider", list(WIRES))
def test_a_model_writes_runs_bash_reads_back_and_answers(provider: str, tmp_path: Path, serve) -> None:
    base_url, model = serve(WIRES[provider])
    done = run_cli(tmp_path, provider, base_url, "--no-stream")  # the non-streamed wire format of each provider
    assert done.returncode == 0, done.stderr
    answer = re.fullmatch(r"FILE<(.*)> BASH<(.*)>\n", done.stdout, re.DOTALL)
    assert answer is not None, done.stdout
    assert CONTENT in answer.group(1)  # `read` may number its lines
    assert answer.group(2) == f"{len(CONTENT)} ran-bash"
    assert (tmp_path / "ws" / "note.txt").read_text(encoding="utf-8") == CONTENT
    assert model.errors == [] and len(model.requests) == 4
    tool_lines = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("[tool]")]
    assert tool_lines == ["write", "bash", "read"]
    assert "Traceback" not in done.stderr
    _path, headers, first = model.requests[0]
    assert "test-key" in " ".join(headers.values())
    assert {"bash", "read", "write", "edit"} <= offered_tools(provider, first)


def offered_tools(provider: str, body: dict[str, Any]) -> set[str]:
    if provider == "gemini":
        return {d["name"] for d in body["tools"][0]["functionDeclarations"]}
    if provider == "anthropic":
        return {t["name"] for t in body["tools"]}
    return {t["function"]["name"] for t in body["tools"]}


def test_json_output_and_no_tools_through_the_cli(tmp_path: Path, serve) -> None:
    base_url, model = serve(WIRES["openai"])
    done = run_cli(tmp_path, "openai", base_url, "--json", "--no-tools")
    # With no tools offered the fake still "calls" write: the loop must answer with an error result.
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["turns"] == 4 and data["usage"]["input_tokens"] == 40
    assert all("tools" not in body for _path, _headers, body in model.requests)
    tool_results = [c for m in data["messages"] if m["role"] == "tool" for c in m["content"]]
    assert tool_results and all(r["is_error"] and "No tools are available" in r["text"] for r in tool_results)
    assert not (tmp_path / "ws" / "note.txt").exists()


def test_missing_key_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "servers.toml"
    config.write_text('[sandbox]\nmode = "rwx"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OMEGA_")}
    env["OMEGA_HOME"] = str(tmp_path / "home")
    argv = [sys.executable, "-m", "omega_mcp", "agent", "hi", "--provider", "gemini", "--config", str(config)]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert without_root_warning(done.stderr) == [
        "omega-mcp agent: GEMINI_API_KEY is not set: the gemini provider needs an API key"
    ]
