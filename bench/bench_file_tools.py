"""What `read`, `write`, `edit` and `bash` calls cost through the Toolbox, in a client session's world.

Usage: python bench/bench_file_tools.py [--runs 200] [--rounds 3] [--against SRC ...]
       python bench/bench_file_tools.py --interleaved [--runs 2000]
       [PYTHONPATH=SRC] python bench/bench_file_tools.py --alternated [--runs 150]

Each measurement is a fresh process (a sandbox-mode Toolbox, one client session, a small workspace)
that times `--runs` calls of each tool after a warm-up call (the session's world, its bash zygote
session and file worker are made then) and prints p50/p90 in ms. `--against SRC` also measures the
omega_mcp package under SRC (e.g. a checkout of main's `src`), alternating the versions round by
round so that both see the same machine load; the table gives the median over rounds of each p50
and p90. `--interleaved` times each file tool's work alone (no Toolbox, no event-loop hop) with and
without the session's file worker, alternated call by call in one process: on a busy machine that is
the steadier way to see what the worker adds. `--alternated` does the same with whole `write` and
`edit` calls through the Toolbox (every other call given no worker). Numbers are from one run on one machine: compare
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

_TOOLS = ("read", "write", "edit", "bash")


def _how() -> Callable[[object], dict[str, Any]]:
    """How the version under test takes a call's owner: in a `CallContext`, or (a src from before the
    call's context) as a keyword of its own."""
    try:
        from omega_mcp.calling import CallContext
    except ImportError:
        return lambda owner: {"owner": owner}
    return lambda owner: {"context": CallContext(owner=owner)}


async def _measure(runs: int) -> dict[str, list[float]]:
    from omega_mcp.sandbox.policy import SandboxPolicy  # imported here: the version under test, by PYTHONPATH
    from omega_mcp.toolbox import Toolbox

    how = _how()
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
    """Each file tool's work with and without the session's file worker, alternated call by call in one
    process (both see the same load and the same disk): the worker's own cost, whatever the machine
    does. `write` and `edit` fsync on both sides, in one directory."""
    import anyio

    from omega_mcp.builtin import read as read_tool
    from omega_mcp.builtin import write as write_tool
    from omega_mcp.builtin.schemas import EditArgs, ReadArgs
    from omega_mcp.sandbox import fileworker_client
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.sandbox.world import Worlds

    with tempfile.TemporaryDirectory(prefix="omega-bench-files-") as place:
        ws = Path(place) / "ws"
        ws.mkdir()
        (ws / "small.txt").write_text("".join(f"line {i}\n" for i in range(40)))
        for side in ("here", "world"):
            (ws / f"edit-{side}.txt").write_text("alpha beta\n")
        worlds = Worlds(SandboxPolicy(mode="sandbox", home=Path(place) / "home", workspace=ws, tmp_dir=Path("/tmp")))
        owner = object()
        policy = worlds.policy_for(owner)
        worker = await fileworker_client.worker_for(policy)
        if worker is None:
            raise SystemExit("no file worker here (rwx, no user namespaces or no OS sandbox)")
        read_args = ReadArgs(file_path="small.txt")

        def edit_args(i: int) -> EditArgs:
            old, new = ("beta", "gamma") if i % 2 == 0 else ("gamma", "beta")
            return EditArgs(file_path="edit.txt", old_string=old, new_string=new)

        work = {  # tool: (without the worker, with it); the work itself, no thread hop
            "read": (
                lambda i: read_tool._read_sync(policy, read_args, None),
                lambda i: read_tool._read_sync(policy, read_args, worker),
            ),
            "write": (
                lambda i: write_tool._write_sync(policy, ws / "out-here.txt", b"content %d\n" % i, None),
                lambda i: write_tool._write_world(policy, ws / "out-world.txt", b"content %d\n" % i, worker),
            ),
            "edit": (
                lambda i: write_tool._edit_sync(policy, ws / "edit-here.txt", edit_args(i), None),
                lambda i: write_tool._edit_world(policy, ws / "edit-world.txt", edit_args(i), worker),
            ),
        }
        times: dict[str, tuple[list[float], list[float]]] = {tool: ([], []) for tool in work}
        for i in range(runs):
            for tool, sides in work.items():
                for side, call in enumerate(sides):
                    start = time.perf_counter()
                    call(i)
                    times[tool][side].append((time.perf_counter() - start) * 1000)
        await anyio.to_thread.run_sync(worlds.close, owner)
    print(f"each tool's work, {runs} calls each way, alternated (ms, p50 / p90)\n")
    print("| tool | path checks in omega | in the session's world | p50 difference |\n|---|---|---|---|")
    for tool, (here, world) in times.items():
        cells = [f"{statistics.median(v):.3f} / {statistics.quantiles(v, n=10)[-1]:.3f}" for v in (here, world)]
        diff = statistics.median(world) - statistics.median(here)
        print(f"| {tool} | {cells[0]} | {cells[1]} | {diff:+.3f} |")


async def _alternated(runs: int) -> None:
    """Whole `write` and `edit` calls through the Toolbox with and without the session's file worker,
    alternated call by call in one process: every other call is given no worker, so it takes the
    path without a world (omega's process, as the release before the worker wrote every file)."""
    from omega_mcp.sandbox import fileworker_client
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.toolbox import Toolbox

    how = _how()
    off = [False]
    real_for = fileworker_client.worker_for
    real_started = getattr(fileworker_client, "started", None)  # older versions have none

    async def worker_for(policy: SandboxPolicy, *rest: object) -> object:
        return None if off[0] else await real_for(policy, *rest)  # type: ignore[arg-type]

    def started(policy: SandboxPolicy) -> object:
        return None if off[0] or real_started is None else real_started(policy)

    fileworker_client.worker_for = worker_for  # type: ignore[assignment]
    if real_started is not None:
        fileworker_client.started = started  # type: ignore[assignment]
    with tempfile.TemporaryDirectory(prefix="omega-bench-files-") as place:
        ws = Path(place) / "ws"
        ws.mkdir()
        for side in ("here", "world"):
            (ws / f"edit-{side}.txt").write_text("alpha beta\n")
        policy = SandboxPolicy(mode="sandbox", home=Path(place) / "home", workspace=ws, tmp_dir=Path("/tmp"))
        owner = object()
        times: dict[str, tuple[list[float], list[float]]] = {"write": ([], []), "edit": ([], [])}
        async with Toolbox(policy) as box:
            await box.call_tool("write", {"file_path": "warm.txt", "content": "x"}, **how(owner))
            for i in range(runs):
                old, new = ("beta", "gamma") if i % 2 == 0 else ("gamma", "beta")
                for index, side in enumerate(("here", "world")):
                    off[0] = side == "here"
                    calls = {
                        "write": {"file_path": f"out-{side}.txt", "content": f"content {i}\n"},
                        "edit": {"file_path": f"edit-{side}.txt", "old_string": old, "new_string": new},
                    }
                    for tool, args in calls.items():
                        start = time.perf_counter()
                        result = await box.call_tool(tool, args, **how(owner))
                        times[tool][index].append((time.perf_counter() - start) * 1000)
                        if result.is_error:
                            raise SystemExit(f"{tool} failed: {result.content}")
    print(f"whole calls, {runs} each way, alternated (ms, p50 / p90)\n")
    print("| tool | omega's process | the session's world | p50 difference |\n|---|---|---|---|")
    for tool, (here, world) in times.items():
        cells = [f"{statistics.median(v):.3f} / {statistics.quantiles(v, n=10)[-1]:.3f}" for v in (here, world)]
        print(f"| {tool} | {cells[0]} | {cells[1]} | {statistics.median(world) - statistics.median(here):+.3f} |")


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
        "--interleaved",
        action="store_true",
        help="read, write and edit with and without the file worker, alternated in one process",
    )
    parser.add_argument(
        "--alternated", action="store_true", help="whole write/edit calls with and without the worker, alternated"
    )
    args = parser.parse_args()
    if args.alternated:
        import anyio

        anyio.run(_alternated, args.runs)
        return
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
    for version in versions[1:]:
        print(f"\nthis checkout minus {version}, p50 of each round paired with the same round's (ms):\n")
        print("| tool | median difference | smallest | largest | rounds faster |\n|---|---|---|---|---|")
        for tool in _TOOLS:
            pairs = zip(rounds[None], rounds[version], strict=True)
            diffs = [ours[tool][0] - theirs[tool][0] for ours, theirs in pairs]
            faster = sum(d < 0 for d in diffs)
            print(
                f"| {tool} | {statistics.median(diffs):+.3f} | {min(diffs):+.3f} | {max(diffs):+.3f} "
                f"| {faster} of {len(diffs)} |"
            )


if __name__ == "__main__":
    main()
