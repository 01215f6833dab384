"""What omega costs as a proxy, with its floors beside it in the same run.

    .venv/bin/python bench/bench_proxy.py [--calls 1000] [--omega-src DIR] [--json]

Same client (the SDK's `mcp.Client`) and same downstream (the SDK's own low-level Server with one
`echo` tool, `echo_server.py`) on every path:
  A  direct:  client → downstream
  R  relay:   client → `relay.py` (a stdlib JSON-RPC line relay, the floor for one hop) → downstream
  B  omega:   client → `omega-mcp serve` (stdio) → downstream
for a stdio downstream and for a streamable HTTP one (R relays stdio only), and for both client
eras (the handshake, `mode="legacy"`, and the 2026-07-28 envelope, `mode="auto"`).

Latency: the paths take turns call by call, in rotating order, so each round times every path
back to back; the p50 ratio is the median of the rounds' ratios (paired: drift on a shared
machine hits all paths alike). Throughput: 64 calls in flight, the paths in turns, best-of-runs
median. Also the CPU each relaying process spends per call, and peak RSS (VmHWM).
Cold start: 8 stdio servers that each take 0.5 s to answer initialize (the stdlib fixture), from
launching `omega-mcp serve` to a tools/list with all 8 (a raw JSON-RPC client, so no SDK client
start is counted), against the floor of spawning the same 8 servers directly and asking each.
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from _support import (
    FIXTURE,
    HERE,
    PYTHON,
    Options,
    Section,
    cpu_seconds,
    free_port,
    load_average,
    memory_mb,
    omega_env,
    paired_latency,
    paired_ratio,
    percentile,
    read_pid,
    section_main,
    stop,
    wait_listening,
    with_pid_file,
)

IN_FLIGHT = 64
ECHO = [PYTHON, str(HERE / "echo_server.py")]
PREFIX = "mcp__echo__"
ERAS = {"handshake": "legacy", "2026": "auto"}


@dataclass
class _Path:
    label: str
    target: Any
    tool: str
    pid_file: Path | None = None
    pid: int | None = None


def _stdio(command: list[str], env: dict[str, str] | None = None) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=command[0], args=command[1:], env=env)


def _config(work: Path, body: str) -> Path:
    path = work / f"omega-{abs(hash(body))}.toml"
    path.write_text(f'[sandbox]\nmode = "rwx"\nworkspace = "{work / "ws"}"\n\n{body}')
    return path


def _omega_command(config: Path) -> list[str]:
    return [PYTHON, "-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "error"]


def _paths(work: Path, options: Options, downstream: str, url: str | None) -> list[_Path]:
    env = omega_env(options, {"OMEGA_HOME": str(work / "home")})
    if downstream == "stdio":
        config = _config(work, f"[servers.echo]\ncommand = {json.dumps(ECHO[0])}\nargs = {json.dumps(ECHO[1:])}\n")
        relay_pid = work / f"relay-{time.monotonic_ns()}.pid"
        relay = with_pid_file([PYTHON, str(HERE / "relay.py"), "--prefix", PREFIX, "--", *ECHO], relay_pid)
        direct: Any = _stdio(ECHO)
        paths = [_Path("R", _stdio(relay), PREFIX + "echo", relay_pid)]
    else:
        config = _config(work, f'[servers.echo]\nurl = "{url}"\n')
        direct = url
        paths = []
    omega_pid = work / f"omega-{time.monotonic_ns()}.pid"
    omega = _Path("B", _stdio(with_pid_file(_omega_command(config), omega_pid), env), PREFIX + "echo", omega_pid)
    if options.before_src:
        before_env = omega_env(options, {"OMEGA_HOME": str(work / "home0")}, before=True)
        before_pid = work / f"omega0-{time.monotonic_ns()}.pid"
        command = with_pid_file(_omega_command(config), before_pid)
        paths.append(_Path("B0", _stdio(command, before_env), PREFIX + "echo", before_pid))
    return [_Path("A", direct, "echo"), *paths, omega]


async def _throughput(call: Callable[[], Awaitable[None]], per_worker: int) -> float:
    async def worker() -> None:
        for _ in range(per_worker):
            await call()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(IN_FLIGHT):
            tg.start_soon(worker)
    return per_worker * IN_FLIGHT / (time.perf_counter() - start)


async def measure(options: Options, downstream: str, era: str, url: str | None = None) -> dict[str, Any]:
    """A, (R,) B for one downstream kind (an HTTP one at `url`) and one client era, measured in turns."""
    import mcp

    work = Path(tempfile.mkdtemp(prefix="omega-bench-proxy-"))
    paths = _paths(work, options, downstream, url)
    stack = AsyncExitStack()
    try:
        callers: dict[str, Callable[[], Awaitable[None]]] = {}
        for path in paths:
            client = await stack.enter_async_context(mcp.Client(path.target, mode=ERAS[era]))
            if path.pid_file is not None:
                path.pid = read_pid(path.pid_file)

            async def call(client: Any = client, tool: str = path.tool) -> None:
                result = await client.call_tool(tool, {"text": "ping"})
                assert not result.is_error, result

            # omega answers tools/list at once and adds servers as they connect: wait for the tool.
            with anyio.fail_after(60):
                while path.tool not in {t.name for t in (await client.list_tools()).tools}:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            callers[path.label] = call
        started = {p.label: memory_mb(p.pid) for p in paths if p.pid}
        cpu_before = {p.label: cpu_seconds(p.pid) for p in paths if p.pid}
        rounds = max(20, options.calls)
        samples = await paired_latency(callers, rounds, warmup=50)
        cpu = {p.label: (cpu_seconds(p.pid) - cpu_before[p.label]) / rounds for p in paths if p.pid}
        rates: dict[str, list[float]] = {name: [] for name in callers}
        for _ in range(2 if options.quick else 3):
            for name, call in callers.items():
                rates[name].append(await _throughput(call, 3 if options.quick else 30))
        peaks = {p.label: memory_mb(p.pid) for p in paths if p.pid}
    finally:
        try:
            await stack.aclose()
        except Exception as exc:  # closing after measuring (a busy machine): no number depends on it
            print(f"note: closing a client failed: {exc!r}", file=sys.stderr)
    base = samples["A"]
    return {
        label: {
            "p50_ms": statistics.median(values) * 1000,
            "p99_ms": percentile(values, 0.99) * 1000,
            "p50_ratio": paired_ratio(values, base),
            "calls_per_s": statistics.median(rates[label]),
            "throughput_ratio": statistics.median(rates[label]) / statistics.median(rates["A"]),
            **({"cpu_ms_per_call": cpu[label] * 1000} if label in cpu else {}),
            **(
                {"rss_started_mb": started[label]["rss"], "peak_rss_mb": peaks[label]["peak"]} if label in peaks else {}
            ),
        }
        for label, values in samples.items()
    }


# -- cold start --------------------------------------------------------------------------------


class _Lines:
    """Newline-delimited JSON from a pipe, read with a deadline (stdlib only)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def next(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError("no answer in time")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError("the process closed its output")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def _send(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def _answer(lines: _Lines, request_id: int, deadline: float) -> dict[str, Any]:
    while True:
        message = lines.next(deadline)
        if message.get("id") == request_id and "method" not in message:
            return message


_INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"},
}
_SLOW = [PYTHON, str(FIXTURE), "--init-delay", "0.5"]


def _cold_omega(work: Path, options: Options, *, before: bool = False) -> tuple[float, float]:
    """Seconds from launching `serve` to a tools/list holding all 8 servers' tools; omega's peak RSS (MB)."""
    body = "".join(
        f"[servers.s{i}]\ncommand = {json.dumps(_SLOW[0])}\nargs = {json.dumps(_SLOW[1:])}\n\n" for i in range(8)
    )
    config = _config(work, body)
    env = omega_env(options, {"OMEGA_HOME": str(work / "home")}, before=before)
    start = time.perf_counter()
    process = subprocess.Popen(_omega_command(config), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert process.stdout is not None
    lines, deadline = _Lines(process.stdout.fileno()), time.monotonic() + 60
    try:
        _send(process, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _INITIALIZE})
        _answer(lines, 0, deadline)
        _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        request_id = 1
        while True:  # list, and list again after each list_changed, until all 8 are there
            _send(process, {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
            tools = _answer(lines, request_id, deadline)["result"]["tools"]
            if sum(1 for t in tools if t["name"].endswith("__echo")) == 8:
                elapsed = time.perf_counter() - start
                break
            request_id += 1
            while lines.next(deadline).get("method") != "notifications/tools/list_changed":
                pass
        peak = memory_mb(process.pid)["peak"]
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)
    return elapsed, peak


def _cold_floor() -> float:
    """Seconds from spawning the same 8 servers directly to each one's tools/list answered."""
    start = time.perf_counter()
    processes = [subprocess.Popen(_SLOW, stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(8)]
    try:
        deadline = time.monotonic() + 60
        for process in processes:
            _send(process, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _INITIALIZE})
        for process in processes:
            assert process.stdout is not None
            lines = _Lines(process.stdout.fileno())
            _answer(lines, 0, deadline)
            _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            _send(process, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            _answer(lines, 1, deadline)
        return time.perf_counter() - start
    finally:
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=30)


def cold_start(options: Options) -> dict[str, Any]:
    """The floor and omega (and omega before), alternating, over several runs: medians."""
    work = Path(tempfile.mkdtemp(prefix="omega-bench-cold-"))
    runs = 2 if options.quick else 5
    result: dict[str, Any] = {"runs": runs}
    floor: list[float] = []
    kinds = {"omega": False, **({"omega_before": True} if options.before_src else {})}
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    peaks: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(runs):
        floor.append(_cold_floor())
        for kind, before in kinds.items():
            elapsed, peak = _cold_omega(work, options, before=before)
            seconds[kind].append(elapsed)
            peaks[kind].append(peak)
    result["floor_s"] = statistics.median(floor)
    for kind in kinds:
        result[f"{kind}_s"] = statistics.median(seconds[kind])
        result[f"{kind}_peak_rss_mb"] = max(peaks[kind])
    return result


# -- the section -------------------------------------------------------------------------------


def _rows(results: dict[str, Any], downstream: str, era: str) -> list[str]:
    names = {"A": "direct", "R": "R: stdlib relay (floor)", "B0": "omega before", "B": "omega"}
    rows = []
    for label, name in names.items():
        if label not in results:
            continue
        row = results[label]
        cpu = f"{row['cpu_ms_per_call']:.3f}" if "cpu_ms_per_call" in row else ""
        peak = f"{row['peak_rss_mb']:.0f}" if "peak_rss_mb" in row else ""
        rows.append(
            f"| {downstream} | {era} | {name} | {row['p50_ms']:.2f} | {row['p50_ratio']:.2f}x "
            f"| {row['calls_per_s']:.0f} | {row['throughput_ratio']:.2f}x | {cpu} | {peak} |"
        )
    return rows


def section(options: Options) -> Section:
    """Proxy latency, throughput, CPU and memory (A, R, B), both downstream kinds and eras; cold start."""
    data: dict[str, Any] = {"load_before": load_average()}
    for era in ERAS:
        data[f"stdio/{era}"] = anyio.run(measure, options, "stdio", era)
    port = free_port()
    server = subprocess.Popen([*ECHO, "--http", str(port)])
    try:
        wait_listening(port, server)
        for era in ERAS:
            data[f"http/{era}"] = anyio.run(measure, options, "http", era, f"http://127.0.0.1:{port}/mcp")
    finally:
        stop(server)
    data["cold_start"] = cold_start(options)
    data["load_after"] = load_average()
    rows = [
        "| downstream | client era | path | p50 ms | p50 ÷ direct (paired) | calls/s, 64 in flight "
        "| ÷ direct | CPU ms/call | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for downstream in ("stdio", "http"):
        for era in ERAS:
            rows += _rows(data[f"{downstream}/{era}"], downstream, era)
    cold = data["cold_start"]
    rows += [
        "",
        f"| cold start, 8 servers x 0.5 s initialize (median of {cold['runs']}) | seconds | peak RSS MB |",
        "|---|---|---|",
        f"| floor: the 8 servers spawned and asked directly | {cold['floor_s']:.2f} | |",
    ]
    if "omega_before_s" in cold:
        rows.append(
            f"| omega before: `serve` launched → tools/list with all 8 | {cold['omega_before_s']:.2f} "
            f"| {cold['omega_before_peak_rss_mb']:.0f} |"
        )
    rows.append(
        f"| `omega-mcp serve` launched → tools/list with all 8 | {cold['omega_s']:.2f} "
        f"| {cold['omega_peak_rss_mb']:.0f} |"
    )
    return Section(
        title="The proxy",
        command=f"python bench/bench_proxy.py --calls {options.calls}",
        markdown="\n".join(rows),
        data=data,
    )


def main() -> None:
    section_main(section, __doc__, calls=1000, what="path")


if __name__ == "__main__":
    sys.exit(main())
