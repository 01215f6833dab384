"""What one `bash` tool call costs end to end, through the Toolbox: p50/p90 of running `true`.

Usage: python bench/bench_bash_tool.py [--runs 100] [--dirs 0 300 3000]

Besides wall time it reports the CPU time (user + system, of omega and the children it reaped) each
call costs: on a shared, busy machine that is the steadier number to compare two versions by. Where
bash starts through the bash zygote its processes are the zygote's, not omega's, so their CPU time is
not in it: compare two such versions by it, or compare wall time.

Unlike `bench_trampoline.py` (the launch alone), this is the whole call a client pays for: the
Toolbox route, the session's private world, the protected-names check before and after the
command, the trampoline and the output. Each row is a sandbox-mode Toolbox whose workspace holds a
tree of that many directories (a project: source dirs, a `.git`, a `.vscode`), to show how the
protected-names check scales. Prints a markdown table; numbers are from one run on one machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox


def _tree(root: Path, dirs: int) -> None:
    """`dirs` directories, 10 per level, with a few files each and the usual protected names."""
    root.mkdir(parents=True, exist_ok=True)
    (root / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (root / ".vscode").mkdir(exist_ok=True)
    made = 0
    queue = [root / "src"]
    while made < dirs:
        parent = queue.pop(0)
        for i in range(10):
            if made >= dirs:
                break
            child = parent / f"d{i}"
            child.mkdir(parents=True, exist_ok=True)
            (child / "file.py").write_text("x = 1\n")
            queue.append(child)
            made += 1


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def _measure(policy: SandboxPolicy, runs: int) -> tuple[list[float], list[float]]:
    wall: list[float] = []
    cpu: list[float] = []
    async with Toolbox(policy) as toolbox:
        for i in range(runs + 5):
            start, start_cpu = time.perf_counter(), _cpu()
            result = await toolbox.call_tool("bash", {"command": "true"})
            if result.is_error:
                raise SystemExit(f"bash failed: {result.content}")
            if i >= 5:  # warm-up: page cache, pyc files, the first look at the workspace
                wall.append(time.perf_counter() - start)
                cpu.append(_cpu() - start_cpu)
    return wall, cpu


def main(runs: int, sizes: list[int]) -> None:
    rows: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        for dirs in sizes:
            base = Path(tmp) / f"t{dirs}"
            for name in ("home", "ws", "tmp"):
                (base / name).mkdir(parents=True)
            _tree(base / "ws", dirs)
            policy = SandboxPolicy(mode="sandbox", home=base / "home", workspace=base / "ws", tmp_dir=Path("/tmp"))
            rows[f"sandbox, workspace of {dirs} directories"] = anyio.run(_measure, policy, runs)
    print(f"`bash true` through Toolbox.call_tool, {runs} runs each\n")
    print("| workspace | wall p50 ms | wall p90 ms | CPU p50 ms | CPU mean ms |")
    print("|---|---:|---:|---:|---:|")
    for name, (wall, cpu) in rows.items():
        print(
            f"| {name} | {_pct(wall, 0.5):.1f} | {_pct(wall, 0.9):.1f} | {_pct(cpu, 0.5):.1f} "
            f"| {statistics.mean(cpu) * 1000:.1f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--dirs", type=int, nargs="+", default=[0, 300, 3000])
    args = parser.parse_args()
    main(args.runs, args.dirs)
