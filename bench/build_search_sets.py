"""Build the public tool-search evaluation sets of bench/data/ from data shipped in PyPI packages.

Usage: pip install --no-deps bfcl-eval nestful-wrapper; python bench/build_search_sets.py

Each set is a catalog (servers and their tools: name, description, parameter descriptions) and
queries with the tools and servers that answer them, in three views:
- `task`: a whole task of several steps, as the user wrote it (its tools and its servers are expected);
- `step`: one step of a task in the user's words (any of the tools it called counts);
- `agent`: one step in an agent's words (the hand-written sets only, see catalog_queries.json).
Every query carries a `split`, `dev` or `test`, from a hash of its set and task id (all steps of one
task fall on the same side): the ranking may be tuned on `dev` only; `test` is the frozen half.
The sets are derived (responses, outputs and answers dropped) and small; the packages are
Apache-2.0 licensed (see bench/data/README.md). Rebuilding gives the same files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

_DATA = Path(__file__).resolve().parent / "data"
_PARAM_CHARS = 200
_DESCRIPTION_CHARS = 1000


def split_of(set_name: str, task_id: str) -> str:
    """`dev` or `test`, fixed by a hash: never chosen by looking at results."""
    return "dev" if hashlib.sha256(f"{set_name}:{task_id}".encode()).digest()[0] % 2 == 0 else "test"


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{module} is not installed: pip install --no-deps bfcl-eval nestful-wrapper")
    return Path(next(iter(spec.submodule_search_locations)))


def _lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return loaded if isinstance(loaded, list) else [loaded]


def _tool(name: str, description: str, params: dict[str, Any]) -> list[Any]:
    """[name, description, {param: description}]: what the index reads of a tool."""
    docs = {
        key: str((value or {}).get("description", "") if isinstance(value, dict) else "")[:_PARAM_CHARS]
        for key, value in params.items()
    }
    return [name, (description or "")[:_DESCRIPTION_CHARS], docs]


def _user_text(turn: list[dict[str, Any]]) -> str:
    return " ".join(m["content"] for m in turn if m.get("role") == "user").strip()


_CALL = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*\(")
_BFCL_CLASSES = {
    "GorillaFileSystem": "gorilla_file_system",
    "VehicleControlAPI": "vehicle_control",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "MathAPI": "math_api",
}


def bfcl_multi_turn(root: Path) -> dict[str, Any]:
    """BFCL v4 multi-turn base: 8 API classes (and 4 more as distractors) are the servers; the user's
    turns joined are the task (its classes are the servers), each turn is a step (its calls the tools)."""
    servers: dict[str, list[list[Any]]] = {}
    for doc in sorted((root / "data" / "multi_turn_func_doc").glob("*.json")):
        key = doc.stem.replace("_", "-")
        servers[key] = [_tool(f["name"], f["description"], f["parameters"]["properties"]) for f in _lines(doc)]
    answers = {
        a["id"]: a["ground_truth"] for a in _lines(root / "data" / "possible_answer" / "BFCL_v4_multi_turn_base.json")
    }
    queries: list[dict[str, Any]] = []
    for item in _lines(root / "data" / "BFCL_v4_multi_turn_base.json"):
        keys = [_BFCL_CLASSES[c].replace("_", "-") for c in item["involved_classes"]]
        owner = {tool[0]: key for key in keys for tool in servers[key]}
        split = split_of("bfcl-multi-turn", item["id"])
        all_tools: list[str] = []
        for number, (turn, calls) in enumerate(zip(item["question"], answers[item["id"]], strict=False)):
            text = _user_text(turn)
            names = [m.group(1) for call in calls if (m := _CALL.match(call))]
            tools = list(dict.fromkeys(f"{owner[n]}/{n}" for n in names if n in owner))
            all_tools.extend(tools)
            if text and tools:
                step = {"id": f"{item['id']}.{number}", "view": "step", "query": text, "tools": tools}
                queries.append({**step, "servers": sorted({t.split("/")[0] for t in tools}), "split": split})
        task = " ".join(_user_text(turn) for turn in item["question"])
        tools = list(dict.fromkeys(all_tools))
        if task and tools:
            used = sorted({t.split("/")[0] for t in tools})
            queries.append(
                {"id": item["id"], "view": "task", "query": task, "tools": tools, "servers": used, "split": split}
            )
    return {"servers": servers, "queries": queries}


def _live_server(name: str) -> str:
    return name.split(".", 1)[0] if "." in name else "live"


def bfcl_live_multiple(root: Path) -> dict[str, Any]:
    """BFCL v4 live multiple: real users' requests; every function offered to any of them pooled in one
    catalog (a name once), grouped by its dotted prefix (the rest under `live`); each request is a step."""
    servers: dict[str, list[list[Any]]] = {}
    seen: set[str] = set()
    items = _lines(root / "data" / "BFCL_v4_live_multiple.json")
    for item in items:
        for f in item["function"]:
            if f["name"] not in seen:
                seen.add(f["name"])
                params = (f.get("parameters") or {}).get("properties") or {}
                servers.setdefault(_live_server(f["name"]), []).append(
                    _tool(f["name"], f.get("description", ""), params)
                )
    answers = {
        a["id"]: a["ground_truth"] for a in _lines(root / "data" / "possible_answer" / "BFCL_v4_live_multiple.json")
    }
    queries: list[dict[str, Any]] = []
    for item in items:
        text = " ".join(_user_text(turn) for turn in item["question"])
        names = [name for call in answers.get(item["id"], []) for name in call]
        tools = list(dict.fromkeys(f"{_live_server(n)}/{n}" for n in names if n in seen))
        if text and tools:
            servers_used = sorted({t.split("/")[0] for t in tools})
            split = split_of("bfcl-live", item["id"])
            queries.append(
                {
                    "id": item["id"],
                    "view": "step",
                    "query": text,
                    "tools": tools,
                    "servers": servers_used,
                    "split": split,
                }
            )
    return {"servers": servers, "queries": queries}


def _nestful_server(tool: dict[str, Any], part: str) -> str:
    if part == "sgd":
        return tool["name"].split(".", 1)[0].lower()
    host = str(tool.get("host") or "")
    if host:
        return host.split(".", 1)[0]
    return f"glaive-{tool['name']}".replace("_", "-")


def nestful(root: Path) -> dict[str, Any]:
    """NESTFUL (executable, SGD, Glaive) and ComplexFuncBench as nestful-wrapper ships them, pooled:
    servers are the API hosts (RapidAPI), the SGD domains, and one server per Glaive function; every
    request is a task (several calls: their tools and servers are expected)."""
    parts = {
        "executable": ("executable/executable-spec.json", "executable/executable-data.json"),
        "sgd": ("non-executable/non-executable-sgd-spec.json", "non-executable/non-executable-sgd-data.json"),
        "glaive": ("non-executable/non-executable-glaive-spec.json", "non-executable/non-executable-glaive-data.json"),
        "complexfuncbench": (
            "complexfuncbench/complexfuncbench-spec.json",
            "complexfuncbench/complexfuncbench-data.json",
        ),
    }
    servers: dict[str, list[list[Any]]] = {}
    owner: dict[str, str] = {}
    queries: list[dict[str, Any]] = []
    for part, (spec, data) in parts.items():
        for tool in _lines(root / spec):
            if tool["name"] in owner:
                continue
            key = _nestful_server(tool, part)
            owner[tool["name"]] = key
            servers.setdefault(key, []).append(
                _tool(tool["name"], tool.get("description", ""), tool.get("query_parameters") or {})
            )
        for number, item in enumerate(_lines(root / data)):
            names = [call["name"] for call in item.get("output", []) if call.get("name") in owner]
            tools = list(dict.fromkeys(f"{owner[n]}/{n}" for n in names))
            text = " ".join(str(item.get("input", "")).split())
            if text and tools:
                task_id = f"{part}-{number}"
                servers_used = sorted({t.split("/")[0] for t in tools})
                split = split_of("nestful", task_id)
                queries.append(
                    {
                        "id": task_id,
                        "view": "task",
                        "query": text,
                        "tools": tools,
                        "servers": servers_used,
                        "split": split,
                    }
                )
    return {"servers": servers, "queries": queries}


def main() -> None:
    bfcl = _package_dir("bfcl_eval")
    nest = _package_dir("data_v1")
    sets = {
        "bfcl_multi_turn": ("bfcl-eval", bfcl_multi_turn(bfcl)),
        "bfcl_live_multiple": ("bfcl-eval", bfcl_live_multiple(bfcl)),
        "nestful": ("nestful-wrapper", nestful(nest)),
    }
    _DATA.mkdir(exist_ok=True)
    for name, (package, derived) in sets.items():
        out = _DATA / f"{name}.json"
        built = {"source": package, "license": "Apache-2.0", **derived}
        out.write_text(json.dumps(built, separators=(",", ":"), ensure_ascii=False) + "\n", encoding="utf-8")
        tools = sum(len(v) for v in built["servers"].values())
        print(f"{out.name}: {len(built['servers'])} servers, {tools} tools, {len(built['queries'])} queries")


if __name__ == "__main__":
    main()
