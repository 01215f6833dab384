"""First contact: how fast a client gets omega's tools while a downstream server is still starting.

Usage: python bench/bench_first_contact.py [--runs 5] [--delay 4] [--omega COMMAND]

Each run launches `omega-mcp serve` (or COMMAND, e.g. an older checkout's) over stdio with one
downstream server that takes `--delay` seconds to answer `initialize` (the stdlib fixture,
tests/fixtures/echo_server.py --init-delay), speaks raw JSON-RPC as a client would, and measures
from the launch: `initialize` answered, the first `tools/list` answered (and how many tools it
had), `notifications/tools/list_changed` received, and a `tools/list` with the slow server's tools.
Prints a markdown table of medians; numbers are from one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "echo_server.py"
_BOUND = 60.0


class _Wire:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._in, self._out, self._buffer = process.stdin, process.stdout.fileno(), b""

    def send(self, message: dict[str, object]) -> None:
        self._in.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        self._in.flush()

    def receive(self) -> dict[str, object]:
        deadline = time.monotonic() + _BOUND
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._out], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._out, 65536) if ready else b""
            if not chunk:
                raise RuntimeError("omega closed stdout or did not answer in time")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)


def _run(command: list[str], delay: float, scratch: Path) -> dict[str, float]:
    config = scratch / "servers.toml"
    config.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{scratch / "ws"}"\n\n'
        f"[servers.slow]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps([str(FIXTURE), '--init-delay', str(delay)])}\n"
    )
    env = {**os.environ, "OMEGA_HOME": str(scratch / "home")}
    env.pop("OMEGA_CONFIG", None)
    start = time.monotonic()
    process = subprocess.Popen(
        [*command, "serve", "--config", str(config), "--log-level", "error"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=scratch,
    )  # fmt: skip
    wire = _Wire(process)
    result: dict[str, float] = {}
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
        wire.send({"id": 1, "method": "initialize", "params": hello})
        wire.receive()
        result["initialize_s"] = time.monotonic() - start
        wire.send({"method": "notifications/initialized"})
        wire.send({"id": 2, "method": "tools/list"})
        first = wire.receive()
        result["first_list_s"] = time.monotonic() - start
        result["first_list_after_initialize_s"] = result["first_list_s"] - result["initialize_s"]
        result["first_list_tools"] = len(first["result"]["tools"])  # type: ignore[index]
        message = first
        while not any(tool["name"].startswith("mcp__slow__") for tool in message["result"]["tools"]):  # type: ignore[index]
            while wire.receive().get("method") != "notifications/tools/list_changed":
                pass
            result.setdefault("list_changed_s", time.monotonic() - start)
            wire.send({"id": 3, "method": "tools/list"})
            message = wire.receive()
        result["all_tools_s"] = time.monotonic() - start
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--delay", type=float, default=4.0, help="seconds the slow server takes to start")
    parser.add_argument("--omega", default=f"{sys.executable} -m omega_mcp", help="the omega command to launch")
    args = parser.parse_args()
    command = shlex.split(args.omega)
    runs: list[dict[str, float]] = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="omega-first-contact-", dir=os.path.expanduser("~")) as scratch:
            (Path(scratch) / "ws").mkdir()
            runs.append(_run(command, args.delay, Path(scratch)))
    keys = ["initialize_s", "first_list_after_initialize_s", "first_list_tools", "list_changed_s", "all_tools_s"]
    labels = {
        "initialize_s": "launch → initialize answered",
        "first_list_after_initialize_s": "initialize → first tools/list answered",
        "first_list_tools": "tools in the first tools/list",
        "list_changed_s": "launch → notifications/tools/list_changed",
        "all_tools_s": "launch → tools/list with the slow server's tools",
    }
    print(f"| {args.runs} runs, a server taking {args.delay:g} s to start | median |")
    print("|---|---|")
    for key in keys:
        values = [run[key] for run in runs if key in run]
        if not values:
            print(f"| {labels[key]} | (none) |")
        elif key == "first_list_tools":
            print(f"| {labels[key]} | {statistics.median(values):g} |")
        else:
            print(f"| {labels[key]} | {statistics.median(values):.2f} s |")


if __name__ == "__main__":
    main()
