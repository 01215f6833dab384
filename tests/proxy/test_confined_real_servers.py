"""Real third-party MCP servers work confined, with only the declarations a user would expect.

One `omega-mcp serve` (an SDK client over stdio) runs each server twice: `NAME` confined (`[sandbox]
servers = "confined"`, plus its declaration) and `NAME-open` with `sandbox = "none"`, each on a data
directory of its own. The same calls go to both and must answer the same once paths, hashes and
times are normalised, and each confined server must really run in a PID namespace of its own.

Declarations: `fetch` gets `network = true` (it is called on an HTTP server the test runs on
127.0.0.1; `fetch-offline`, confined without it, must fail); `git` its repository as a write root;
`filesystem` its allowed directory. The npx servers (filesystem, memory, everything) also get
`network = true`: npx asks the registry for the package at every start, and without a network npm
retries for about 70 s before it falls back to its cache, past any connect timeout. The memory
server keeps its file in its own directory (`MEMORY_FILE_PATH`; by default it writes next to its
code, in the shared npx cache). The Python servers come from the venv (dev extras); the npx ones
are fetched from the npm registry on first use, and skipped with the reason when npx cannot.

Each call goes to the open instance first: mcp-server-fetch converts HTML with readabilipy, which
runs `npm install` into its own package directory on its first use. Confined, that fails (the venv is
read-only to a server, and ~/.npm is writable only to servers started by npx), so a fetch server
installed in omega's venv needs one unconfined fetch first, or those directories as write roots.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import StdioServerParameters

from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux-only")

_PYTHON_WAIT_SECONDS = 60.0
_NPX_WAIT_SECONDS = 90.0  # the first start downloads the package (pytest-timeout is 120 s)
_PAGE = "<html><head><title>Omega page</title></head><body><h1>Confined</h1><p>Fetched through omega.</p></body></html>"
_WHEN = {"GIT_AUTHOR_DATE": "2024-01-02T03:04:05Z", "GIT_COMMITTER_DATE": "2024-01-02T03:04:05Z"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope: the tests below share one omega


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = self.path == "/page.html"
        body = _PAGE.encode() if found else b"not found"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8" if found else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Run:
    """One instance's own data: a directory for the filesystem server, a repository, a memory file."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    def make(self) -> None:
        self.data.mkdir(parents=True)
        (self.data / "a.txt").write_text("hello from the host\n")
        (self.root / "outside.txt").write_text("not for the filesystem server\n")
        env = {**os.environ, **_WHEN}
        for args in (
            ["init", "-q", "-b", "main", str(self.repo)],
            ["-C", str(self.repo), "config", "user.email", "t@example.com"],
            ["-C", str(self.repo), "config", "user.name", "Tester"],
        ):
            subprocess.run(["git", *args], check=True, env=env, timeout=30)
        (self.repo / "f.txt").write_text("one\n")
        subprocess.run(["git", "-C", str(self.repo), "add", "f.txt"], check=True, env=env, timeout=30)
        subprocess.run(["git", "-C", str(self.repo), "commit", "-qm", "first"], check=True, env=env, timeout=30)
        (self.repo / "f.txt").write_text("one\ntwo\n")


@dataclass
class Server:
    """A real server: how it starts for a run, its declaration when confined, the calls to compare."""

    argv: Callable[[Run], list[str]]
    declaration: str | None
    """The confined instance's `sandbox` table; `<repo>` and `<data>` stand for its run's paths."""
    calls: Callable[[Run], list[tuple[str, dict[str, Any]]]]
    npx: bool = False
    env: Callable[[Path], dict[str, str]] = lambda own: {}
    """Its `env`, given the directory it keeps its files in."""
    landed: Callable[[World], None] | None = None
    """Checks, on the host, what the calls wrote (after both instances ran them)."""

    @property
    def wait(self) -> float:
        return _NPX_WAIT_SECONDS if self.npx else _PYTHON_WAIT_SECONDS


def _python(module: str, *args: str) -> list[str]:
    return ["${OMEGA_PYTHON}", "-m", module, *args]


def _npx(package: str, *args: str) -> list[str]:
    return ["npx", "-y", package, *args]


def _inline(table: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + " }"


def _git_landed(world: World) -> None:
    for run in (world.confined, world.open):
        log = ["git", "-C", str(run.repo), "log", "--format=%s"]
        assert subprocess.run(log, capture_output=True, text=True, timeout=30).stdout.split() == ["second", "first"]


def _filesystem_landed(world: World) -> None:
    for run in (world.confined, world.open):
        assert (run.data / "new.txt").read_text() == "written by the server"
        assert (run.data / "a.txt").read_text() == "bye from the host\n"


def _memory_landed(world: World) -> None:
    for name in ("memory", "memory-open"):
        assert '"omega"' in (world.own_dir(name) / "memory.jsonl").read_text()


_PORT: list[int] = []  # the page server's port, set by the `page` fixture before any config is written


SERVERS: dict[str, Server] = {
    "time": Server(
        lambda run: _python("mcp_server_time", "--local-timezone", "UTC"),
        None,
        lambda run: [
            ("get_current_time", {"timezone": "UTC"}),
            ("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        ],
    ),
    "git": Server(
        lambda run: _python("mcp_server_git", "--repository", str(run.repo)),
        "{ write_roots = [<repo>] }",
        lambda run: [
            ("git_status", {"repo_path": str(run.repo)}),
            ("git_log", {"repo_path": str(run.repo)}),
            ("git_diff_unstaged", {"repo_path": str(run.repo)}),
            ("git_add", {"repo_path": str(run.repo), "files": ["f.txt"]}),
            ("git_commit", {"repo_path": str(run.repo), "message": "second"}),
            ("git_create_branch", {"repo_path": str(run.repo), "branch_name": "topic"}),
            ("git_checkout", {"repo_path": str(run.repo), "branch_name": "topic"}),
            ("git_branch", {"repo_path": str(run.repo), "branch_type": "local"}),
            ("git_status", {"repo_path": "/etc"}),  # outside --repository: refused by the server itself
        ],
        landed=_git_landed,
    ),
    "fetch": Server(
        lambda run: _python("mcp_server_fetch", "--allow-private-ips"),
        "{ network = true }",
        lambda run: [("fetch", {"url": f"http://127.0.0.1:{_PORT[0]}/page.html"})],
    ),
    "filesystem": Server(
        lambda run: _npx("@modelcontextprotocol/server-filesystem", str(run.data)),
        "{ write_roots = [<data>], network = true }",
        lambda run: [
            ("list_allowed_directories", {}),
            ("list_directory", {"path": str(run.data)}),
            ("read_text_file", {"path": str(run.data / "a.txt")}),
            ("write_file", {"path": str(run.data / "new.txt"), "content": "written by the server"}),
            ("edit_file", {"path": str(run.data / "a.txt"), "edits": [{"oldText": "hello", "newText": "bye"}]}),
            ("read_text_file", {"path": str(run.data / "a.txt")}),
            ("read_text_file", {"path": str(run.root / "outside.txt")}),  # refused by the server itself
        ],
        npx=True,
        landed=_filesystem_landed,
    ),
    "memory": Server(
        lambda run: _npx("@modelcontextprotocol/server-memory"),
        "{ network = true }",
        lambda run: [
            ("create_entities", {"entities": [{"name": "omega", "entityType": "hub", "observations": ["confined"]}]}),
            ("add_observations", {"observations": [{"entityName": "omega", "contents": ["tested"]}]}),
            ("read_graph", {}),
            ("search_nodes", {"query": "tested"}),
        ],
        npx=True,
        env=lambda own: {"MEMORY_FILE_PATH": str(own / "memory.jsonl")},
        landed=_memory_landed,
    ),
    "everything": Server(
        lambda run: _npx("@modelcontextprotocol/server-everything", "stdio"),
        "{ network = true }",
        lambda run: [
            ("echo", {"message": "hi from omega"}),
            ("get-sum", {"a": 2, "b": 3}),
            ("get-tiny-image", {}),
            ("get-annotated-message", {"messageType": "success"}),
        ],
        npx=True,
    ),
}


@dataclass
class World:
    base: Path
    omega_home: Path
    confined: Run
    open: Run

    def own_dir(self, name: str) -> Path:
        """Where `name` keeps its files: its default cwd when confined, its run's root when open."""
        return self.omega_home / "servers" / name if not name.endswith("-open") else self.open.root


@pytest.fixture(scope="module")
def page() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _PORT[:] = [server.server_address[1]]
    try:
        yield _PORT[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


_INSTANCE = "OMEGA_TEST_INSTANCE"
"""In each instance's `env`, to find its processes on the host (`_pid_namespaces`)."""


def _entry(instance: str, server: Server, run: Run, own: Path, sandbox: str | None) -> str:
    argv = server.argv(run)
    text = f"[servers.{instance}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n"
    text += f"env = {_inline({**server.env(own), _INSTANCE: instance})}\n"
    text += f"connect_timeout = {_NPX_WAIT_SECONDS}\n" if server.npx else ""
    return text + (f"sandbox = {sandbox}\n" if sandbox is not None else "")


def _config(world: World, npx: bool) -> str:
    # Every tool listed: this catalog is large enough for tool search's "auto" to list only a few.
    text = '[sandbox]\nservers = "confined"\n[hub]\ntool_search = "off"\n'
    for name, server in SERVERS.items():
        if server.npx and not npx:
            continue
        run = world.confined
        declared = server.declaration
        if declared is not None:
            declared = declared.replace("<repo>", json.dumps(str(run.repo))).replace(
                "<data>", json.dumps(str(run.data))
            )
        text += _entry(name, server, run, world.own_dir(name), declared)
        text += _entry(f"{name}-open", server, world.open, world.own_dir(f"{name}-open"), '"none"')
    return text + _entry("fetch-offline", SERVERS["fetch"], world.confined, world.base, None)


@dataclass
class Hub:
    client: mcp.Client
    omega_pid: int
    listed: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])

    async def ready(self, *names: str, seconds: float) -> bool:
        """Wait (bounded) until every server in `names` lists its tools; False if one never did."""
        with anyio.move_on_after(seconds):
            while True:
                tools = (await self.client.list_tools()).tools
                self.listed = {t.name: t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools}
                if all(any(t.startswith(f"mcp__{n}__") for t in self.listed) for n in names):
                    return True
                await anyio.sleep(0.25)
        return False

    def tools_of(self, name: str) -> dict[str, Any]:
        prefix = f"mcp__{name}__"
        return {t.removeprefix(prefix): {**d, "name": ""} for t, d in self.listed.items() if t.startswith(prefix)}

    async def call(self, name: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        with deadline(60):
            result = await self.client.call_tool(f"mcp__{name}__{tool}", arguments)
        return {
            "is_error": bool(result.is_error),
            "content": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content],
            "structured": result.structured_content,
        }


def _omega_child() -> int:
    """The `omega-mcp serve` that mcp.Client started: the child of this process running omega_mcp."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if ppid == me and b"omega_mcp\0serve" in cmdline:
                return int(entry.name)
    raise AssertionError("no omega-mcp serve below this process")


@pytest.fixture(scope="module")
async def hub(tmp_path_factory: pytest.TempPathFactory, page: int) -> AsyncIterator[tuple[Hub, World]]:
    base = tmp_path_factory.mktemp("real")
    world = World(base, base / "omega", Run(base / "confined"), Run(base / "open"))
    for run in (world.confined, world.open):
        run.make()
    config = base / "servers.toml"
    config.write_text(_config(world, npx=shutil.which("npx") is not None))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "error"],
        env={"OMEGA_HOME": str(world.omega_home)},
        cwd=base,
    )
    async with mcp.Client(params, mode="legacy") as client:
        yield Hub(client, _omega_child()), world


def _pid_namespaces(omega_pid: int, instance: str) -> set[str]:
    """The PID namespaces of omega's descendants that belong to server `instance` (by their environment)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
    found: set[str] = set()
    for pid in parents:
        ancestor = parents.get(pid, 0)
        while ancestor not in (0, 1, omega_pid):
            ancestor = parents.get(ancestor, 0)
        try:
            if ancestor == omega_pid and f"{_INSTANCE}={instance}".encode() in Path(
                f"/proc/{pid}/environ"
            ).read_bytes().split(b"\0"):
                found.add(os.readlink(f"/proc/{pid}/ns/pid"))
        except OSError:
            continue
    return found


_VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?"), "<datetime>"),
    (re.compile(r"\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b"), "<weekday>"),
    (re.compile(r"\b[0-9a-f]{7,40}\b"), "<hash>"),
    (re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} +\d+ \d\d:\d\d:\d\d \d{4}(?: [+-]\d{4})?"), "<date>"),
]


def _normalised(value: object, world: World) -> str:
    text = json.dumps(value, sort_keys=True)
    for run in (world.confined, world.open):
        text = text.replace(str(run.root), "<run>")
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


@pytest.mark.parametrize("name", list(SERVERS))
async def test_a_real_server_answers_the_same_confined(name: str, hub: tuple[Hub, World]):
    omega, world = hub
    server = SERVERS[name]
    if server.npx and shutil.which("npx") is None:
        pytest.skip("npx is not installed")
    if not await omega.ready(f"{name}-open", seconds=server.wait):
        if server.npx:
            pytest.skip(f"{name}: npx could not start it unconfined within {server.wait:g} s (no npm registry?)")
        pytest.fail(f"{name}-open did not start within {server.wait:g} s (is the venv's dev extra installed?)")
    assert await omega.ready(name, seconds=server.wait), f"{name} did not start confined (see omega-mcp tools)"

    assert omega.tools_of(name) == omega.tools_of(f"{name}-open")
    for (tool, arguments), (_, same) in zip(server.calls(world.confined), server.calls(world.open), strict=True):
        opened = await omega.call(f"{name}-open", tool, same)  # first: see the module docstring
        confined = await omega.call(name, tool, arguments)
        assert _normalised(confined, world) == _normalised(opened, world), f"{tool}({arguments})"
    if server.landed is not None:
        server.landed(world)

    host = os.readlink("/proc/self/ns/pid")
    assert _pid_namespaces(omega.omega_pid, f"{name}-open") == {host}
    confined = _pid_namespaces(omega.omega_pid, name)
    assert confined - {host}, f"{name} does not run in a PID namespace of its own: {confined}"


async def test_fetch_without_network_fails(hub: tuple[Hub, World], page: int):
    omega, _ = hub
    assert await omega.ready("fetch-offline", seconds=_PYTHON_WAIT_SECONDS)
    result = await omega.call("fetch-offline", "fetch", {"url": f"http://127.0.0.1:{page}/page.html"})
    assert result["is_error"], result
    assert "Confined" not in json.dumps(result)
