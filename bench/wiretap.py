"""A stdio MCP server's traffic, logged as it passes: what a client asked for, and when the answers came.

    python bench/wiretap.py LOG -- COMMAND [ARGS...]

Runs COMMAND with pipes on stdin and stdout (stderr is inherited), copies every line both ways
unchanged, and appends one JSON line per message to LOG: `at` (time.monotonic(), the same clock in
every process of the machine), `dir` ("in": client to server, "out": server to client), and the
message's `id`, `method`, error code and, for an answer carrying tools, how many. bench/real_clients.py
wraps an entry's command in it with `--wire`. Standard library only.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any


def _summary(line: bytes, direction: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"at": time.monotonic(), "dir": direction}
    try:
        message = json.loads(line)
    except ValueError:
        entry["unparsed"] = line[:200].decode(errors="replace")
        return entry
    if isinstance(message, dict):
        for key in ("id", "method"):
            if key in message:
                entry[key] = message[key]
        error = message.get("error")
        if isinstance(error, dict):
            entry["error"] = error.get("code")
        result = message.get("result")
        if isinstance(result, dict) and isinstance(result.get("tools"), list):
            entry["tools"] = len(result["tools"])
    return entry


def _pump(source: IO[bytes], sink: IO[bytes], log: IO[str], lock: threading.Lock, direction: str) -> None:
    for line in iter(source.readline, b""):
        with lock:
            log.write(json.dumps(_summary(line, direction)) + "\n")
            log.flush()
        try:
            sink.write(line)
            sink.flush()
        except (BrokenPipeError, ValueError):
            break
    try:
        sink.close()
    except (BrokenPipeError, ValueError):
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: wiretap.py LOG -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    with open(argv[0], "a") as log:
        child = subprocess.Popen(argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdin is not None and child.stdout is not None
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda number, _frame: child.send_signal(number))
        lock = threading.Lock()
        down = threading.Thread(target=_pump, args=(sys.stdin.buffer, child.stdin, log, lock, "in"), daemon=True)
        down.start()
        _pump(child.stdout, sys.stdout.buffer, log, lock, "out")
        return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
