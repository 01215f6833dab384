"""What one `bash` tool call costs end to end, through the Toolbox: p50/p90 of running `true`.

Usage: python bench/bench_bash_tool.py [--runs 100] [--dirs 0 300 3000]

Unlike `bench_trampoline.py` (the launch alone), this is the whole call a client pays for: the
Toolbox route, the session's private world, the protected-names check before and after the
command, the trampoline and the output. Each row is a sandbox-mode Toolbox whose workspace holds a
tree of that many directories (a project: source dirs, a `.git`, a `.vscode`), to show how the
protected-names check scales. Prints a markdown table; numbers are from one run on one machine.
"""

from __future__ import annotations

import argparse
import os
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


async def _measure(policy: SandboxPolicy, runs: int) -> list[float]:
    samples: list[float] = []
    async with Toolbox(policy) as toolbox:
        for i in range(runs + 5):
            start = time.perf_counter()
            result = await toolbox.call_tool("bash", {"command": "true"})
            if result.is_error:
                raise SystemExit(f"bash failed: {result.content}")
            if i >= 5:  # warm-up: page cache, pyc files, the first scan
                samples.append(time.perf_counter() - start)
    return samples


def main(runs: int, sizes: list[int]) -> None:
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        for dirs in sizes:
            base = Path(tmp) / f"t{dirs}"
            for name in ("home", "ws", "tmp"):
                (base / name).mkdir(parents=True)
            _tree(base / "ws", dirs)
            policy = SandboxPolicy(mode="sandbox", home=base / "home", workspace=base / "ws", tmp_dir=Path("/tmp"))
            rows[f"sandbox, workspace of {dirs} directories"] = anyio.run(_measure, policy, runs)
    print(f"`bash true` through Toolbox.call_tool, {runs} runs each\n")
    print("| workspace | p50 ms | p90 ms | mean ms |")
    print("|---|---:|---:|---:|")
    for name, samples in rows.items():
        mean = statistics.mean(samples) * 1000
        print(f"| {name} | {_pct(samples, 0.5):.1f} | {_pct(samples, 0.9):.1f} | {mean:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--dirs", type=int, nargs="+", default=[0, 300, 3000])
    args = parser.parse_args()
    main(args.runs, args.dirs)
