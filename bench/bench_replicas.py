"""Load benchmark of the team hub: the SDK's own streamable HTTP server, one omega hub, and 1 and 3
omega replicas behind HAProxy running deploy/haproxy.cfg.

Usage: python bench/bench_replicas.py [--clients 12] [--seconds 10] [--rounds 2]

Every target answers the same tool: `read` of a small file (omega's built-in; in the SDK server a
handler that reads the file the same way), so the numbers are transport + server, no subprocess.
`--clients` 2026-era clients call in a loop for `--seconds`, each with its own token (omega: one
`[hub.clients.cN]` each, so HAProxy's hash by token spreads them over the replicas). Reported:
calls per second, and p50/p99 latency. Targets run interleaved, `--rounds` times (A B C D A B C D),
so a loaded machine shifts all of them alike; every round is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import mcp
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parents[1]
HUB_TOKEN = "bench-hub-token-0123456789abcdef"

SDK_SERVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import uvicorn
    from mcp import types
    from mcp.server.lowlevel import Server

    FILE = Path(sys.argv[2])
    TOOL = types.Tool(name="read", input_schema={"type": "object", "properties": {"file_path": {"type": "string"}}})

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(ctx, params):
        lines = FILE.read_text().splitlines()
        text = "\\n".join(f"{i:6d}\\t{line}" for i, line in enumerate(lines, 1))
        return types.CallToolResult(content=[types.TextContent(text=text)])

    server = Server("sdk", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen within 60 s")


class Targets:
    def __init__(self, tmp: Path, clients: int) -> None:
        self.tmp = tmp
        self.file = tmp / "ws" / "small.txt"
        self.file.parent.mkdir()
        self.file.write_text("hello\n" * 20)
        self.tokens = [f"bench-client-{n:02d}-0123456789abcdef" for n in range(clients)]
        config = tmp / "omega.toml"
        lines = ['[hub]\nallowed_hosts = ["127.0.0.1"]\ntool_search = "off"\n']
        for n in range(clients):
            lines.append(f'[hub.clients.c{n}]\ntoken = "${{BENCH_TOKEN_{n}}}"\n')
        config.write_text("\n".join(lines))
        self.config = config
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "OMEGA_HOME": str(self.tmp / "home"), "OMEGA_TOKEN": HUB_TOKEN}
        env.update({f"BENCH_TOKEN_{n}": token for n, token in enumerate(self.tokens)})
        return env

    def sdk(self) -> str:
        port = _free_port()
        script = self.tmp / "sdk_server.py"
        script.write_text(SDK_SERVER)
        proc = subprocess.Popen([sys.executable, str(script), str(port), str(self.file)])
        self.procs.append(proc)
        _wait_port(port, proc, "the SDK server")
        return f"http://127.0.0.1:{port}/mcp"

    def replica(self) -> int:
        port = _free_port()
        argv = [sys.executable, "-m", "omega_mcp", "serve", "--http", "--port", str(port), "--mode", "rwx"]
        argv += ["--workspace", str(self.file.parent), "--config", str(self.config), "--log-level", "warning"]
        proc = subprocess.Popen(argv, env=self._env(), cwd=self.tmp)
        self.procs.append(proc)
        _wait_port(port, proc, "an omega replica")
        return port

    def balancer(self, ports: list[int]) -> str:
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        port = _free_port()
        env = {**os.environ, "OMEGA_LB_BIND": f"127.0.0.1:{port}"}
        env.update({f"OMEGA_REPLICA_{i + 1}": f"127.0.0.1:{p}" for i, p in enumerate(ports)})
        proc = subprocess.Popen([haproxy, "-db", "-f", str(ROOT / "deploy" / "haproxy.cfg")], env=env)
        self.procs.append(proc)
        _wait_port(port, proc, "haproxy")
        time.sleep(1.5)  # its first health checks (every 500 ms) mark the replicas up
        return f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


async def _load(url: str, tokens: list[str], seconds: float, path: str) -> tuple[float, list[float]]:
    """Every client calls in a loop; the calls started in the window after a 2 s warm-up count."""
    latencies: list[float] = []
    window = time.perf_counter() + 2.0
    end = window + seconds

    async def one(token: str) -> None:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with mcp.Client(streamable_http_client(url, http_client=http), mode="auto") as client:  # type: ignore[arg-type]
            while (started := time.perf_counter()) < end:
                result = await client.call_tool("read", {"file_path": path})
                assert not result.is_error, result
                if started >= window:
                    latencies.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        for token in tokens:
            tg.start_soon(one, token)
    return seconds, latencies


def _row(name: str, elapsed: float, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{name:<28} {len(latencies) / elapsed:8.0f} calls/s   p50 {statistics.median(ordered) * 1000:6.1f} ms"
        f"   p99 {p99 * 1000:6.1f} ms   ({len(latencies)} calls)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        targets = Targets(Path(tmp), args.clients)
        try:
            sdk = targets.sdk()
            ports = [targets.replica() for _ in range(4)]
            direct = f"http://127.0.0.1:{ports[0]}/mcp"
            one = targets.balancer(ports[1:2])
            three = targets.balancer(ports[1:4])
            plan: list[tuple[str, Callable[[], str], list[str]]] = [
                ("SDK server (1 process)", lambda: sdk, [HUB_TOKEN] * args.clients),
                ("omega hub (1 process)", lambda: direct, targets.tokens),
                ("omega, 1 replica + HAProxy", lambda: one, targets.tokens),
                ("omega, 3 replicas + HAProxy", lambda: three, targets.tokens),
            ]
            print(f"{args.clients} clients (2026 era), {args.seconds:g} s each, {os.cpu_count()} CPUs")
            for round_no in range(args.rounds):
                for name, url, tokens in plan:
                    elapsed, latencies = anyio.run(_load, url(), tokens, args.seconds, str(targets.file))
                    print(f"round {round_no + 1}  {_row(name, elapsed, latencies)}", flush=True)
        finally:
            targets.stop()


if __name__ == "__main__":
    main()
