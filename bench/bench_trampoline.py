"""What the bash sandbox trampoline adds to one command: p50/p90 of running `true`.

Usage: python bench/bench_trampoline.py [--runs 200]

Each row spawns the argv from `bash_launch` exactly as the bash tool does (new session, stdin
/dev/null, stdout piped) and waits for it. `bare bash` is the floor: bash without the trampoline.
`rwx` adds the trampoline (rlimits, user+PID+mount namespaces); `sandbox` adds Landlock, its
own network namespace and the covers over secrets and host sockets on top. Prints a markdown
table; numbers are from one run on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from omega_mcp.sandbox.launch import bash_launch, describe_sandbox
from omega_mcp.sandbox.policy import SandboxPolicy


def _run(argv: tuple[str, ...], env: dict[str, str], cwd: Path, runs: int) -> list[float]:
    samples: list[float] = []
    for i in range(runs + 10):
        start = time.perf_counter()
        done = subprocess.run(
            argv,
            check=False,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"{argv[-1]!r} failed with {done.returncode}")
        if i >= 10:  # warm-up: page cache, pyc files
            samples.append(time.perf_counter() - start)
    return samples


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        policy = SandboxPolicy(mode="sandbox", home=base / "home", workspace=base / "ws", tmp_dir=base / "tmp")
        sandbox = bash_launch(policy, "true")
        rwx = bash_launch(replace(policy, mode="rwx"), "true")
        rows = {
            "bare bash": _run(("/bin/bash", "--noprofile", "--norc", "-c", "true"), sandbox.env, sandbox.cwd, runs),
            "rwx (trampoline, namespaces)": _run(rwx.argv, rwx.env, rwx.cwd, runs),
            "sandbox (+ Landlock, network namespace, covers)": _run(sandbox.argv, sandbox.env, sandbox.cwd, runs),
        }
        info = describe_sandbox(policy)
    floor = statistics.median(rows["bare bash"]) * 1000
    print(
        f"`true` through bash_launch, {runs} runs each; Landlock ABI {info['landlock_abi']}, "
        f"pid namespace {info['pid_namespace']}\n"
    )
    print("| launch | p50 ms | p90 ms | added p50 ms |")
    print("|---|---:|---:|---:|")
    for name, samples in rows.items():
        p50 = _pct(samples, 0.5)
        print(f"| {name} | {p50:.1f} | {_pct(samples, 0.9):.1f} | {p50 - floor:+.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    main(parser.parse_args().runs)
