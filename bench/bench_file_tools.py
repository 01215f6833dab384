"""What `read`, `write`, `edit` and `bash` calls cost through the Toolbox, in a client session's world.

Usage: python bench/bench_file_tools.py [--runs 200] [--rounds 3] [--against SRC ...]
       python bench/bench_file_tools.py --interleaved [--runs 2000]

Each measurement is a fresh process (a sandbox-mode Toolbox, one client session, a small workspace)
that times `--runs` calls of each tool after a warm-up call (the session's world, its bash zygote
session and file worker are made then) and prints p50/p90 in ms. `--against SRC` also measures the
omega_mcp package under SRC (e.g. a checkout of main's `src`), alternating the versions round by
round so that both see the same machine load; the table gives the median over rounds of each p50
and p90. `--interleaved` times the `read` tool's work alone (no Toolbox, no event-loop hop) with and
without the session's file worker, alternated call by call in one process: on a busy machine that is
the steadier way to see what the worker adds. Numbers are from one run on one machine: compare
versions within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_TOOLS = ("read", "write", "edit", "bash")


async def _measure(runs: int) -> dict[str, list[float]]:
    from omega_mcp.sandbox.policy import SandboxPolicy  # imported here: the version under test, by PYTHONPATH
    from omega_mcp.toolbox import Toolbox

    try:
        from omega_mcp.calling import CallContext

        def how(owner: object) -> dict[str, Any]:
            return {"context": CallContext(owner=owner)}
    except ImportError:  # a src from before the call's context: the owner was a keyword of its own

        def how(owner: object) -> dict[str, Any]:
            return {"owner": owner}

    with tempfile.TemporaryDirectory(prefix="omega-bench-files-") as place:
        ws = Path(place) / "ws"
        ws.mkdir()
        (ws / "small.txt").write_text("".join(f"line {i}\n" for i in range(40)))
        (ws / "edit.txt").write_text("alpha beta\n")
        policy = SandboxPolicy(mode="sandbox", home=Path(place) / "home", workspace=ws, tmp_dir=Path("/tmp"))
        owner = object()
        calls = {
            "read": lambda i: {"file_path": "small.txt"},
            "write": lambda i: {"file_path": "out.txt", "content": f"content {i}\n"},
            "edit": lambda i: {
                "file_path": "edit.txt",
                "old_string": "beta" if i % 2 == 0 else "gamma",
                "new_string": "gamma" if i % 2 == 0 else "beta",
            },
            "bash": lambda i: {"command": "true"},
        }
        found: dict[str, list[float]] = {}
        async with Toolbox(policy) as box:
            for tool, args in calls.items():
                result = await box.call_tool(tool, args(0), **how(owner))  # warm-up: world, zygote, worker
                if result.is_error:
                    raise SystemExit(f"{tool} failed: {result.content}")
                times: list[float] = []
                for i in range(1, runs + 1):
                    start = time.perf_counter()
                    await box.call_tool(tool, args(i), **how(owner))
                    times.append((time.perf_counter() - start) * 1000)
                found[tool] = times
        return found


async def _interleaved(runs: int) -> None:
    """The whole `read` of a small file, with and without the session's file worker, alternated call
    by call in one process (both see the same load): the worker's own cost, whatever the machine does."""
    import anyio

    from omega_mcp.builtin import read as read_tool
    from omega_mcp.builtin.schemas import ReadArgs
    from omega_mcp.sandbox import fileworker_client
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.sandbox.world import Worlds

    with tempfile.TemporaryDirectory(prefix="omega-bench-files-") as place:
        ws = Path(place) / "ws"
        ws.mkdir()
        (ws / "small.txt").write_text("".join(f"line {i}\n" for i in range(40)))
        worlds = Worlds(SandboxPolicy(mode="sandbox", home=Path(place) / "home", workspace=ws, tmp_dir=Path("/tmp")))
        owner = object()
        policy = worlds.policy_for(owner)
        args = ReadArgs(file_path="small.txt")
        worker = await fileworker_client.worker_for(policy)
        if worker is None:
            raise SystemExit("no file worker here (rwx, no user namespaces or no OS sandbox)")
        times: dict[str, list[float]] = {"path checks in omega": [], "in the session's world": []}
        for _ in range(runs):
            for label, which in (("path checks in omega", None), ("in the session's world", worker)):
                start = time.perf_counter()
                read_tool._read_sync(policy, args, which)  # the work itself, no thread hop
                times[label].append((time.perf_counter() - start) * 1000)
        await anyio.to_thread.run_sync(worlds.close, owner)
    print(f"read of a 40-line file, {runs} calls each, alternated (ms)\n")
    print("| read | p50 | p90 |\n|---|---|---|")
    for label, values in times.items():
        print(f"| {label} | {statistics.median(values):.3f} | {statistics.quantiles(values, n=10)[-1]:.3f} |")


def _one(runs: int) -> None:
    import anyio

    times = anyio.run(_measure, runs)
    summary = {
        tool: [statistics.median(values), statistics.quantiles(values, n=10)[-1]] for tool, values in times.items()
    }
    print(json.dumps(summary))


def _run(src: str | None, runs: int) -> dict[str, list[float]]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    done = subprocess.run(
        [sys.executable, __file__, "--one", "--runs", str(runs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the measurement of {src or 'this checkout'} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", nargs="*", default=[], help="other src directories to measure too")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--interleaved", action="store_true", help="read with and without the file worker, alternated in one process"
    )
    args = parser.parse_args()
    if args.interleaved:
        import anyio

        anyio.run(_interleaved, args.runs)
        return
    if args.one:
        _one(args.runs)
        return
    versions: list[str | None] = [None, *args.against]
    rounds: dict[str | None, list[dict[str, list[float]]]] = {version: [] for version in versions}
    for _ in range(args.rounds):
        for version in versions:
            rounds[version].append(_run(version, args.runs))
    print(f"{args.runs} calls per tool, median of {args.rounds} rounds (ms, p50 / p90)\n")
    print("| version | " + " | ".join(_TOOLS) + " |")
    print("|---|" + "---|" * len(_TOOLS))
    for version in versions:
        cells = []
        for tool in _TOOLS:
            p50 = statistics.median(r[tool][0] for r in rounds[version])
            p90 = statistics.median(r[tool][1] for r in rounds[version])
            cells.append(f"{p50:.3f} / {p90:.3f}")
        print(f"| {version or 'this checkout'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
