"""The tool-search evaluation sets (bench/data/) and their views, ours beside plain BM25.

A set is a catalog (the hub's namespace: the built-ins, then `mcp__<server>__<tool>`) and queries in
views. Tool views (`agent`, `step`, `task`) count recall@k over the tools the hub returns (through
`ToolFinder.search`, as `search_tools` answers); the `server` view counts recall@5 over the servers
ranked for the query (`ToolFinder.servers`; for BM25, the servers in the order its tools rank).
Expected tools and servers are alternatives ("any of them counts") for steps and the hand-written
queries, and all needed ("the share found") for the public sets' whole tasks.
Every query has a split, `dev` (may be tuned on) or `test` (frozen: never looked at while tuning).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import types

from omega_mcp.builtin.schemas import BUILTIN_TOOLS
from omega_mcp.names import Namespace, Route
from omega_mcp.toolsearch import BUILTIN_SERVER, Entry, ToolFinder

DATA = Path(__file__).resolve().parent / "data"
PUBLIC = ("bfcl_multi_turn", "bfcl_live_multiple", "nestful")


@dataclass(frozen=True)
class Case:
    id: str
    view: str  # agent | step | task | server | none
    query: str
    tools: tuple[str, ...]  # exported names
    servers: tuple[str, ...]  # servers.toml keys (BUILTIN_SERVER for the built-ins)
    split: str  # dev | test
    every: bool = False  # all expected are needed (the share found counts), else any one counts


@dataclass
class EvalSet:
    name: str
    entries: list[Entry]
    cases: list[Case]


def _entries(servers: Sequence[tuple[str, list[types.Tool]]]) -> tuple[list[Entry], dict[tuple[str, str], str]]:
    builtin_tools = [tool for tool, _ in BUILTIN_TOOLS]
    namespace = Namespace([t.name for t in builtin_tools], [(key, t.name) for key, tools in servers for t in tools])
    entries = [Entry(t.name, None, t) for t in builtin_tools]
    names = {(BUILTIN_SERVER, t.name): t.name for t in builtin_tools}
    for key, tools in servers:
        for tool in tools:
            exported = namespace.name_of(Route(key, tool.name))
            entries.append(Entry(exported, key, tool))
            names[(key, tool.name)] = exported
    return entries, names


def _tool_of(raw: list[Any]) -> types.Tool:
    name, description, params = raw
    properties = {key: {"type": "string", "description": text} for key, text in params.items()}
    return types.Tool(name=name, description=description, input_schema={"type": "object", "properties": properties})


def _cases(raw: Iterable[dict[str, Any]], names: dict[tuple[str, str], str], every_task: bool) -> list[Case]:
    cases: list[Case] = []
    for item in raw:
        tools = tuple(names[tuple(t.split("/", 1))] for t in item["tools"])  # type: ignore[index]
        every = every_task and item["view"] == "task"
        cases.append(Case(item["id"], item["view"], item["query"], tools, tuple(item["servers"]), item["split"], every))
    return cases


def load_sets(only: Sequence[str] = ()) -> list[EvalSet]:
    """The hand-written catalog set, the project's own fixture queries, then every public set present."""
    import search_support  # tests/ on the path

    sets: list[EvalSet] = []
    catalog = search_support.catalog_servers()
    entries, names = _entries(catalog)
    written = json.loads((DATA / "catalog_queries.json").read_text(encoding="utf-8"))["queries"]
    sets.append(EvalSet("catalog", entries, _cases(written, names, every_task=False)))
    fixture: list[Case] = []
    for number, q in enumerate(search_support.queries()):
        view = "none" if q.kind == "none" else "agent"
        split = "dev" if q.split == "dev" else "test"
        fixture.append(Case(f"fixture-{number}", view, q.query, q.expected, (), split))
    sets.append(EvalSet("fixture", entries, fixture))
    for name in PUBLIC:
        path = DATA / f"{name}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        servers = [(key, [_tool_of(t) for t in tools]) for key, tools in data["servers"].items()]
        entries, names = _entries(servers)
        sets.append(EvalSet(name, entries, _cases(data["queries"], names, every_task=True)))
    return [s for s in sets if not only or s.name in only]


class PlainBM25:
    """The baseline: plain BM25 (k1 1.2, b 0.75) over the name and description as one text, words split
    at non-alphanumerics only, no stemming, no synonyms, no fields, no cut."""

    _WORDS = re.compile(r"[a-z0-9]+")

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = list(entries)
        self.docs = [Counter(self._WORDS.findall(f"{e.name} {e.tool.description or ''}".lower())) for e in entries]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.average = sum(self.lengths) / max(1, len(self.lengths))
        self.df = Counter(word for d in self.docs for word in d)
        self.postings: dict[str, list[int]] = {}
        for number, d in enumerate(self.docs):
            for word in d:
                self.postings.setdefault(word, []).append(number)

    def rank(self, query: str) -> list[Entry]:
        n = len(self.docs)
        scores: dict[int, float] = {}
        for word in self._WORDS.findall(query.lower()):
            df = self.df.get(word, 0)
            if not df:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for number in self.postings[word]:
                tf = self.docs[number][word]
                norm = 1.2 * (0.25 + 0.75 * self.lengths[number] / self.average)
                scores[number] = scores.get(number, 0.0) + idf * tf * 2.2 / (tf + norm)
        ordered = sorted(scores, key=lambda number: (-scores[number], number))
        return [self.entries[number] for number in ordered]


def _server(entry: Entry) -> str:
    return entry.server_name or BUILTIN_SERVER


def _recall(found: Sequence[str], expected: Sequence[str], every: bool) -> float:
    if not expected:
        return 0.0
    hits = sum(1 for name in set(expected) if name in found)
    return hits / len(set(expected)) if every else float(hits > 0)


@dataclass
class Score:
    n: int = 0
    total: float = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else float("nan")


VIEWS = ("agent", "step", "task", "task-server", "server", "none")
"""agent/step: tool recall@5; task: tool recall@10 (a task needs several); task-server and server:
server recall@5; none (no tool fits): the share answered with nothing or a weak match."""


def evaluate(eval_set: EvalSet, split: str, finder: ToolFinder | None = None) -> dict[str, tuple[Score, Score]]:
    """view -> (ours, plain BM25) on one split of one set."""
    if finder is None:
        finder = ToolFinder()
        finder.update(eval_set.entries)
    bm25 = PlainBM25(eval_set.entries)
    out: dict[str, tuple[Score, Score]] = {}

    def score(view: str) -> tuple[Score, Score]:
        return out.setdefault(view, (Score(), Score()))

    for case in eval_set.cases:
        if case.split != split:
            continue
        if case.view == "none":
            found = finder.search(case.query, 5)
            score("none")[0].add(float(not found.entries or found.weak))
            score("none")[1].add(float(not bm25.rank(case.query)))
            continue
        baseline = bm25.rank(case.query)
        if case.tools:
            k = 10 if case.view == "task" else 5
            ours = [e.name for e in finder.search(case.query, k).entries]
            theirs = [e.name for e in baseline[:k]]
            ours_score, theirs_score = score(case.view)
            ours_score.add(_recall(ours, case.tools, case.every))
            theirs_score.add(_recall(theirs, case.tools, case.every))
        if case.servers and case.view in ("task", "server"):
            view = "task-server" if case.view == "task" else "server"
            ours_servers = [s or BUILTIN_SERVER for s in finder.servers(case.query, 5)]
            theirs_servers = list(dict.fromkeys(_server(e) for e in baseline))[:5]
            ours_score, theirs_score = score(view)
            ours_score.add(_recall(ours_servers, case.servers, case.every))
            theirs_score.add(_recall(theirs_servers, case.servers, case.every))
    return out
