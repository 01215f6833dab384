"""`omega-mcp agent` shows control characters, never lets them reach the terminal as control sequences.

The attack: a file (and a command's output, and the model's own answer, and a provider's error)
holds escape sequences: `ESC[2K ESC[1A` erases the `[tool]` line above, `ESC]52;c;...BEL` writes
the clipboard, a lone CR rewrites the line. Before, `agent` printed tool results and answers raw to
stdout and stderr; now every one of them arrives escaped (`\\x1b`), streamed or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

_ESCAPES = "\x1b[2K\x1b[1A\x1b]52;c;cHduZWQ=\x07\rFAKE\x9b31m\u202e"


def _tool_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}


def _answer(text: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": {}}


@pytest.fixture
def provider() -> Iterator[tuple[str, list[tuple[int, dict[str, Any]]]]]:
    """A fake OpenAI endpoint answering with the list's replies in order (the last one repeats)."""
    replies: list[tuple[int, dict[str, Any]]] = []
    seen: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            seen.append(1)
            status, body = replies[min(len(seen), len(replies)) - 1]
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", replies
    finally:
        server.shutdown()
        server.server_close()


def _agent(tmp_path: Path, url: str, *flags: str) -> subprocess.CompletedProcess[bytes]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "notes.txt").write_text(f"title{_ESCAPES}end\n")
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = {json.dumps(str(ws))}\n')
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("OMEGA_")}
    env.update({"OMEGA_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": "test-key"})
    argv = [sys.executable, "-m", "omega_mcp", "agent", "look", "--provider", "openai", "--model", "m"]
    return subprocess.run(
        [*argv, "--base-url", url, "--config", str(config), *flags],
        capture_output=True, env=env, cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _assert_shown_not_sent(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in text, (raw, text)
    assert "\r" not in text.replace("\r\n", ""), text


@pytest.mark.parametrize("stream", [True, False])
def test_escape_sequences_from_tools_and_the_model_are_shown_escaped(
    tmp_path: Path, provider: tuple[str, list[tuple[int, dict[str, Any]]]], stream: bool
) -> None:
    url, replies = provider
    replies += [
        (200, _tool_call("read", {"file_path": "notes.txt"}, "c1")),
        (200, _tool_call("bash", {"command": "printf 'out\\033]52;c;eA==\\007\\033[2K\\n'"}, "c2")),
        (200, _tool_call(f"no{_ESCAPES}such", {}, "c3")),
        (200, _answer(f"done{_ESCAPES}")),
    ]
    done = _agent(tmp_path, url, *([] if stream else ["--no-stream"]))
    assert done.returncode == 0, done.stderr
    _assert_shown_not_sent(done.stdout)
    _assert_shown_not_sent(done.stderr)
    assert b"\\x1b]52;c;cHduZWQ=\\x07" in done.stderr  # the read result's escapes, visible on its tool line
    assert b"done\\x1b[2K" in done.stdout


def test_a_providers_error_message_is_shown_escaped(
    tmp_path: Path, provider: tuple[str, list[tuple[int, dict[str, Any]]]]
) -> None:
    url, replies = provider
    replies.append((401, {"error": {"message": f"bad key{_ESCAPES}", "type": "invalid_api_key"}}))
    done = _agent(tmp_path, url)
    assert done.returncode == 1
    _assert_shown_not_sent(done.stderr)
    assert b"bad key\\x1b[2K" in done.stderr


def test_json_output_stays_json_with_the_controls_escaped(
    tmp_path: Path, provider: tuple[str, list[tuple[int, dict[str, Any]]]]
) -> None:
    url, replies = provider
    replies.append((200, _answer(f"done{_ESCAPES}")))
    done = _agent(tmp_path, url, "--json")
    assert done.returncode == 0, done.stderr
    _assert_shown_not_sent(done.stdout)
    assert json.loads(done.stdout)["output"] == f"done{_ESCAPES}"
