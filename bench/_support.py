"""What the benchmarks share: how omega is launched, percentiles, paired ratios, a process's CPU and RSS.

A benchmark section is a function returning a `Section` (a title, the command that reproduces it,
its markdown tables and its raw numbers); `run.py` runs the sections in one go and prints them.
`Options.omega_src` points every omega process a section starts at another checkout's `src/`;
`Options.before_src` adds another checkout's omega as one more path ("B0", "omega before"),
measured call by call in the same rotation as the others (a paired before/after on one machine).
The bench code itself and the floors it measures omega against stay this checkout's.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIXTURE = REPO / "tests" / "fixtures" / "echo_server.py"
PYTHON = sys.executable


@dataclass
class Options:
    """What every section takes: how long to measure, and which omega to start."""

    calls: int = 1000
    """Sequential calls per path for latency (throughput and cold start scale with it)."""
    omega_src: str | None = None
    """Another checkout's `src/` for the omega processes (None: the installed one)."""
    before_src: str | None = None
    """Another checkout's `src/`, measured beside this one as "B0" (None: no such row)."""
    quick: bool = False
    """Fewer rounds: a smoke run, not numbers for the README."""


@dataclass
class Section:
    """One part of the benchmark: markdown to print, numbers to keep."""

    title: str
    command: str
    markdown: str
    data: dict[str, Any] = field(default_factory=dict)


def omega_env(options: Options, extra: dict[str, str] | None = None, *, before: bool = False) -> dict[str, str]:
    """The environment of an omega process (its `src/` first on the path when another checkout is measured;
    `before`: the `before_src` one)."""
    env = {**os.environ, **(extra or {})}
    env.setdefault("PYTHONWARNINGS", "ignore")
    src = options.before_src if before else options.omega_src
    if src:
        env["PYTHONPATH"] = src
    return env


def add_options(parser: Any) -> None:
    """The command-line options every section takes (besides its own)."""
    parser.add_argument("--omega-src", help="measure the omega of another checkout (its src/ directory)")
    parser.add_argument("--before-src", help="also measure another checkout's omega (its src/), as 'omega before'")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON")


def options_from(args: Any) -> Options:
    return Options(calls=args.calls, omega_src=args.omega_src, before_src=args.before_src, quick=args.quick)


def section_main(section: Callable[[Options], Section], doc: str | None, *, calls: int, what: str) -> None:
    """A section module run alone: its options (`--calls`, default `calls` `what`), then its markdown or JSON."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=calls, help=f"sequential calls per {what} (default {calls})")
    add_options(parser)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    result = section(options_from(args))
    print(json.dumps(result.data, indent=2) if args.json else result.markdown)


def with_pid_file(command: Sequence[str], pid_file: Path) -> list[str]:
    """`command` through `sh -c 'echo $$ > PID_FILE; exec ...'`: the process keeps that pid, so it can be watched."""
    return ["/bin/sh", "-c", 'echo $$ > "$0"; exec "$@"', str(pid_file), *command]


def read_pid(pid_file: Path, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = pid_file.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return int(text)
        time.sleep(0.01)
    raise RuntimeError(f"no pid in {pid_file}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> dict[str, float]:
    """`rss` (now) and `peak` (the high-water mark, VmHWM) of a live process, in MB (10^6 bytes)."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found["rss" if key == "VmRSS" else "peak"] = int(value.split()[0]) * 1024 / 1e6
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with status {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def paired_ratio(samples: Sequence[float], base: Sequence[float]) -> float:
    """The median of per-round ratios: each round timed both paths back to back, so drift cancels."""
    return statistics.median(s / b for s, b in zip(samples, base, strict=True))


def load_average() -> float:
    return os.getloadavg()[0]


async def paired_latency(
    callers: dict[str, Callable[[], Awaitable[None]]], rounds: int, *, warmup: int
) -> dict[str, list[float]]:
    """`warmup` calls of each, then one call per caller per round, the order rotating; returns the
    samples (seconds) per caller, round by round, so drift on a shared machine hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in callers}
    names = list(callers)
    for name in names:
        for _ in range(warmup):
            await callers[name]()
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            await callers[name]()
            samples[name].append(time.perf_counter() - start)
    return samples
