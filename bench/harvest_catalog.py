"""Harvest a real tool catalog: run public MCP servers from npm and PyPI and save their `tools/list`.

Usage: python bench/harvest_catalog.py [--out tests/fixtures/tool_catalog.json] [--venv DIR] [--only KEY ...]

Each server in SERVERS is started the way a user's servers.toml would start it (`npx -y PACKAGE`,
or the console script of a PyPI package installed into a throwaway venv), with placeholder keys
where a server insists on one at start (listing tools needs no account), and asked `initialize`
then `tools/list` (every page) over plain stdio JSON-RPC. The tools are saved verbatim, with the
server's own `serverInfo`, under the key a servers.toml would give it. A server that does not
answer within its time is reported and left out; the fixture says which package versions it holds.
The retrieval benchmark (bench/bench_search.py) and the search tests read the saved file, so the
numbers do not depend on the registries being reachable.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_DEFAULT_OUT = _ROOT / "tests" / "fixtures" / "tool_catalog.json"
_PROTOCOL = "2025-06-18"


@dataclass(frozen=True)
class Source:
    key: str
    kind: str  # "npm" | "pypi"
    package: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict[str, str])
    script: str | None = None  # PyPI: the console script (default: the package name)
    pins: tuple[str, ...] = ()  # PyPI: extra requirements (servers still written for mcp 1.x)


_DUMMY = "placeholder-not-a-real-key"
SERVERS: tuple[Source, ...] = (
    Source("everything", "npm", "@modelcontextprotocol/server-everything"),
    Source("filesystem", "npm", "@modelcontextprotocol/server-filesystem", ("/tmp",)),
    Source("memory", "npm", "@modelcontextprotocol/server-memory"),
    Source("sequential-thinking", "npm", "@modelcontextprotocol/server-sequential-thinking"),
    Source("playwright", "npm", "@playwright/mcp", ("--headless",)),
    Source("github", "npm", "@modelcontextprotocol/server-github", env={"GITHUB_PERSONAL_ACCESS_TOKEN": _DUMMY}),
    Source("gitlab", "npm", "@modelcontextprotocol/server-gitlab", env={"GITLAB_PERSONAL_ACCESS_TOKEN": _DUMMY}),
    Source("puppeteer", "npm", "@modelcontextprotocol/server-puppeteer", env={"PUPPETEER_SKIP_DOWNLOAD": "1"}),
    Source(
        "slack", "npm", "@modelcontextprotocol/server-slack", env={"SLACK_BOT_TOKEN": _DUMMY, "SLACK_TEAM_ID": "T0"}
    ),
    Source("brave-search", "npm", "@modelcontextprotocol/server-brave-search", env={"BRAVE_API_KEY": _DUMMY}),
    Source("postgres", "npm", "@modelcontextprotocol/server-postgres", ("postgresql://127.0.0.1:9/none",)),
    Source("google-maps", "npm", "@modelcontextprotocol/server-google-maps", env={"GOOGLE_MAPS_API_KEY": _DUMMY}),
    Source("redis", "npm", "@modelcontextprotocol/server-redis", ("redis://127.0.0.1:9",)),
    Source("context7", "npm", "@upstash/context7-mcp"),
    Source("notion", "npm", "@notionhq/notion-mcp-server", env={"NOTION_TOKEN": _DUMMY}),
    Source("desktop-commander", "npm", "@wonderwhy-er/desktop-commander"),
    Source("firecrawl", "npm", "firecrawl-mcp", env={"FIRECRAWL_API_KEY": "fc-" + _DUMMY}),
    Source("tavily", "npm", "tavily-mcp", env={"TAVILY_API_KEY": _DUMMY}),
    Source("exa", "npm", "exa-mcp-server", env={"EXA_API_KEY": _DUMMY}),
    Source("chart", "npm", "@antv/mcp-server-chart"),
    Source("stripe", "npm", "@stripe/mcp", ("--tools=all", "--api-key=sk_test_" + _DUMMY)),
    Source("supabase", "npm", "@supabase/mcp-server-supabase", ("--access-token", _DUMMY)),
    Source("mongodb", "npm", "mongodb-mcp-server"),
    Source("kubernetes", "npm", "mcp-server-kubernetes"),
    Source("jira", "npm", "@aashari/mcp-server-atlassian-jira", env={"ATLASSIAN_SITE_NAME": "example"}),
    Source("chrome-devtools", "npm", "chrome-devtools-mcp"),
    Source("circleci", "npm", "@circleci/mcp-server-circleci", env={"CIRCLECI_TOKEN": _DUMMY}),
    Source("hubspot", "npm", "@hubspot/mcp-server", env={"PRIVATE_APP_ACCESS_TOKEN": _DUMMY}),
    Source("mapbox", "npm", "@mapbox/mcp-server", env={"MAPBOX_ACCESS_TOKEN": "pk." + _DUMMY}),
    Source("figma", "npm", "figma-developer-mcp", ("--stdio",), env={"FIGMA_API_KEY": _DUMMY}),
    Source("git", "pypi", "mcp-server-git"),
    Source("fetch", "pypi", "mcp-server-fetch"),
    Source("time", "pypi", "mcp-server-time"),
    Source("sqlite", "pypi", "mcp-server-sqlite", ("--db-path", "/tmp/omega-harvest.db"), pins=("mcp<2",)),
    Source("duckduckgo", "pypi", "duckduckgo-mcp-server"),
    Source("arxiv", "pypi", "arxiv-mcp-server", pins=("mcp<2",)),
    Source("markitdown", "pypi", "markitdown-mcp"),
    Source("calculator", "pypi", "mcp-server-calculator", pins=("mcp<2",)),
    Source("wikipedia", "pypi", "wikipedia-mcp"),
    Source("excel", "pypi", "excel-mcp-server", ("stdio",)),
    Source("blender", "pypi", "blender-mcp", pins=("mcp<2",)),
    Source("motherduck", "pypi", "mcp-server-motherduck", ("--db-path", ":memory:", "--read-write")),
)


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, object], deadline: float) -> dict[str, object] | None:
    """Send one message; for a request, read lines until its answer (notifications and logs skipped)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()
    if "id" not in message:
        return None
    buffer = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise RuntimeError("the server closed its stdout")
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                reply = json.loads(line)
            except ValueError:
                continue  # a server printing a banner on stdout
            if isinstance(reply, dict) and reply.get("id") == message["id"]:
                return reply  # pyright: ignore[reportUnknownVariableType]
    raise TimeoutError("no answer in time")


def _harvest(source: Source, command: list[str], timeout: float) -> dict[str, object]:
    env = {**os.environ, **source.env, "NO_COLOR": "1"}
    # A fixed working directory: some servers name theirs in a description, and the fixture must not
    # carry a random temporary path.
    cwd = Path(tempfile.gettempdir()) / "omega-harvest-cwd" / source.key
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    try:
        deadline = time.monotonic() + timeout
        init = _rpc(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": _PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "omega-harvest", "version": "1"},
                },
            },
            deadline,
        )
        if init is None or "result" not in init:
            raise RuntimeError(f"initialize failed: {init}")
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"}, deadline)
        tools: list[object] = []
        cursor: object = None
        for page in range(2, 200):
            params = {} if cursor is None else {"cursor": cursor}
            listed = _rpc(proc, {"jsonrpc": "2.0", "id": page, "method": "tools/list", "params": params}, deadline)
            result = listed.get("result") if listed else None
            if not isinstance(result, dict):
                raise RuntimeError(f"tools/list failed: {listed}")
            tools.extend(result.get("tools", []))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            cursor = result.get("nextCursor")  # pyright: ignore[reportUnknownMemberType]
            if not cursor:
                break
        info = init["result"].get("serverInfo") if isinstance(init["result"], dict) else None  # pyright: ignore[reportUnknownMemberType]
        return {"key": source.key, "package": source.package, "server_info": info, "tools": tools}
    finally:
        proc.kill()
        proc.wait(timeout=10)


_VENV_LOCK = threading.Lock()


def _pypi_venv(directory: Path, source: Source) -> Path:
    """A venv of its own per server: their pins (`mcp<2` for some) must not meet. Made one at a
    time: a venv's python being written while another thread forks is "text file busy"."""
    directory = directory / source.key
    python = directory / "bin" / "python"
    stamp = directory / ".harvest-installed"
    with _VENV_LOCK:
        if stamp.exists():
            return directory / "bin"
        venv.EnvBuilder(with_pip=True, clear=True).create(directory)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", source.package, *source.pins],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(f"harvest: pip install {source.package} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        else:
            stamp.touch()
    return directory / "bin"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=_DEFAULT_OUT)
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "omega-harvest-venv")
    parser.add_argument("--only", nargs="*", help="harvest only these keys (merged into an existing --out)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per server, downloads included")
    options = parser.parse_args()
    chosen = [s for s in SERVERS if not options.only or s.key in options.only]

    def run(source: Source) -> dict[str, object] | None:
        if source.kind == "npm":
            command = ["npx", "-y", source.package, *source.args]
        else:
            bin_dir = _pypi_venv(options.venv, source)
            command = [str(bin_dir / (source.script or source.package)), *source.args]
        started = time.monotonic()
        try:
            found = _harvest(source, command, options.timeout)
        except Exception as exc:
            print(f"harvest: {source.key}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None
        print(
            f"harvest: {source.key}: {len(found['tools'])} tools in {time.monotonic() - started:.0f} s", file=sys.stderr
        )  # type: ignore[arg-type]
        return found

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        harvested = {r["key"]: r for r in pool.map(run, chosen) if r is not None and r["tools"]}
    previous: dict[str, dict[str, object]] = {}
    if options.only and options.out.exists():
        previous = {s["key"]: s for s in json.loads(options.out.read_text())["servers"]}
    merged = {**previous, **harvested}
    order = [s.key for s in SERVERS if s.key in merged]
    payload = {
        "harvested": datetime.date.today().isoformat(),
        "how": "bench/harvest_catalog.py: each server's tools/list, verbatim",
        "servers": [merged[key] for key in order],
    }
    options.out.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    count = sum(len(s["tools"]) for s in payload["servers"])  # type: ignore[arg-type]
    print(f"harvest: {len(order)} servers, {count} tools -> {options.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
