"""Round-trip latency of omega's built-ins over stdio versus the SDK's bare echo server.

Usage: python bench/bench_stdio.py [--calls 500]

Every number comes from one run on one machine, with the same SDK client: the echo server is
the floor (JSON-RPC over a pipe plus the SDK's own dispatch), so `read - echo` is what omega's
server adds for a small-file read. `bash true` includes spawning a process (and, in sandbox
mode, the Landlock trampoline), so it is reported against the same floor for context.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import StdioServerParameters

HERE = Path(__file__).resolve().parent


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def _measure(params: StdioServerParameters, tool: str, args: dict[str, Any], calls: int) -> list[float]:
    async with mcp.Client(params, mode="legacy") as client:
        for _ in range(20):  # warm-up
            await client.call_tool(tool, args)
        samples: list[float] = []
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool(tool, args)
            samples.append(time.perf_counter() - start)
            if result.is_error:
                raise SystemExit(f"{tool} failed: {result.content}")
        return samples


async def main(calls: int, mode: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, ws = Path(tmp) / "home", Path(tmp) / "ws"
        ws.mkdir(parents=True)
        (ws / "small.txt").write_text("hello\n" * 20)
        env = {"OMEGA_HOME": str(home), "PATH": os.environ.get("PATH", "")}
        omega = StdioServerParameters(
            command=sys.executable,
            args=["-m", "omega_mcp", "serve", "--workspace", str(ws), "--mode", mode, "--log-level", "warning"],
            env=env,
            cwd=tmp,
        )
        echo = StdioServerParameters(command=sys.executable, args=[str(HERE / "echo_server.py")], env=env)
        rows = [
            ("SDK echo server (floor)", await _measure(echo, "echo", {"text": "hi"}, calls)),
            ("omega `read` small file", await _measure(omega, "read", {"file_path": "small.txt"}, calls)),
            ("omega `bash` `true`", await _measure(omega, "bash", {"command": "true"}, max(calls // 5, 50))),
        ]
    floor = statistics.median(rows[0][1]) * 1000
    print(
        f"stdio round trips, {calls} calls (bash: {max(calls // 5, 50)}), mode={mode}, Python {sys.version.split()[0]}"
    )
    print()
    print("| call | p50 ms | p99 ms | p50 over the echo floor |")
    print("|---|---|---|---|")
    for label, samples in rows:
        p50 = _pct(samples, 0.5)
        print(f"| {label} | {p50:.3f} | {_pct(samples, 0.99):.3f} | {p50 - floor:+.3f} ms |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--mode", default="sandbox", choices=("sandbox", "rx", "rwx"))
    ns = parser.parse_args()
    anyio.run(main, ns.calls, ns.mode)
