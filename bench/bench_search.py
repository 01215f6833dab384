"""Tool search: retrieval quality on real MCP servers' tools, tokens, and speed at 10,000 tools.

Usage: python bench/bench_search.py [--quality] [--speed] [--split test|dev]

Quality: every view of every evaluation set (bench/search_eval.py, bench/data/README.md), ours
beside plain BM25 over name + description in the same run, on the frozen `test` half by default
(`--split dev` is the half the ranking may be tuned on): the hand-written queries over the
harvested catalog (tests/fixtures/tool_catalog.json, bench/harvest_catalog.py), the project's own
fixture queries, and the public sets built from PyPI packages by bench/build_search_sets.py;
then `select:` by every accepted name form.
Tokens: characters / 4 of the tools/list JSON with every tool listed versus search mode.
Speed: a synthetic catalog of the real tools repeated under other server keys to 10,000+ tools:
index build, query latency (p50/p95 over the queries, repeated), memory (tracemalloc peak of the
build), and re-indexing after one server's tools change. Numbers are from one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_eval import PUBLIC

from omega_mcp.config import Config
from omega_mcp.toolsearch import (
    MIN_CONFIDENCE,
    WEAK_CONFIDENCE,
    Entry,
    ToolFinder,
    call_tool_definition,
    search_tools_definition,
)
from search_support import Query, catalog_entries, catalog_servers, queries


def _tokens(tools: list[object]) -> int:
    """The documented approximation: characters of the JSON / 4."""
    return len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools])) // 4  # type: ignore[attr-defined]


def quality(split: str) -> None:
    """Every view of every set on one split, ours beside plain BM25 (bench/search_eval.py)."""
    from search_eval import VIEWS, evaluate, load_sets

    sets = load_sets()
    missing = [name for name in PUBLIC if name not in {s.name for s in sets}]
    print(
        f"Retrieval on the {split} half (ours / plain BM25; hits below confidence {MIN_CONFIDENCE} x the length "
        f"scale left out, below {WEAK_CONFIDENCE} x it marked weak):"
    )
    print("| set | " + " | ".join(VIEWS) + " |")
    print("|---|" + "---|" * len(VIEWS))
    for eval_set in sets:
        result = evaluate(eval_set, split)
        cells = []
        for view in VIEWS:
            if view not in result:
                cells.append("-")
                continue
            ours, theirs = result[view]
            mark = "" if ours.mean >= theirs.mean else " (below BM25)"
            cells.append(f"{ours.mean:.2f} / {theirs.mean:.2f}{mark} (n={ours.n})")
        print(f"| {eval_set.name} | " + " | ".join(cells) + " |")
    if missing:
        print(f"(not built: {', '.join(missing)}: run bench/build_search_sets.py)")
    print(
        "Views: agent/step = tool recall@5, task = tool recall@10 (share of the needed tools for the public sets), "
        "task-server/server = server recall@5, none = answered with nothing or a weak mark."
    )
    entries = catalog_entries()
    finder = ToolFinder()
    finder.update(entries)
    by_form = {"exported": 0, "server.tool": 0, "server__tool": 0}
    downstream = [e for e in entries if e.server_name is not None]
    aliases = {f"{e.server_name}.{e.tool.name}": e.name for e in downstream}
    aliases.update({f"{e.server_name}__{e.tool.name}": e.name for e in downstream})
    for e in downstream:
        for form, name in (
            ("exported", e.name),
            ("server.tool", f"{e.server_name}.{e.tool.name}"),
            ("server__tool", f"{e.server_name}__{e.tool.name}"),
        ):
            found = finder.select([name], aliases.get)
            by_form[form] += [x.name for x in found.entries] == [e.name]
    print(
        "select: "
        + ", ".join(f"{form} {count}/{len(downstream)}" for form, count in by_form.items())
        + f" ({len(entries)} tools in the catalog)"
    )
    everything = [e.tool.model_copy(update={"name": e.name}) for e in entries]
    builtins = [e.tool for e in entries if e.server_name is None]
    servers = list(dict.fromkeys(e.server_name for e in entries if e.server_name))
    meta = [search_tools_definition(servers), call_tool_definition()]
    print(
        f"tools/list tokens (chars/4): all {len(entries)} tools {_tokens(everything):,}; search mode "
        f"{_tokens(builtins + meta):,} (built-ins {_tokens(builtins):,} + search_tools/call_tool {_tokens(meta):,})"
    )


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def speed() -> None:
    copies = 22  # 465 tools x 22 = 10,230 downstream tools
    entries = catalog_entries(copies)
    builds: list[float] = []
    build_cpu: list[float] = []
    finder = ToolFinder()
    for _ in range(3):  # the best of three: the machine is shared
        started, cpu = time.perf_counter(), time.process_time()
        finder = ToolFinder()
        finder.update(entries)
        builds.append(time.perf_counter() - started)
        build_cpu.append(time.process_time() - cpu)
    build = min(builds)
    tracemalloc.start()  # a separate build: tracing slows it down several times
    traced = ToolFinder()
    traced.update(entries)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del traced
    texts: list[Query] = [q for q in queries() if q.kind != "none"]
    samples: list[float] = []
    cpu_samples: list[float] = []
    for _ in range(5):
        for q in texts:
            t0, c0 = time.perf_counter(), time.process_time()
            finder.search(q.query, 5)
            samples.append(time.perf_counter() - t0)
            cpu_samples.append(time.process_time() - c0)
    # One server's tools change (github-7 gains a tool): only it is re-indexed.
    changed = list(entries)
    victim = next(i for i, e in enumerate(changed) if e.server_name == "github-7")
    extra = changed[victim].tool.model_copy(update={"name": "extra_tool", "input_schema": {"type": "object"}})
    changed.insert(victim, Entry("mcp__github-7__extra_tool", "github-7", extra))
    t0 = time.perf_counter()
    finder.update(changed)
    reindex = time.perf_counter() - t0
    t0 = time.perf_counter()
    finder.update(changed)
    unchanged = time.perf_counter() - t0
    load = os.getloadavg()[0]
    print(f"Speed at {len(entries):,} tools ({copies} copies of the catalog), load average {load:.1f}:")
    print("| build | query p50 | query p95 | index memory (peak while building) | re-index one server | no change |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {build:.2f} s | {_pct(samples, 0.5):.2f} ms | {_pct(samples, 0.95):.2f} ms "
        f"| {current / 2**20:.0f} MB ({peak / 2**20:.0f} MB) | {reindex * 1000:.0f} ms | {unchanged * 1000:.0f} ms |"
    )
    print(
        f"CPU time (this process only, less disturbed by a busy machine): build {min(build_cpu):.2f} s, "
        f"query p50 {_pct(cpu_samples, 0.5):.2f} ms, p95 {_pct(cpu_samples, 0.95):.2f} ms"
    )


class _FakeDownstreams:
    """The `toolbox.DownstreamTools` a Toolbox needs, over fixed tools (no process, no MCP session)."""

    def __init__(self, tools: list[tuple[str, Any]]) -> None:
        self.version = 1
        self.ready = True
        self._tools = tools

    def tools(self) -> list[tuple[str, Any]]:
        return self._tools

    def replace(self, tools: list[tuple[str, Any]]) -> None:
        self._tools = tools
        self.version += 1

    def get_tool(self, server_name: str, tool_name: str) -> Any:
        return None

    def unavailable(self, name: str) -> str | None:
        return None

    async def wait_ready(self, until: Any = None) -> None:
        return None

    async def call_tool(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def hub_refresh() -> None:
    """The hub's whole path after a list_changed at 10,000 tools: the Toolbox's namespace rebuilt, the
    search index following (one server re-indexed), the auto check, one session's tools/list."""
    import tempfile

    import anyio

    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.server.tool_search import SessionTools
    from omega_mcp.toolbox import Toolbox

    servers = catalog_servers(22)
    fake = _FakeDownstreams([(key, tool) for key, tools in servers for tool in tools])

    async def run() -> tuple[float, float]:
        with tempfile.TemporaryDirectory() as home:
            config = Config(home=Path(home))
            policy = SandboxPolicy.from_settings(config.sandbox, config.place)
            async with Toolbox(policy, fake) as toolbox:  # type: ignore[arg-type]
                search = SessionTools(toolbox, mode="auto")
                t0 = time.perf_counter()
                await search.list_tools(None)
                first = time.perf_counter() - t0
                changed = [
                    (key, [*tools, tools[0].model_copy(update={"name": "extra"})])
                    if key == "github-7"
                    else (key, tools)
                    for key, tools in servers
                ]
                fake.replace([(key, tool) for key, tools in changed for tool in tools])
                t0 = time.perf_counter()
                await search.list_tools(None)
                return first, time.perf_counter() - t0

    first, again = anyio.run(run)
    print(
        f"Hub at {len(fake.tools()):,} downstream tools: first tools/list in search mode {first:.2f} s; after one "
        f"server's tools changed {again * 1000:.0f} ms (the Toolbox's namespace rebuilt, re-index, auto check, listing)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument(
        "--split", choices=("test", "dev"), default="test", help="test: the frozen half (default); dev: the tuning half"
    )
    options = parser.parse_args()
    both = not options.quality and not options.speed
    if options.quality or both:
        quality(options.split)
    if options.speed or both:
        speed()
        hub_refresh()


if __name__ == "__main__":
    main()
