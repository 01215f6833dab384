"""What confinement adds to a downstream server's cold start: spawn → `initialize` answered.

Usage: python bench/bench_servers.py [--runs 100]

Each run starts the stdlib fixture server (tests/fixtures/hostile_server.py, which answers in a
few milliseconds) exactly as omega does (`proxy.spawn.spawn`), sends `initialize` and waits for
the answer line, then kills the process group. `unconfined` goes through the death-signal
launcher; `confined` through the sandbox trampoline (namespaces, private /tmp, covers, Landlock),
without and with network. Prints a markdown table; numbers are from one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import tempfile
import time
from pathlib import Path

from omega_mcp.config import Config, SandboxConfig, ServerConfig
from omega_mcp.proxy.spawn import spawn
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.processes import signal_group
from omega_mcp.sandbox.servers import server_policy

_FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hostile_server.py"
_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def _once(confinement: SandboxPolicy | None) -> float:
    start = time.perf_counter()
    spawned = spawn(sys.executable, [str(_FIXTURE)], None, None, confinement=confinement)
    try:
        os.write(spawned.stdin, (json.dumps(_INIT) + "\n").encode())
        ready, _, _ = select.select([spawned.stdout], [], [], 10)
        if not ready or b'"result"' not in os.read(spawned.stdout, 65536):
            raise SystemExit("the server did not answer initialize")
        return time.perf_counter() - start
    finally:
        signal_group(spawned.process.pid, signal.SIGKILL)
        spawned.process.wait(timeout=5)
        for fd in (spawned.stdin, spawned.stdout, spawned.stderr):
            os.close(fd)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as home:

        def policy(sandbox: object) -> SandboxPolicy | None:
            entry = ServerConfig(command=sys.executable, args=(str(_FIXTURE),), sandbox=sandbox)  # pyright: ignore[reportArgumentType]
            config = Config(sandbox=SandboxConfig(), servers={"bench": entry}, home=Path(home))
            return server_policy(config.for_servers, "bench")

        rows = {
            "unconfined": None,
            "confined, no network": policy("default"),
            "confined, network": policy({"network": True}),
        }
        results: dict[str, list[float]] = {}
        for _ in range(5):  # warm-up: page cache, pyc files, the sandbox probe
            for confinement in rows.values():
                _once(confinement)
        for name in rows:
            results[name] = []
        for _ in range(runs):  # interleaved, so a busy moment hits every row alike
            for name, confinement in rows.items():
                results[name].append(_once(confinement))
    base = _pct(results["unconfined"], 0.5)
    print(f"| server cold start ({runs} runs) | p50 | p90 | vs unconfined |")
    print("|---|---|---|---|")
    for name, samples in results.items():
        p50 = _pct(samples, 0.5)
        print(f"| {name} | {p50:.1f} ms | {_pct(samples, 0.9):.1f} ms | {p50 - base:+.1f} ms |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    main(parser.parse_args().runs)
