"""A line nobody can decode never silences omega: the client's gets a parse error, a server's is dropped.

One real `omega-mcp serve` per test, spoken to over its stdin and stdout as raw lines. Before, a
100,000-deep nested JSON line killed the stdin reader (an uncaught RecursionError in the line
decoder, inside the readiness callback): the process lived on and never answered again. Now every
line that is no JSON object (nested too deeply, bad UTF-8, bad JSON, an array) is answered with a
JSON-RPC parse error (-32700, id null) and the next request is answered as ever, with and without a
downstream (the relay reads the client's pipe then). A downstream that writes such lines
(tests/fixtures/hostile_server.py, `garble`) has them dropped with a warning naming the server; its
call and the calls after it are answered.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

HOSTILE = Path(__file__).parents[1] / "fixtures" / "hostile_server.py"
_WAIT_SECONDS = 60.0  # generous: a busy 2-core machine starts omega and its server slowly
_GARBLED = {
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "utf8": b'{"jsonrpc": "2.0", "method": "\xff"}',
    "json": b'{"jsonrpc": "2.0", "id": ',
    "array": b"[1, 2, 3]",
}


class _Omega:
    """`omega-mcp serve` as a subprocess, its answers read line by line (every read bounded)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._pending = b""

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + _WAIT_SECONDS
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            assert left > 0, "omega answered nothing in time"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                assert chunk, f"omega closed its stdout (exit status {self.proc.poll()})"
                self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def answer(self, request_id: int) -> dict[str, Any]:
        """The answer to `request_id` (notifications before it are skipped)."""
        while True:
            message = self.receive()
            if message.get("id") == request_id and "method" not in message:
                return message


@contextmanager
def _omega(tmp_path: Path, servers: str = "") -> Iterator[_Omega]:
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n{servers}')
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    with (tmp_path / "stderr").open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "omega_mcp", "serve", "--config", str(config)],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    omega = _Omega(proc)
    try:
        params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        omega.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        assert "result" in omega.answer(0)
        omega.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield omega
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def _hostile_server() -> str:
    return f'[servers.h]\ncommand = "{sys.executable}"\nargs = [{json.dumps(str(HOSTILE))}]\n'


def _call(request_id: int, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": "mcp__h__attempt", "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def _text(answer: dict[str, Any]) -> str:
    result = answer["result"]
    assert result.get("isError") is not True, result
    return result["content"][0]["text"]


def _wait_listed(omega: _Omega, name: str) -> None:
    """Bounded polling of tools/list until `name` is there (the server connects in the background)."""
    deadline = time.monotonic() + _WAIT_SECONDS
    request_id = 1000
    while True:
        request_id += 1
        omega.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
        if any(tool["name"] == name for tool in omega.answer(request_id)["result"]["tools"]):
            return
        assert time.monotonic() < deadline, f"{name} never listed"
        time.sleep(0.05)  # polling interval, not synchronisation: the list is asked again


@pytest.mark.parametrize("downstream", [False, True], ids=["no-server", "with-a-server"])
def test_every_line_that_is_no_json_object_gets_a_parse_error_and_omega_keeps_answering(
    tmp_path: Path, downstream: bool
) -> None:
    with _omega(tmp_path, _hostile_server() if downstream else "") as omega:
        if downstream:
            _wait_listed(omega, "mcp__h__attempt")  # the relay reads the client's pipe from here on
        for kind, line in _GARBLED.items():
            omega.send(line)
            error = omega.receive()
            while "method" in error:  # a notification on its way (list_changed, a log) comes first
                error = omega.receive()
            assert error["id"] is None, kind
            assert error["error"]["code"] == -32700, kind
            assert error["error"]["message"].startswith("Parse error: the line is "), kind
        omega.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        assert omega.answer(7) == {"jsonrpc": "2.0", "id": 7, "result": {}}
        if downstream:
            omega.send(_call(8, {"action": "cwd"}))
            assert _text(omega.answer(8))
    assert "nested too deeply" in (tmp_path / "stderr").read_text(errors="replace")


def test_a_server_writing_lines_nobody_can_decode_keeps_being_served(tmp_path: Path) -> None:
    with _omega(tmp_path, _hostile_server()) as omega:
        _wait_listed(omega, "mcp__h__attempt")
        for request_id, kind in enumerate(_GARBLED, start=1):
            omega.send(_call(request_id, {"action": "garble", "target": kind}))
            assert _text(omega.answer(request_id)) == f"allowed: garbled {kind}"
        omega.send(_call(99, {"action": "cwd"}))
        assert _text(omega.answer(99))
    log = (tmp_path / "stderr").read_text(errors="replace")
    assert "[h] ignoring a line that is not JSON (nested too deeply)" in log
    assert "[h] ignoring a line that is not a JSON object: b'[1,2,3]" in log
