"""One hub per user: W windows x S stdio servers through `omega-mcp attach` against W x `omega-mcp serve`.

    python bench/bench_attach.py                       # 10 windows x 20 servers
    python bench/bench_attach.py --windows 4 --servers 5 --json

Each window is a real process speaking newline-delimited JSON-RPC on its pipes (initialize,
initialized, tools/list, listing again after each list_changed until every server's tools are there),
started as `claude-config` writes it: the `omega-mcp` console script beside this interpreter (else
`python -P -m omega_mcp`). omega's bytecode is compiled first when it is not (a development tree run
with PYTHONDONTWRITEBYTECODE has none; an installed omega has), so that neither side pays for it.
Reported, each beside its floor: downstream server processes once every window is up (floor: S,
one per server); PSS added per extra window (/proc/PID/smaps_rollup, everything the windows and their
hub or servers hold, (total at W - total at 1) / (W - 1); floor: a bare interpreter sleeping); time
from spawning the window's process to a complete tools/list, p50, with the hub running (after
`hub start`; floor: a bare interpreter's start and exit) and with no hub (the first window, hub
stopped before each sample; floor: `serve`'s own cold start in the same run), and for that cold
window the time to its `initialize` answer (attach answers it from the last hub's greeting).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ECHO = HERE / "echo_server.py"
PYTHON = sys.executable
_SCRIPT = Path(PYTHON).with_name("omega-mcp")
OMEGA = [str(_SCRIPT)] if _SCRIPT.exists() else [PYTHON, "-P", "-m", "omega_mcp"]
_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _procs(marker: str) -> list[int]:
    """Every live process whose command line mentions `marker` (this run's directory)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


class Window:
    """One client window: a process on pipes, listed until it has `want` downstream tools."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
        )
        self.buffer = b""
        self.next_id = 2
        self.initialized = 0.0

    def send(self, message: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self, deadline: float) -> dict[str, object]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer in time")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("the window's process exited")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def complete_list(self, want: int, seconds: float = 120.0) -> float:
        """Seconds from spawn until a tools/list holds `want` downstream tools."""
        deadline = time.monotonic() + seconds
        self.send(_INIT)
        while self.read(deadline).get("id") != 1:
            pass
        self.initialized = time.perf_counter() - self.started
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        while True:
            asked = self.next_id
            self.next_id += 1
            self.send({"jsonrpc": "2.0", "id": asked, "method": "tools/list"})
            while (answer := self.read(deadline)).get("id") != asked:
                pass
            result = answer.get("result")
            tools = result.get("tools", []) if isinstance(result, dict) else []
            if sum(1 for t in tools if str(t.get("name", "")).startswith("mcp__")) >= want:
                return time.perf_counter() - self.started
            while self.read(deadline).get("method") != "notifications/tools/list_changed":
                pass

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _config(root: Path, servers: int) -> Path:
    echo = root / "echo_server.py"  # a copy: this run's servers are the processes running it
    shutil.copy(ECHO, echo)
    config = root / "servers.toml"
    entries = [f"[servers.s{i}]\ncommand = {PYTHON!r}\nargs = [{str(echo)!r}]\n" for i in range(servers)]
    config.write_text('[sandbox]\nmode = "rwx"\n' + "".join(entries))
    return config


def _omega(env: dict[str, str], root: Path, *args: str) -> None:
    subprocess.run([PYTHON, "-m", "omega_mcp", *args], env=env, cwd=root, capture_output=True, timeout=300, check=False)


def _floor_start() -> float:
    started = time.perf_counter()
    subprocess.run([PYTHON, "-c", "pass"], check=True)
    return time.perf_counter() - started


def _floor_pss() -> float:
    proc = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(30)"])
    time.sleep(0.5)
    pss = _pss_kb(proc.pid)
    proc.kill()
    proc.wait()
    return pss / 1024


def _run(
    kind: str, windows: int, servers: int, root: Path, env: dict[str, str], *, cold_runs: int
) -> dict[str, object]:
    config = _config(root, servers)
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    argv = [*OMEGA, kind, "--config", str(config), "--workspace", str(ws)]
    marker = str(root)
    cold: list[float] = []
    cold_init: list[float] = []
    if kind == "attach":
        for _ in range(cold_runs):  # no hub: the window starts it
            window = Window(argv, env, root)
            cold.append(window.complete_list(servers))
            cold_init.append(window.initialized)
            window.close()
            _omega(env, root, "hub", "stop", "--config", str(config))
        _omega(env, root, "hub", "start", "--config", str(config))
    opened: list[Window] = []
    times: list[float] = []
    inits: list[float] = []
    totals: list[float] = []
    try:
        for _ in range(windows):
            window = Window(argv, env, root)
            times.append(window.complete_list(servers))
            inits.append(window.initialized)
            opened.append(window)
            totals.append(sum(_pss_kb(p) for p in _procs(marker)) / 1024)
        server_processes = len(_procs(str(root / "echo_server.py")))
    finally:
        for window in opened:
            window.close()
        if kind == "attach":
            _omega(env, root, "hub", "stop", "--config", str(config))
    per_window = (totals[-1] - totals[0]) / (windows - 1) if windows > 1 else totals[0]
    return {
        "server_processes": server_processes,
        "pss_per_extra_window_mb": round(per_window, 1),
        "pss_total_mb": round(totals[-1], 1),
        "complete_list_p50_s": round(statistics.median(times), 3),
        "cold_complete_list_p50_s": round(statistics.median(cold or times), 3),
        "cold_initialize_p50_s": round(statistics.median(cold_init or inits[:1]), 3),
        "cold_samples": [round(c, 3) for c in cold or times[:1]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--servers", type=int, default=20)
    parser.add_argument("--cold", type=int, default=3, help="cold samples of attach (the first has no greeting)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import omega_mcp

    compileall.compile_dir(str(Path(omega_mcp.__file__).parent), quiet=1)
    load = os.getloadavg()[0]
    results: dict[str, object] = {}
    for kind in ("attach", "serve"):
        with tempfile.TemporaryDirectory(prefix=f"omega-bench-{kind}-") as scratch:
            root = Path(scratch)
            env = {**os.environ, "OMEGA_HOME": str(root / "h")}
            env.pop("OMEGA_CONFIG", None)
            results[kind] = _run(kind, args.windows, args.servers, root, env, cold_runs=args.cold)
    floors = {"start_s": round(statistics.median(_floor_start() for _ in range(5)), 3), "pss_mb": _floor_pss()}
    results["floors"] = floors
    if args.json:
        print(json.dumps(results, indent=2))
        return
    a, s = results["attach"], results["serve"]
    assert isinstance(a, dict) and isinstance(s, dict)
    loads = f"load {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    print(f"{args.windows} windows x {args.servers} stdio servers ({loads})\n")
    print("| | attach | serve | floor |\n|---|---|---|---|")
    print(f"| server processes | {a['server_processes']} | {s['server_processes']} | {args.servers} |")
    print(
        f"| PSS per extra window | {a['pss_per_extra_window_mb']} MB | {s['pss_per_extra_window_mb']} MB "
        f"| {floors['pss_mb']:.1f} MB (bare interpreter) |"
    )
    print(
        f"| spawn to complete tools/list, hub running (p50) | {a['complete_list_p50_s'] * 1000:.0f} ms | - "
        f"| {floors['start_s'] * 1000:.0f} ms (bare interpreter start) |"
    )
    print(
        f"| spawn to complete tools/list, no hub (p50) | {a['cold_complete_list_p50_s'] * 1000:.0f} ms "
        f"| {s['complete_list_p50_s'] * 1000:.0f} ms | serve's cold start |"
    )
    print(
        f"| spawn to `initialize` answered, no hub (p50) | {a['cold_initialize_p50_s'] * 1000:.0f} ms "
        f"| {s['cold_initialize_p50_s'] * 1000:.0f} ms | |"
    )
    print(f"\ncold samples (s): attach {a['cold_samples']}, serve {s['cold_samples']}")


if __name__ == "__main__":
    main()
