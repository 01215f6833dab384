"""HTTP hub benchmark: tools/call over streamable HTTP against a real `omega-mcp serve --http`.

Usage: python bench/bench_http.py [--calls 500] [--clients 4] [--in-flight 64]

Reports sequential tools/call latency (p50/p99) of the built-in `read` (a small file: no
subprocess, so the number is the HTTP transport plus omega) and throughput with 64 calls in
flight spread over 4 clients, each with its own session. Both protocol eras are measured: the
handshake era (sessions, SSE responses) and the 2026-07-28 stateless envelope.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "small.txt").write_text("hello\n" * 20)
    env = {**os.environ, "OMEGA_HOME": str(tmp / "home"), "OMEGA_TOKEN": _TOKEN}
    argv = [sys.executable, "-m", "omega_mcp", "serve", "--http", "--port", str(port), "--workspace", str(ws)]
    proc = subprocess.Popen([*argv, "--log-level", "warning"], env=env, cwd=tmp)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the hub did not start")


_TOKEN = "bench-token"


def _transport(url: str) -> Any:
    """The hub always checks a token: every request of this client carries it."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {_TOKEN}"})
    return streamable_http_client(url, http_client=http)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def _latency(url: str, mode: str, calls: int) -> list[float]:
    async with mcp.Client(_transport(url), mode=mode) as client:
        for _ in range(20):
            await client.call_tool("read", {"file_path": "small.txt"})
        samples: list[float] = []
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool("read", {"file_path": "small.txt"})
            samples.append(time.perf_counter() - start)
            if result.is_error:
                raise SystemExit(f"read failed: {result.content}")
        return samples


async def _throughput(url: str, mode: str, clients: int, in_flight: int, total: int) -> float:
    per_client = in_flight // clients
    done = 0

    async def worker(client: mcp.Client, count: int) -> None:
        nonlocal done
        for _ in range(count):
            await client.call_tool("read", {"file_path": "small.txt"})
            done += 1

    async with anyio.create_task_group() as outer:
        connected: list[mcp.Client] = []
        ready = anyio.Event()
        finished = anyio.Event()

        async def hold(index: int) -> None:
            async with mcp.Client(_transport(url), mode=mode) as client:
                connected.append(client)
                if len(connected) == clients:
                    ready.set()
                await finished.wait()

        for index in range(clients):
            outer.start_soon(hold, index)
        await ready.wait()
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for client in connected:
                for _ in range(per_client):
                    tg.start_soon(worker, client, total // in_flight)
        elapsed = time.perf_counter() - start
        finished.set()
    return done / elapsed


async def main(calls: int, clients: int, in_flight: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        proc = _start(Path(tmp), port)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            rows = []
            for mode, label in (("legacy", "handshake era (sessions)"), ("auto", "2026-07-28 (stateless)")):
                samples = await _latency(url, mode, calls)
                rate = await _throughput(url, mode, clients, in_flight, total=in_flight * 20)
                rows.append((label, _pct(samples, 0.5), _pct(samples, 0.99), rate))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    print(
        f"HTTP tools/call of `read` (small file): {calls} sequential calls; "
        f"{in_flight} in flight from {clients} clients"
    )
    print()
    print("| client era | p50 ms | p99 ms | throughput, calls/s |")
    print("|---|---|---|---|")
    for label, p50, p99, rate in rows:
        print(f"| {label} | {p50:.2f} | {p99:.2f} | {rate:.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=64)
    ns = parser.parse_args()
    anyio.run(main, ns.calls, ns.clients, ns.in_flight)
