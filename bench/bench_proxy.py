"""Benchmark: what omega costs as a proxy, measured in one run against a direct connection.

Same client (the SDK's `mcp.Client`, handshake era, like Claude Code) and same downstream (a
stdio echo server built on the SDK's low-level `Server`) on both paths:
  direct:  client → downstream
  omega:   client → `omega-mcp serve` → downstream
It reports tools/call latency (p50, p99, sequential), throughput with 64 calls in flight, and
cold start with 8 downstream servers that each take 0.5 s to answer initialize (the stdlib
fixture server, so the number is omega's and not the servers' own import time).

    .venv/bin/python bench/bench_proxy.py [--calls 1000] [--json]
    .venv/bin/python bench/bench_proxy.py --downstream     # the echo server itself (internal)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "echo_server.py"
IN_FLIGHT = 64


# -- the downstream ---------------------------------------------------------------------------


def serve_downstream() -> None:
    """A stdio MCP server with one `echo` tool, on the SDK's low-level Server."""
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    tool = types.Tool(
        name="echo",
        description="Echo the text back.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    )

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=(params.arguments or {}).get("text", ""))])

    server = Server("bench-echo", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


# -- measurement helpers ----------------------------------------------------------------------


def _params(command: list[str], env: dict[str, str] | None = None) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=command[0], args=command[1:], env=env)


def _omega(config: Path, home: Path) -> Any:
    command = [sys.executable, "-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "error"]
    return _params(command, env={"OMEGA_HOME": str(home)})


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _latency(
    calls: dict[str, Callable[[], Awaitable[Any]]], rounds: int, per_round: int
) -> dict[str, list[float]]:
    """Sequential call latencies, the paths taking turns in small batches (so drift hits all alike)."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        for _ in range(50):  # warm up
            await call()
    for _ in range(rounds):
        for name, call in calls.items():
            for _ in range(per_round):
                start = time.perf_counter()
                await call()
                samples[name].append(time.perf_counter() - start)
    return samples


async def _throughput(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    per_worker = max(1, calls // IN_FLIGHT)

    async def worker() -> None:
        for _ in range(per_worker):
            await call()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(IN_FLIGHT):
            tg.start_soon(worker)
    return per_worker * IN_FLIGHT / (time.perf_counter() - start)


async def _measure(paths: dict[str, tuple[Any, str, str]], calls: int) -> dict[str, dict[str, float]]:
    """Latency and throughput of every path, all connected at once and measured in turns."""
    import mcp

    async with AsyncExitStack() as stack:
        callers: dict[str, Callable[[], Awaitable[Any]]] = {}
        for name, (params, tool, mode) in paths.items():
            client = await stack.enter_async_context(mcp.Client(params, mode=mode))

            async def call(client: Any = client, tool: str = tool) -> None:
                result = await client.call_tool(tool, {"text": "ping"})
                assert not result.is_error, result

            callers[name] = call
        per_round = 25
        samples = await _latency(callers, max(1, calls // per_round), per_round)
        throughput: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(3):
            for name, call in callers.items():
                throughput[name].append(await _throughput(call, IN_FLIGHT * 10))
    return {
        name: {
            "p50_ms": statistics.median(samples[name]) * 1000,
            "p99_ms": _percentile(samples[name], 0.99) * 1000,
            "calls_per_s": statistics.median(throughput[name]),
        }
        for name in paths
    }


async def _cold_start(config: Path, home: Path, expect: int) -> float:
    """Seconds from launching `omega-mcp serve` to a tools/list answer with every downstream's tools."""
    import mcp

    start = time.perf_counter()
    async with mcp.Client(_omega(config, home), mode="legacy") as client:
        # tools/list answers at once with the servers that are up: list again until all are there.
        deadline = start + 60
        while True:
            tools = (await client.list_tools()).tools
            found = sum(1 for t in tools if t.name.endswith("__echo"))
            if found == expect or time.perf_counter() > deadline:
                break
            await anyio.sleep(0.01)
        elapsed = time.perf_counter() - start
    assert found == expect, f"only {found} of {expect} servers were up: {[t.name for t in tools]}"
    return elapsed


async def _cold_start_in_process(specs: list[Any]) -> float:
    """Seconds for `Downstreams` to connect every server (no interpreter start, no SDK import)."""
    from omega_mcp.proxy.supervisor import Downstreams

    start = time.perf_counter()
    async with Downstreams(specs) as downstreams:
        await downstreams.wait_ready()
        elapsed = time.perf_counter() - start
        assert all(s.state == "connected" for s in downstreams.statuses())
    return elapsed


async def run(calls: int) -> dict[str, Any]:
    from omega_mcp.proxy.supervisor import DownstreamSpec

    work = Path(tempfile.mkdtemp(prefix="omega-bench-"))
    home = work / "home"
    downstream = [sys.executable, str(HERE), "--downstream"]
    single = work / "single.toml"
    single.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{work / "ws"}"\n\n'
        f"[servers.echo]\ncommand = {json.dumps(downstream[0])}\nargs = {json.dumps(downstream[1:])}\n"
    )
    slow = [str(FIXTURE), "--init-delay", "0.5"]
    eight = work / "eight.toml"
    eight.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{work / "ws"}"\n'
        + "".join(
            f"\n[servers.s{i}]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps(slow)}\n" for i in range(8)
        )
    )
    paths = {
        "direct": (_params(downstream), "echo", "legacy"),
        "omega": (_omega(single, home), "mcp__echo__echo", "legacy"),
        "omega_2026_client": (_omega(single, home), "mcp__echo__echo", "auto"),
        "direct_2026_client": (_params(downstream), "echo", "auto"),
    }
    results: dict[str, Any] = dict(await _measure(paths, calls))
    specs = [DownstreamSpec(f"s{i}", _params([sys.executable, *slow])) for i in range(8)]
    results["cold_start_8_s"] = await _cold_start(eight, home, expect=8)
    results["cold_start_8_in_process_s"] = await _cold_start_in_process(specs)
    return results


def table(results: dict[str, Any]) -> str:
    direct, omega, modern = results["direct"], results["omega"], results["omega_2026_client"]
    direct_modern = results["direct_2026_client"]
    rows = [
        "| path | tools/call p50 | p99 | throughput, 64 in flight |",
        "|---|---|---|---|",
    ]
    for label, row, base in (
        ("direct (client → downstream)", direct, direct),
        ("through omega", omega, direct),
        ("direct, 2026-era client", direct_modern, direct_modern),
        ("through omega, 2026-era client", modern, direct_modern),
    ):
        rows.append(
            f"| {label} | {row['p50_ms']:.2f} ms ({row['p50_ms'] / base['p50_ms']:.2f}x) "
            f"| {row['p99_ms']:.2f} ms | {row['calls_per_s']:.0f} calls/s "
            f"({row['calls_per_s'] / base['calls_per_s']:.2f}x) |"
        )
    rows += [
        "",
        "| cold start, 8 servers x 0.5 s initialize | seconds |",
        "|---|---|",
        f"| `omega-mcp serve` launched → tools/list with all 8 servers | {results['cold_start_8_s']:.2f} s |",
        f"| in process (`Downstreams` connect only) | {results['cold_start_8_in_process_s']:.2f} s |",
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--downstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per path (default 1000)")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON")
    args = parser.parse_args()
    if args.downstream:
        serve_downstream()
        return
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    results = anyio.run(run, args.calls)
    print(json.dumps(results, indent=2) if args.json else table(results))


if __name__ == "__main__":
    main()
