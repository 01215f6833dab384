"""R, the floor for one proxy hop: a stdlib JSON-RPC line relay between a stdio client and one stdio server.

    python bench/relay.py [--prefix mcp__echo__] -- COMMAND [ARGS...]

It does what any relay that names tools must do and nothing more: every line is parsed and
re-encoded, a `tools/call` name loses `--prefix` on its way down and the tools of a `tools/list`
answer gain it on their way up (so a client calls the same names through R as through omega).
Everything else passes as it is, both ways and in both protocol eras. Two threads, blocking I/O,
no validation, no timeouts, no restarts: the cheapest a Python proxy can be, used by the
benchmarks as the floor omega is measured against (`bench_proxy.py`). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from typing import IO, Any

_listings: set[Any] = set()
"""Ids of the client's `tools/list` requests whose answers get the prefix (written by one thread, read by the other)."""


def _encode(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _down(client: IO[bytes], server: IO[bytes], prefix: str) -> None:
    """Client → server: strip the prefix from called names, note tools/list requests."""
    for line in client:
        if not line.strip():
            continue
        message = json.loads(line)
        if isinstance(message, dict):
            method = message.get("method")
            params = message.get("params")
            if method == "tools/call" and isinstance(params, dict):
                name = params.get("name")
                if isinstance(name, str) and name.startswith(prefix):
                    message["params"] = {**params, "name": name[len(prefix) :]}
            elif method == "tools/list" and "id" in message:
                _listings.add(message["id"])
        server.write(_encode(message))
        server.flush()
    server.close()  # the client went away: the server sees EOF and exits


def _up(server: IO[bytes], client: IO[bytes], prefix: str) -> None:
    """Server → client: prefix the tools of tools/list answers."""
    for line in server:
        if not line.strip():
            continue
        message = json.loads(line)
        if isinstance(message, dict) and "method" not in message and message.get("id") in _listings:
            _listings.discard(message["id"])
            result = message.get("result")
            if isinstance(result, dict) and isinstance(result.get("tools"), list):
                tools = [{**tool, "name": prefix + tool["name"]} for tool in result["tools"]]
                message["result"] = {**result, "tools": tools}
        client.write(_encode(message))
        client.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default="", help="what the client's tool names carry before the server's")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the server command (after --)")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no server command")
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    down = threading.Thread(target=_down, args=(sys.stdin.buffer, server.stdin, args.prefix), daemon=True)
    down.start()
    try:
        _up(server.stdout, sys.stdout.buffer, args.prefix)
    except BrokenPipeError:
        pass
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
