"""What starting a sandboxed bash costs over bare bash: p50/p90 of `true`, each way in one interleaved run.

Usage: python bench/bench_trampoline.py [--runs 200] [--against OLD_CHECKOUT/src]

Rows, measured round-robin (a few calls of each in turn, so load on a shared machine hits all alike):
- `bare bash`: bash spawned from the event loop with nothing around it, the floor;
- `bwrap` (when installed): bubblewrap with a read-only root, a private /dev, /proc and /tmp, and every
  namespace unshared (`--unshare-all`), spawned the same way;
- `omega: bash launch (zygote)`: what the bash tool does to start and reap a command in sandbox mode
  with every layer on (`bash_process.open_bash`: the plan, the bash zygote, a session's private /tmp,
  the PID 1 and its copy of the session's mounts, Landlock), output read to the end;
- `omega: bash tool call`: the whole `Toolbox.call_tool("bash")`, protected names and result included;
- `omega: trampoline`: the per-call interpreter that confined stdio servers still start through
  (and bash did before the zygote): `bash_launch(...).argv` spawned in a new session.
With `--against` the last three rows are also measured for another checkout's `src` (the previous
release), in a worker process that imports it, interleaved with the rest. `measure()` returns the
samples (seconds) by row, for the one-command benchmark; `table()` prints them as markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

BASH = ["/bin/bash", "--noprofile", "--norc", "-c", "true"]
BWRAP = [
    *("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"),
    *("--unshare-all", "--die-with-parent", "--new-session"),
]
_BATCH = 5
_WARMUP = 10


async def _spawn(
    argv: list[str], *, new_session: bool = False, env: dict[str, str] | None = None, cwd: Path | None = None
) -> None:
    process = await anyio.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=new_session,
        env=env,
        cwd=cwd,
    )
    async with process:
        assert process.stdout is not None
        async for _ in process.stdout:
            pass
        if await process.wait() != 0:
            raise SystemExit(f"{argv[0]} failed")


class _Omega:
    """The rows measured with the omega_mcp importable here (this checkout, or a worker's)."""

    def __init__(self, base: Path) -> None:
        from omega_mcp.sandbox.policy import SandboxPolicy
        from omega_mcp.sandbox.world import Worlds
        from omega_mcp.toolbox import Toolbox

        for name in ("home", "ws"):
            (base / name).mkdir(parents=True, exist_ok=True)
        policy = SandboxPolicy(mode="sandbox", home=base / "home", workspace=base / "ws", tmp_dir=Path("/tmp"))
        self.toolbox = Toolbox(policy)
        self.worlds = Worlds(policy)
        # A session's policy (its private /tmp), as the Toolbox gives each call of one client.
        self.session = self.worlds.policy_for(None)
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> _Omega:
        await self._stack.enter_async_context(self.toolbox)
        self._stack.callback(self.worlds.close_all)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def launch(self) -> None:
        from omega_mcp.builtin.bash_process import open_bash

        async with open_bash(self.session, "true") as process:
            assert process.stdout is not None
            async for _ in process.stdout:
                pass
            if await process.wait() != 0:
                raise SystemExit("bash failed")

    async def tool(self) -> None:
        result = await self.toolbox.call_tool("bash", {"command": "true"})
        if result.is_error:
            raise SystemExit(f"bash failed: {result.content}")

    async def trampoline(self) -> None:
        from omega_mcp.sandbox.launch import bash_launch

        launch = bash_launch(self.session, "true")
        await _spawn(list(launch.argv), new_session=True, env=launch.env, cwd=launch.cwd)


async def _timed(action: Callable[[], Awaitable[None]], count: int) -> list[float]:
    samples: list[float] = []
    for _ in range(count):
        start = time.perf_counter()
        await action()
        samples.append(time.perf_counter() - start)
    return samples


class _Worker:
    """The omega rows of another checkout, in a process that imports it (`--worker`)."""

    def __init__(self, src: Path, base: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        argv = [sys.executable, __file__, "--worker", str(base)]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)

    def run(self, row: str, count: int) -> list[float]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{row} {count}\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


async def _serve_worker(base: Path) -> None:
    async with _Omega(base) as omega:
        actions = {"launch": omega.launch, "tool": omega.tool, "trampoline": omega.trampoline}
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            row, count = line.split()
            print(json.dumps(await _timed(actions[row], int(count))), flush=True)


async def _measure(runs: int, against: Path | None, base: Path) -> dict[str, list[float]]:
    async with _Omega(base / "new") as omega:
        rows: dict[str, Callable[[int], Awaitable[list[float]]]] = {
            "bare bash": lambda n: _timed(lambda: _spawn(BASH), n),
        }
        if shutil.which("bwrap"):
            rows["bwrap (ro root, private /dev /proc /tmp, all namespaces)"] = lambda n: _timed(
                lambda: _spawn([*BWRAP, *BASH]), n
            )
        rows["omega: bash launch (zygote, all layers)"] = lambda n: _timed(omega.launch, n)
        rows["omega: bash tool call"] = lambda n: _timed(omega.tool, n)
        rows["omega: trampoline (confined servers' path)"] = lambda n: _timed(omega.trampoline, n)
        worker = _Worker(against, base / "old") if against is not None else None
        if worker is not None:
            for row, name in (("launch", "bash launch"), ("tool", "bash tool call"), ("trampoline", "trampoline")):
                rows[f"previous omega: {name}"] = lambda n, row=row: anyio.to_thread.run_sync(worker.run, row, n)
        try:
            samples: dict[str, list[float]] = {name: [] for name in rows}
            for run in rows.values():
                await run(_WARMUP)  # page cache, pyc files, the zygote and the session
            while any(len(s) < runs for s in samples.values()):
                for name, run in rows.items():
                    samples[name] += await run(min(_BATCH, runs - len(samples[name])))
        finally:
            if worker is not None:
                worker.close()
    return samples


def measure(runs: int = 200, against: Path | None = None) -> dict[str, list[float]]:
    """Seconds per `true`, by row, measured round-robin in one run (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        return anyio.run(_measure, runs, against, Path(tmp))


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def table(samples: dict[str, list[float]]) -> str:
    """The rows as a markdown table: p50, p90 and p50 over bare bash, in ms."""
    floor = _pct(samples["bare bash"], 0.5)
    lines = ["| launch of `bash -c true` | p50 ms | p90 ms | over bare bash, p50 ms |", "|---|---:|---:|---:|"]
    for name, found in samples.items():
        p50 = _pct(found, 0.5)
        lines.append(f"| {name} | {p50:.1f} | {_pct(found, 0.9):.1f} | {p50 - floor:+.1f} |")
    return "\n".join(lines)


def section(options: Any) -> Any:
    """This benchmark as a section of `run.py` (`options.before_src` is `--against`; 200 runs, 30 quick)."""
    from _support import Section, load_average

    runs = 30 if options.quick else 200
    before = load_average()
    samples = measure(runs, Path(options.before_src) if options.before_src else None)
    data = {"load_before": before, "load_after": load_average(), "runs": runs, "p50_ms": {}}
    data["p50_ms"] = {name: _pct(found, 0.5) for name, found in samples.items()}
    return Section("Sandboxed bash", f"python bench/bench_trampoline.py --runs {runs}", table(samples), data)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--against", type=Path, help="another checkout's src directory (the previous release)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        anyio.run(_serve_worker, args.worker)
        return
    samples = measure(args.runs, args.against)
    load = os.getloadavg()[0]
    print(f"`bash -c true`, {args.runs} runs of each row, interleaved; {os.cpu_count()} CPUs, load {load:.1f}\n")
    print(table(samples))


if __name__ == "__main__":
    main()
