"""The HTTP hub beside its floor: `omega-mcp serve --http` against the SDK's own streamable HTTP server.

    .venv/bin/python bench/bench_http.py [--calls 500] [--omega-src DIR] [--json]

Both serve the same tool, omega's `read` of a small text file (`builtin/read.py`, sandbox mode, its
path checks included): omega as its built-in, the SDK's low-level Server (`echo_server.py --http
--omega-read`, on uvicorn, as `streamable_http_app` gives it) by calling the same function, so what
differs is the hub (this checkout's `read` in the floor either way). Same client (`mcp.Client` over
`streamable_http_client`), both client eras: the handshake (`mode="legacy"`: sessions, SSE
answers) and the 2026-07-28 envelope (`mode="auto"`: stateless POSTs). omega checks its bearer
token on every request, as it always does; the SDK server has none.

Latency: the two servers take turns call by call (rotating order), and the p50 ratio is the median
of the rounds' ratios. Throughput: 64 calls in flight from 4 clients, each its own session, the
servers in turns, median of the runs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from _support import (
    HERE,
    PYTHON,
    Options,
    Section,
    free_port,
    load_average,
    omega_env,
    paired_latency,
    paired_ratio,
    percentile,
    section_main,
    stop,
    wait_listening,
)

IN_FLIGHT = 64
CLIENTS = 4
ERAS = {"handshake": "legacy", "2026": "auto"}
_TOKEN = "bench-token"
_SMALL = "hello\n" * 20


def _client(url: str, token: str | None, mode: str) -> Any:
    import httpx2
    import mcp
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    # The SDK's client timeouts; idle connections dropped after 2 s, before uvicorn closes them at 5 s
    # (reusing one the server is closing fails the call with a ReadError: seen between the phases).
    limits = httpx2.Limits(keepalive_expiry=2.0)
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0), limits=limits)
    transport = streamable_http_client(url, http_client=http)
    return mcp.Client(transport, mode=mode)


def _start(work: Path, options: Options) -> dict[str, tuple[subprocess.Popen[bytes], str, str | None]]:
    """The SDK server (label S) and omega's hub (label B), both serving `read` with `work/ws` as cwd."""
    ws = work / "ws"
    ws.mkdir()
    (ws / "small.txt").write_text(_SMALL)
    sdk_port, omega_port = free_port(), free_port()
    floor = [PYTHON, str(HERE / "echo_server.py"), "--http", str(sdk_port), "--omega-read", str(ws)]
    sdk = subprocess.Popen(floor, cwd=ws)
    env = omega_env(options, {"OMEGA_HOME": str(work / "home"), "OMEGA_TOKEN": _TOKEN})
    command = [PYTHON, "-m", "omega_mcp", "serve", "--http", "--port", str(omega_port), "--workspace", str(ws)]
    omega = subprocess.Popen([*command, "--log-level", "warning"], env=env, cwd=work)
    servers = {
        "S": (sdk, f"http://127.0.0.1:{sdk_port}/mcp", None),
        "B": (omega, f"http://127.0.0.1:{omega_port}/mcp", _TOKEN),
    }
    if options.before_src:
        before_port = free_port()
        env = omega_env(options, {"OMEGA_HOME": str(work / "home0"), "OMEGA_TOKEN": _TOKEN}, before=True)
        command[command.index("--port") + 1] = str(before_port)
        before = subprocess.Popen([*command, "--log-level", "warning"], env=env, cwd=work)
        servers["B0"] = (before, f"http://127.0.0.1:{before_port}/mcp", _TOKEN)
    for process, url, _ in servers.values():
        wait_listening(int(url.rsplit(":", 1)[1].split("/")[0]), process)
    return servers


async def _call(client: Any) -> None:
    result = await client.call_tool("read", {"file_path": "small.txt"})
    if result.is_error:
        raise RuntimeError(f"read failed: {result.content}")


async def _throughput(clients: list[Any], per_worker: int) -> float:
    async def worker(client: Any) -> None:
        for _ in range(per_worker):
            await _call(client)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(IN_FLIGHT):
            tg.start_soon(worker, clients[index % len(clients)])
    return per_worker * IN_FLIGHT / (time.perf_counter() - start)


async def measure(options: Options, era: str) -> dict[str, Any]:
    """S and B for one client era: latency paired call by call, then throughput in turns."""
    work = Path(tempfile.mkdtemp(prefix="omega-bench-http-"))
    servers = _start(work, options)
    stack = AsyncExitStack()
    try:
        pools: dict[str, list[Any]] = {}
        for label, (_, url, token) in servers.items():
            pools[label] = [await stack.enter_async_context(_client(url, token, ERAS[era])) for _ in range(CLIENTS)]
        callers = {label: (lambda c=pool[0]: _call(c)) for label, pool in pools.items()}
        samples = await paired_latency(callers, max(20, options.calls), warmup=30)
        rates: dict[str, list[float]] = {label: [] for label in pools}
        for _ in range(2 if options.quick else 3):
            for label, pool in pools.items():
                rates[label].append(await _throughput(pool, 3 if options.quick else 10))
    finally:
        try:
            await stack.aclose()
        except Exception as exc:  # closing after measuring (a busy machine): no number depends on it
            print(f"note: closing a client failed: {exc!r}", file=sys.stderr)
        for process, _, _ in servers.values():
            stop(process)
    return {
        label: {
            "p50_ms": statistics.median(values) * 1000,
            "p99_ms": percentile(values, 0.99) * 1000,
            "p50_ratio": paired_ratio(values, samples["S"]),
            "calls_per_s": statistics.median(rates[label]),
            "throughput_ratio": statistics.median(rates[label]) / statistics.median(rates["S"]),
        }
        for label, values in samples.items()
    }


def section(options: Options) -> Section:
    """The HTTP hub against the SDK's own streamable HTTP server, both client eras."""
    data: dict[str, Any] = {"load_before": load_average()}
    for era in ERAS:
        data[era] = anyio.run(measure, options, era)
    data["load_after"] = load_average()
    names = {"S": "SDK's own streamable HTTP server (floor)", "B0": "omega before", "B": "omega `serve --http`"}
    rows = [
        f"| client era | server | p50 ms | p99 ms | p50 ÷ SDK (paired) | calls/s, {IN_FLIGHT} in flight "
        f"from {CLIENTS} clients | ÷ SDK |",
        "|---|---|---|---|---|---|---|",
    ]
    for era in ERAS:
        for label in [k for k in names if k in data[era]]:
            row = data[era][label]
            rows.append(
                f"| {era} | {names[label]} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['p50_ratio']:.2f}x "
                f"| {row['calls_per_s']:.0f} | {row['throughput_ratio']:.2f}x |"
            )
    return Section(
        title="The HTTP hub",
        command=f"python bench/bench_http.py --calls {options.calls}",
        markdown="\n".join(rows),
        data=data,
    )


def main() -> None:
    section_main(section, __doc__, calls=500, what="server")


if __name__ == "__main__":
    sys.exit(main())
