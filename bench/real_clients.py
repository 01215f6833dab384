"""Real clients against omega, as users run them: does the first model request carry omega's tools?

Usage: python bench/real_clients.py [--runs 10] [--clients claude,codex,inspector] [--entries standalone,attach]
                                    [--npm-dir DIR] [--omega PATH] [--traffic DIR] [--json]

Installs the latest Claude Code (`@anthropic-ai/claude-code`), Codex (`@openai/codex`) and the MCP
Inspector (`@modelcontextprotocol/inspector`) with npm into a temporary directory (a client whose install
fails is skipped, saying why), then re-runs itself inside new network and PID namespaces (`unshare`,
loopback up, nothing else): nothing a client sends can leave the machine, and no process outlives the run.
The downstream is the example servers.toml with its `time` server enabled.

Each client runs N times against each entry:
  standalone  the entry `omega-mcp claude-config --standalone` writes (plain `claude-config` where
              there is no --standalone: `serve` was the only entry then);
  attach      the entry `claude-config` writes when omega has `attach`, after `omega-mcp hub start`
              (the hub stays up for all the runs of every client, then `hub stop`);
and, when asked for, standalone-alwaysload (the standalone entry with `"alwaysLoad": true`, Claude Code
only: it is a Claude Code key) and attach-cold (the attach entry with no hub running at each start: the
window starts it; `hub stop` after each run) and none (no MCP server at all: the client's own time to its
first request, the floor; Claude Code and Codex).
Claude Code: `claude -p PROMPT --mcp-config ENTRY.json --strict-mcp-config` against a fake Anthropic
Messages API (ANTHROPIC_BASE_URL). Codex: `codex exec PROMPT` with a temporary CODEX_HOME whose
config.toml names the fake Responses API as its model provider and the entry as `[mcp_servers.omega]`
(with docs/clients/codex.md's timeouts). Inspector: `--cli --config ENTRY.json --server omega --method
tools/list`. Every run has its own HOME and is bounded (the client's process group is killed at the end).

Printed per client and entry: runs, how many first model requests (for the Inspector: the one
`tools/list`) had all six built-ins, a downstream (`time`) tool, both; and the time from spawning the
client to its first model request (Inspector: to its exit). `--traffic DIR` keeps every run's requests
and the client's stderr; `--wire` puts bench/wiretap.py between client and omega and prints each run's
MCP conversation in short (which requests, answered when, with how many tools).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_apis import FakeApi, Request, is_model_request

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "claude": ("@anthropic-ai/claude-code", "claude"),
    "codex": ("@openai/codex", "codex"),
    "inspector": ("@modelcontextprotocol/inspector", "mcp-inspector"),
}
BUILTINS = ("bash", "read", "write", "edit", "bash_output", "kill_shell")
DOWNSTREAM = ("time__get_current_time", "time__convert_time")
PROMPT = "Say hello."
ENTRIES = ("standalone", "attach", "standalone-alwaysload", "attach-cold", "none")
_INSIDE = "OMEGA_REAL_CLIENTS_INSIDE"


@dataclass
class Run:
    client: str
    entry: str
    index: int
    rc: int | None = None
    """The client's exit code (None: killed at the timeout)."""
    seconds: float = 0.0
    first_request_s: float | None = None
    """Spawn to the first model request (Inspector: spawn to exit with a tools/list)."""
    tools: list[str] = field(default_factory=list)
    """Names in the first request's `tools` (deferred ones excluded)."""
    deferred: list[str] = field(default_factory=list)
    """Names the first request carried with `defer_loading` (the API's tool search)."""
    named_only: list[str] = field(default_factory=list)
    """omega's tools the first request names (in its prompt) without carrying them in `tools`."""
    builtins: bool = False
    downstream: bool = False
    model_requests: int = 0
    other_paths: list[str] = field(default_factory=list)
    orphans: int = 0
    wire: str = ""
    """With --wire: the MCP messages between the client and omega, with times from the spawn."""
    note: str = ""


# -- outside: install, then re-enter in namespaces ------------------------------------------------------------


def _install(npm_dir: Path, clients: list[str]) -> dict[str, str]:
    """npm install each client; returns client -> why it is skipped."""
    skipped: dict[str, str] = {}
    npm = shutil.which("npm")
    for client in clients:
        package, binary = PACKAGES[client]
        if npm is None:
            skipped[client] = "npm not found"
            continue
        command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(npm_dir), f"{package}@latest"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
        except subprocess.TimeoutExpired:
            skipped[client] = "npm install took over 900 s"
            continue
        if done.returncode != 0 or not (npm_dir / "node_modules" / ".bin" / binary).exists():
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            skipped[client] = f"npm install failed (exit {done.returncode}): {tail}"
    return skipped


def _reenter(npm_dir: Path, skipped: dict[str, str]) -> int:
    if shutil.which("unshare") is None:
        print("real_clients: needs unshare (util-linux) to run the clients without a network", file=sys.stderr)
        return 2
    userns = [] if os.geteuid() == 0 else ["--user", "--map-current-user"]
    # --kill-child: the namespace's init (this script inside), and so every process in it, goes when unshare does.
    command = ["unshare", *userns, "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--"]
    command += [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
    env = {**os.environ, _INSIDE: json.dumps({"skipped": skipped, "npm_dir": str(npm_dir)})}
    return subprocess.run(command, env=env, check=False).returncode


# -- inside: the namespaces -----------------------------------------------------------------------------------


def _loopback_only() -> None:
    """Bring lo up (a new network namespace starts with it down) and check it is the only interface."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH22x", b"lo", flags | 0x1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        sock.close()
    names = [name for _, name in socket.if_nameindex()]
    if names != ["lo"]:
        raise SystemExit(f"real_clients: the network namespace has {names}, expected only lo")


def _example_config(scratch: Path) -> Path:
    """The repository's example servers.toml with its [servers.time] block uncommented."""
    text = (ROOT / "servers.toml").read_text()
    block = re.compile(r"^# (\[servers\.time\]\n)# (command.*\n)# (args.*\n)# (env.*\n)", re.M)
    text, count = block.subn(r"\1\2\3\4", text)
    if count != 1:
        raise SystemExit("real_clients: servers.toml has no commented [servers.time] block to enable")
    path = scratch / "servers.toml"
    path.write_text(text)
    return path


def _omega_help(omega: str, *args: str) -> str:
    done = subprocess.run([omega, *args, "--help"], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout


def _entry(omega: str, config: Path, project: Path, flags: list[str], env: dict[str, str]) -> dict[str, Any]:
    command = [omega, "claude-config", "--config", str(config), "--workspace", str(project), *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=env, cwd=project)
    if done.returncode != 0:
        raise SystemExit(f"real_clients: {' '.join(command)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)["mcpServers"]["omega"]


def _tool_names(tools: Any) -> tuple[list[str], list[str]]:
    """(names loaded, names deferred) in a request's `tools` (Messages, Responses or MCP shape)."""
    loaded: list[str] = []
    deferred: list[str] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if isinstance(name, str):
            (deferred if tool.get("defer_loading") else loaded).append(name)
        nested = _tool_names(tool.get("tools"))
        loaded += nested[0]
        deferred += nested[1]
    return loaded, deferred


def _judge(run: Run) -> None:
    run.builtins = all(any(n == b or n.endswith("__" + b) for n in run.tools) for b in BUILTINS)
    run.downstream = any(n.endswith(d) for n in run.tools for d in DOWNSTREAM)


def _children_of_init() -> dict[int, str]:
    """Processes whose parent is this namespace's init (this script): the orphans' landing place."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == os.getpid():
                if fields[0] == "Z":
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(int(entry), os.WNOHANG)
                    continue
                found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    return found


def _sweep(known: set[int], grace: float = 5.0) -> list[str]:
    """Processes left behind by a run (beyond `known`): waited for `grace` s to exit, then killed."""
    deadline = time.monotonic() + grace
    while True:
        left = {pid: cmd for pid, cmd in _children_of_init().items() if pid not in known}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in left:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return list(left.values())


@dataclass
class Setting:
    client: str
    binary: Path
    entry_name: str
    entry: dict[str, Any]
    api: FakeApi
    scratch: Path
    timeout: float
    traffic: Path | None = None
    wire: bool = False
    stop: Callable[[], object] | None = None
    """Called after each run, before the sweep for what it left (attach-cold: `hub stop`)."""


def _client_command(setting: Setting, home: Path, project: Path) -> tuple[list[str], dict[str, str]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env.pop(_INSIDE, None)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    entry = dict(setting.entry)
    if setting.wire and entry:
        tap = [str(Path(__file__).resolve().with_name("wiretap.py")), str(home / "wire.jsonl"), "--"]
        entry.update(command=sys.executable, args=[*tap, entry["command"], *entry["args"]])
    entry_file = home / "mcp.json"
    entry_file.write_text(json.dumps({"mcpServers": {"omega": entry} if entry else {}}, indent=2))
    if setting.client == "claude":
        env.update(ANTHROPIC_BASE_URL=setting.api.url, ANTHROPIC_API_KEY="sk-ant-fake-key-for-a-local-test")
        command = [str(setting.binary), "-p", PROMPT, "--mcp-config", str(entry_file), "--strict-mcp-config"]
        return command, env
    if setting.client == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir()
        lines = [
            'model = "gpt-5-codex"', 'model_provider = "fake"', "",
            "[model_providers.fake]", 'name = "fake"', f'base_url = "{setting.api.url}/v1"',
            'wire_api = "responses"', 'env_key = "FAKE_OPENAI_API_KEY"', "request_max_retries = 0",
            "stream_max_retries = 0", "",
        ]  # fmt: skip
        if entry:
            lines += ["[mcp_servers.omega]", f"command = {json.dumps(entry['command'])}"]
            lines += [f"args = {json.dumps(entry['args'])}", "startup_timeout_sec = 30", "tool_timeout_sec = 600"]
        if entry.get("env"):
            pairs = ", ".join(f"{key} = {json.dumps(value)}" for key, value in entry["env"].items())
            lines.append(f"env = {{ {pairs} }}")
        (codex_home / "config.toml").write_text("\n".join(lines) + "\n")
        env.update(CODEX_HOME=str(codex_home), FAKE_OPENAI_API_KEY="fake-key-for-a-local-test")
        return [str(setting.binary), "exec", "--skip-git-repo-check", PROMPT], env
    command = [str(setting.binary), "--cli", "--config", str(entry_file), "--server", "omega"]
    return [*command, "--method", "tools/list"], env


def _one_run(setting: Setting, index: int, known: set[int]) -> Run:
    run = Run(setting.client, setting.entry_name, index)
    home = Path(tempfile.mkdtemp(prefix=f"{setting.client}-{index}-", dir=setting.scratch))
    project = home / "project"
    project.mkdir()
    command, env = _client_command(setting, home, project)
    setting.api.recorder.reset()
    start = time.monotonic()
    process = subprocess.Popen(
        command, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=setting.timeout)
        run.rc = process.returncode
    except subprocess.TimeoutExpired:
        run.note = f"killed after {setting.timeout:.0f} s"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
    run.seconds = time.monotonic() - start
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # whatever of its group outlived it
    requests = setting.api.recorder.snapshot()
    if setting.client == "inspector":
        _judge_inspector(run, out)
    else:
        _judge_requests(run, requests, start)
    if setting.wire:
        run.wire = _wire_summary(home / "wire.jsonl", start)
    if setting.stop is not None:
        setting.stop()
    run.orphans = len(_sweep(known))
    if setting.traffic is not None:
        _keep(setting.traffic, run, requests, err)
    if run.rc not in (0, None) and not run.note:
        run.note = (err.decode(errors="replace").strip().splitlines() or [f"exit {run.rc}"])[-1][:160]
    return run


def _judge_requests(run: Run, requests: list[Request], start: float) -> None:
    model = [request for request in requests if is_model_request(request)]
    run.model_requests = len(model)
    run.other_paths = sorted({f"{r.method} {r.path.split('?', 1)[0]}" for r in requests if not is_model_request(r)})
    if model:
        first = model[0]
        run.first_request_s = first.at - start
        body = first.body if isinstance(first.body, dict) else {}
        run.tools, run.deferred = _tool_names(body.get("tools"))
        text = json.dumps(body)
        wanted = [f"mcp__omega__{name}" for name in BUILTINS] + [f"mcp__omega__mcp__{name}" for name in DOWNSTREAM]
        run.named_only = [name for name in wanted if name in text and name not in run.tools]
        if first.body is None:
            run.note = f"first request body unreadable (Content-Encoding {first.encoding or 'none'})"
    _judge(run)


def _judge_inspector(run: Run, out: bytes) -> None:
    try:
        listed = json.loads(out)
    except ValueError:
        run.note = run.note or "no JSON on stdout"
        return
    run.tools, run.deferred = _tool_names(listed.get("tools") if isinstance(listed, dict) else None)
    if run.tools and run.rc == 0:
        run.first_request_s = run.seconds
    _judge(run)


def _wire_summary(log: Path, start: float) -> str:
    """The MCP conversation in short: each request, when it was answered (how, with how many tools)."""
    try:
        messages = [json.loads(line) for line in log.read_text().splitlines()]
    except (OSError, ValueError):
        return "no wire log"
    asked: dict[Any, dict[str, Any]] = {}
    parts: list[str] = []
    for message in messages:
        at = f"{message['at'] - start:.2f}s"
        method = message.get("method")
        if message["dir"] == "in" and "id" in message and method:
            asked[message["id"]] = message
        elif message["dir"] == "out" and "id" in message and message["id"] in asked:
            request = asked.pop(message["id"])
            how = (
                f"error {message['error']}"
                if "error" in message
                else f"{message['tools']} tools"
                if "tools" in message
                else "ok"
            )
            parts.append(f"{request['method']} ({message['at'] - request['at']:.2f}s) {how} @{at}")
        elif method and "id" not in message and method != "notifications/message":
            parts.append(f"{message['dir']} {method} @{at}")
    parts += [f"{request['method']} unanswered" for request in asked.values()]
    return "; ".join(parts[:12])


def _keep(traffic: Path, run: Run, requests: list[Request], err: bytes) -> None:
    stem = traffic / f"{run.client}-{run.entry}-{run.index:02d}"
    with open(f"{stem}.requests.jsonl", "w") as file:
        for request in requests:
            file.write(json.dumps({"at": request.at, "method": request.method, "path": request.path,
                                   "body": request.body}) + "\n")  # fmt: skip
    Path(f"{stem}.stderr.txt").write_bytes(err[-200_000:])


# -- the table ------------------------------------------------------------------------------------------------


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def _table(runs: list[Run]) -> str:
    rows = [
        "| client | entry | runs | first request with the 6 built-ins | with a `time` tool | both "
        "| omega's tools only named (deferred) | spawn → first request, s (median, max) | failed runs | orphans |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    order: list[tuple[str, str]] = []
    for run in runs:
        if (run.client, run.entry) not in order:
            order.append((run.client, run.entry))
    for client, entry in order:
        group = [run for run in runs if run.client == client and run.entry == entry]
        times = [run.first_request_s for run in group if run.first_request_s is not None]
        both = sum(run.builtins and run.downstream for run in group)
        failed = sum(run.rc != 0 or run.first_request_s is None for run in group)
        spread = f"{_median(times)}, {max(times):.2f}" if times else "-"
        counts = [len(group), sum(r.builtins for r in group), sum(r.downstream for r in group), both]
        counts += [sum(bool(r.named_only) for r in group)]
        cells = [client, entry, *map(str, counts), spread, str(failed), str(sum(r.orphans for r in group))]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _details(runs: list[Run]) -> str:
    lines = []
    for run in runs:
        omega = [n for n in run.tools if any(n == b or n.endswith("__" + b) for b in BUILTINS)]
        omega += [n for n in run.tools if any(n.endswith(d) for d in DOWNSTREAM)]
        first = "-" if run.first_request_s is None else f"{run.first_request_s:.2f}s"
        lines.append(
            f"{run.client:9} {run.entry:10} #{run.index:<2} rc={run.rc} first={first} tools={len(run.tools)} "
            f"omega={len(omega)} deferred={len(run.deferred)} named_only={len(run.named_only)} "
            f"model_requests={run.model_requests} "
            f"other={','.join(run.other_paths) or '-'} {run.note}"
        )
        if run.wire:
            lines.append(f"    wire: {run.wire}")
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------------------------


def _versions(npm_dir: Path, clients: list[str]) -> dict[str, str]:
    versions = {}
    for client in clients:
        manifest = npm_dir / "node_modules" / PACKAGES[client][0] / "package.json"
        with contextlib.suppress(OSError, ValueError):
            versions[client] = json.loads(manifest.read_text())["version"]
    return versions


@dataclass
class Bench:
    """What every run of one invocation shares."""

    args: argparse.Namespace
    omega: str
    config: Path
    env: dict[str, str]
    """omega's environment (OMEGA_HOME in the scratch directory)."""
    api: FakeApi
    scratch: Path
    traffic: Path | None
    clients: list[str]
    notes: list[str] = field(default_factory=list)

    def hub(self, action: str) -> subprocess.CompletedProcess[str]:
        command = [self.omega, "hub", action, "--config", str(self.config)]
        return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, env=self.env)

    def entries(self, project: Path) -> dict[str, dict[str, Any]]:
        """The entries to measure, as this omega's claude-config writes them."""
        standalone = ["--standalone"] if "--standalone" in _omega_help(self.omega, "claude-config") else []
        has_attach = re.search(r"^\s+attach\s", _omega_help(self.omega), re.M) is not None
        entries: dict[str, dict[str, Any]] = {}
        for name in self.args.entries:
            if name == "none":
                entries[name] = {}
            elif name.startswith("standalone"):
                entries[name] = _entry(self.omega, self.config, project, standalone, self.env)
                if name == "standalone-alwaysload":
                    entries[name]["alwaysLoad"] = True
            elif has_attach:
                entries[name] = _entry(self.omega, self.config, project, [], self.env)
            else:
                self.notes.append(f"this omega has no `attach` command: the {name} entry is not measured")
        if not standalone and any(name.startswith("standalone") for name in entries):
            self.notes.append(
                "this omega's claude-config has no --standalone: the standalone entry is its plain output"
            )
        return entries

    def measure(self, entry_name: str, entry: dict[str, Any]) -> list[Run]:
        """Every client's runs with one entry: `attach` after `hub start` (stopped after the last run),
        `attach-cold` with no hub at each start (the window starts it; stopped after each run)."""
        runs: list[Run] = []
        if entry_name == "attach":
            started = self.hub("start")
            if started.returncode != 0:
                self.notes.append(f"hub start failed (exit {started.returncode}): {started.stderr.strip()[-300:]}")
                return runs
        if entry_name == "attach-cold":
            self.hub("stop")
        known = set(_children_of_init())
        stop = (lambda: self.hub("stop")) if entry_name == "attach-cold" else None
        clients = [c for c in self.clients if c == "claude" or entry_name != "standalone-alwaysload"]
        clients = [c for c in clients if c != "inspector" or entry_name != "none"]
        try:
            for client in clients:
                binary = Path(self.args.npm_dir) / "node_modules" / ".bin" / PACKAGES[client][1]
                setting = Setting(client, binary, entry_name, entry, self.api, self.scratch, self.args.timeout)
                setting.traffic, setting.stop, setting.wire = self.traffic, stop, self.args.wire
                for index in range(1, self.args.runs + 1):
                    run = _one_run(setting, index, known)
                    runs.append(run)
                    print(_details([run]), file=sys.stderr, flush=True)
        finally:
            if entry_name.startswith("attach"):
                stopped = self.hub("stop")
                left = _sweep(known, grace=10.0)
                if entry_name == "attach" and stopped.returncode != 0:
                    self.notes.append(f"hub stop exited {stopped.returncode}: {stopped.stderr.strip()[-200:]}")
                if left:
                    self.notes.append(f"left running after `hub stop` ({entry_name}), killed: {left}")
        return runs


def _inside(args: argparse.Namespace, skipped: dict[str, str]) -> int:
    _loopback_only()
    omega = args.omega or str(ROOT / ".venv" / "bin" / "omega-mcp")
    scratch = Path(tempfile.mkdtemp(prefix="omega-real-clients-"))
    traffic = Path(args.traffic) if args.traffic else None
    if traffic is not None:
        traffic.mkdir(parents=True, exist_ok=True)
    home = scratch / "omega-home"
    os.environ.update(OMEGA_HOME=str(home))
    os.environ.pop("OMEGA_CONFIG", None)
    env = {key: value for key, value in os.environ.items() if key != _INSIDE}
    project = scratch / "project"
    project.mkdir()
    api = FakeApi()
    clients = [client for client in args.clients if client not in skipped]
    bench = Bench(args, omega, _example_config(scratch), env, api, scratch, traffic, clients)
    runs: list[Run] = []
    load = os.getloadavg()
    try:
        entries = bench.entries(project)
        for entry_name, entry in entries.items():
            runs += bench.measure(entry_name, entry)
    finally:
        api.close()
    versions = _versions(Path(args.npm_dir), args.clients)
    if args.json:
        report = {"versions": versions, "skipped": skipped, "notes": bench.notes, "entries": entries,
                  "load": load, "runs": [asdict(run) for run in runs]}  # fmt: skip
        print(json.dumps(report, indent=2))
    else:
        print(f"clients: {', '.join(f'{c} {v}' for c, v in versions.items())}; node {_node_version()}")
        print(f"load average at the start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} ({os.cpu_count()} CPUs)")
        for client, why in skipped.items():
            print(f"skipped {client}: {why}")
        for note in bench.notes:
            print(f"note: {note}")
        for name, entry in entries.items():
            print(f"entry {name}: {json.dumps(entry)}")
        print()
        print(_table(runs))
        print()
        print(_details(runs))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _node_version() -> str:
    node = shutil.which("node")
    if node is None:
        return "?"
    return subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs per client and entry (default 10)")
    parser.add_argument("--clients", default="claude,codex,inspector", help="comma-separated: claude, codex, inspector")
    parser.add_argument(
        "--entries",
        default="standalone,attach",
        help=f"comma-separated, of: {', '.join(ENTRIES)} (default: %(default)s)",
    )
    parser.add_argument("--npm-dir", help="where npm installs the clients (default: a temporary directory)")
    parser.add_argument("--omega", help="the omega-mcp executable (default: this checkout's .venv/bin/omega-mcp)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a client run is killed")
    parser.add_argument("--traffic", metavar="DIR", help="keep each run's requests and the client's stderr here")
    parser.add_argument(
        "--wire", action="store_true", help="log the MCP messages between each client and omega (bench/wiretap.py)"
    )
    parser.add_argument("--json", action="store_true", help="print every run as JSON instead of the tables")
    args = parser.parse_args()
    args.clients = [client.strip() for client in args.clients.split(",") if client.strip()]
    args.entries = [entry.strip() for entry in args.entries.split(",") if entry.strip()]
    unknown = [c for c in args.clients if c not in PACKAGES]
    unknown += [e for e in args.entries if e not in ENTRIES]
    if unknown or args.runs < 1:
        parser.error(f"unknown client or entry {unknown}" if unknown else "--runs must be at least 1")
    if _INSIDE in os.environ:
        handed = json.loads(os.environ[_INSIDE])
        args.npm_dir = handed["npm_dir"]
        return _inside(args, handed["skipped"])
    temporary = args.npm_dir is None
    npm_dir = Path(args.npm_dir or tempfile.mkdtemp(prefix="omega-clients-npm-")).resolve()
    try:
        skipped = _install(npm_dir, args.clients)
        for client, why in skipped.items():
            print(f"real_clients: skipping {client}: {why}", file=sys.stderr)
        return _reenter(npm_dir, skipped)
    finally:
        if temporary:
            shutil.rmtree(npm_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
