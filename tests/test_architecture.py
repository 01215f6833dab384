"""The package's shape, read from the source with `ast`: no import cycles, an SDK-free sandbox, short modules.

Every import counts: at module level, inside functions, under `if TYPE_CHECKING:` and in
`try`/`except`, absolute or relative. Edges join modules of `omega_mcp`:

- `import omega_mcp.x.y` and `from omega_mcp.x.y import name` import `omega_mcp.x.y`;
- `from omega_mcp.x import y` imports the submodule `omega_mcp.x.y` when there is one, else
  `omega_mcp.x` (for a package, its `__init__.py`);
- the parent packages Python initialises on the way are not edges, or every package that
  re-exports a submodule would be "in a cycle" with it.

A failure lists everything to fix: each cycle as a chain of modules, each way from the sandbox to
the SDK, each module over the line limit.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "src" / "omega_mcp"
MAX_LINES = 800  # the hard limit (STYLE: split before 800); ~400 is a target, never a rule
SANDBOX = "omega_mcp.sandbox"
WIRE = "omega_mcp.wire"
ABOVE_WIRE = ("omega_mcp.proxy", "omega_mcp.fastpath", "omega_mcp.server")
SDK_PACKAGES = frozenset({"mcp", "mcp_types"})


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Import:
    """One import statement's module, absolute (relative imports are resolved)."""

    importer: str
    target: str
    names: tuple[str, ...]
    """For `from target import a, b`: ("a", "b"); empty for `import target`."""
    line: int


@dataclass(frozen=True)
class Scan:
    package: str
    modules: dict[str, Module]
    imports: tuple[Import, ...]

    def is_ours(self, name: str) -> bool:
        return name == self.package or name.startswith(self.package + ".")

    def targets(self, found: Import) -> list[str]:
        """The package modules one import statement makes `found.importer` depend on."""
        if not found.names or found.names == ("*",):
            return [found.target]
        submodules = [f"{found.target}.{name}" for name in found.names if f"{found.target}.{name}" in self.modules]
        return submodules if len(submodules) == len(found.names) else [*submodules, found.target]

    def where(self, found: Import) -> str:
        return f"{self.modules[found.importer].path}:{found.line}"

    @functools.cached_property
    def graph(self) -> dict[str, frozenset[str]]:
        edges: dict[str, set[str]] = {name: set() for name in self.modules}
        for found in self.imports:
            if self.is_ours(found.target):
                edges[found.importer].update(t for t in self.targets(found) if t != found.importer)
        return {name: frozenset(targets) for name, targets in edges.items()}


def scan(package_dir: Path) -> Scan:
    """Every module under `package_dir` (a package directory) and every import in them."""
    modules: dict[str, Module] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, is_package)
    imports = tuple(found for module in modules.values() for found in _imports_of(module))
    return Scan(package_dir.name, modules, imports)


def _imports_of(module: Module) -> Iterator[Import]:
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module.name, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            if node.level == 0:
                assert node.module is not None
                yield Import(module.name, node.module, names, node.lineno)
                continue
            # `.` is the importer's own package (a package's __init__ is its own package).
            package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
            up = node.level - 1
            assert up < len(package), f"{module.path}:{node.lineno}: relative import beyond the top"
            base = package[: len(package) - up]
            target = ".".join([*base, node.module] if node.module else base)
            yield Import(module.name, target, names, node.lineno)


def _components(edges: dict[str, frozenset[str]]) -> list[set[str]]:
    """Strongly connected components (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for start in sorted(edges):
        if start in index:
            continue
        enter(start)
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    enter(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while node not in component:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                components.append(component)
    return components


def _shortest_path(edges: dict[str, frozenset[str]], source: str, target: str, within: set[str]) -> list[str]:
    previous: dict[str, str] = {}
    queue = deque([source])
    seen = {source}
    while queue:
        node = queue.popleft()
        if node == target:
            path = [node]
            while path[-1] != source:
                path.append(previous[path[-1]])
            return path[::-1]
        for child in sorted(edges[node] & within):
            if child not in seen:
                seen.add(child)
                previous[child] = node
                queue.append(child)
    raise AssertionError(f"{target} is not reachable from {source}")


def _reachable(edges: dict[str, frozenset[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for child in edges[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


def import_cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """For every import edge that lies on a cycle, the shortest cycle through it (deduplicated).

    A cycle is a chain `[a, b, ..., a]` where each module imports the next, rotated to start at its
    smallest name; shortest first.
    """
    cycles: set[tuple[str, ...]] = set()
    for component in _components(edges):
        for importer in sorted(component):
            for imported in sorted(edges[importer] & component):
                loop = [importer, *_shortest_path(edges, imported, importer, component)[:-1]]
                first = loop.index(min(loop))
                cycles.add(tuple(loop[first:] + loop[:first]))
    return [[*cycle, cycle[0]] for cycle in sorted(cycles, key=lambda cycle: (len(cycle), cycle))]


@functools.cache
def omega() -> Scan:
    found = scan(PACKAGE_DIR)
    assert "omega_mcp" in found.modules, f"no package at {PACKAGE_DIR}"
    return found


def test_the_scanner_counts_every_kind_of_import(tmp_path: Path) -> None:
    sources = {
        "__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "a.py": "def f():\n    from . import b\n",
        "b.py": "from .sub import c\nfrom pkg import VERSION\nimport mcp.types\n",
        "sub/__init__.py": "",
        "sub/c.py": (
            "try:\n    import pkg.a as alias\nexcept ImportError:\n    from .. import a\nfrom pkg.sub import *\n"
        ),
        "lone.py": "from pkg.sub.c import name\nfrom . import lone\n",
    }
    for name, text in sources.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    found = scan(tmp_path / "pkg")
    assert found.graph == {
        "pkg": {"pkg.b"},  # under TYPE_CHECKING
        "pkg.a": {"pkg.b"},  # relative, inside a function
        "pkg.b": {"pkg.sub.c", "pkg"},  # a submodule; an attribute of the package's __init__
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg.a", "pkg.sub"},  # in try and in except; `*` is its only edge to its package
        "pkg.lone": {"pkg.sub.c"},  # importing itself is no edge
    }
    assert any(i.importer == "pkg.b" and i.target == "mcp.types" for i in found.imports)
    assert import_cycles(found.graph) == [["pkg", "pkg.b", "pkg"], ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]


def test_every_internal_import_names_an_existing_module() -> None:
    package = omega()
    missing = [
        f"{package.where(found)}: {found.target}"
        for found in package.imports
        if package.is_ours(found.target) and found.target not in package.modules
    ]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def test_no_import_cycles() -> None:
    cycles = import_cycles(omega().graph)
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _importers_of(package: Scan, packages: frozenset[str]) -> dict[str, Import]:
    """Each omega module that imports one of `packages` (top-level names) -> one such import."""
    return {found.importer: found for found in package.imports if found.target.split(".")[0] in packages}


def _ways_to(package: Scan, start: str, importers: dict[str, Import]) -> list[str]:
    """The shortest way from `start` to each of `importers` it reaches, ending in the import itself."""
    everything = set(package.modules)
    ways: list[str] = []
    for user in sorted(_reachable(package.graph, start) & importers.keys()):
        found = importers[user]
        chain = _shortest_path(package.graph, start, user, everything)
        ways.append(f"{' -> '.join(chain)} -> {found.target} ({package.where(found)})")
    return ways


def test_the_sandbox_never_imports_the_sdk() -> None:
    """The bash trampoline and the sandbox helpers must stay importable without the MCP SDK:
    no sandbox module imports it, directly or through another omega_mcp module."""
    package = omega()
    sdk_users = _importers_of(package, SDK_PACKAGES)
    everything = set(package.modules)
    chains: dict[str, list[str]] = {}  # each SDK user the sandbox reaches -> the shortest way there
    for name in sorted(package.modules):
        if name == SANDBOX or name.startswith(SANDBOX + "."):
            for user in _reachable(package.graph, name) & sdk_users.keys():
                chain = _shortest_path(package.graph, name, user, everything)
                if user not in chains or len(chain) < len(chains[user]):
                    chains[user] = chain
    offenders = [
        f"{' -> '.join(chain)} -> {sdk_users[user].target} ({package.where(sdk_users[user])})"
        for user, chain in sorted(chains.items())
    ]
    assert not offenders, "the sandbox imports the MCP SDK:\n" + "\n".join(offenders)


def test_the_wire_layer_is_below_proxy_and_fastpath_and_free_of_the_sdk() -> None:
    """wire/ moves bytes and JSON dicts: no wire module reaches the MCP SDK or `proxy/`, `fastpath/` or
    `server/`, directly or through another omega_mcp module (SDK types only at the hand-over, above it)."""
    package = omega()
    sdk_users = _importers_of(package, SDK_PACKAGES)
    everything = set(package.modules)
    offenders: list[str] = []
    for name in sorted(package.modules):
        if not _within(name, WIRE):
            continue
        offenders += _ways_to(package, name, sdk_users)
        reached = _reachable(package.graph, name)
        for above in sorted(m for m in reached if any(_within(m, layer) for layer in ABOVE_WIRE)):
            offenders.append(" -> ".join(_shortest_path(package.graph, name, above, everything)))
    assert not offenders, "wire/ must stay below proxy/, fastpath/ and the SDK:\n" + "\n".join(offenders)


def test_no_module_is_longer_than_the_limit() -> None:
    lengths = {
        module.path.relative_to(ROOT): len(module.path.read_text(encoding="utf-8").splitlines())
        for module in omega().modules.values()
    }
    too_long = sorted(((lines, path) for path, lines in lengths.items() if lines > MAX_LINES), reverse=True)
    assert not too_long, f"modules over {MAX_LINES} lines:\n" + "\n".join(f"{p}: {n}" for n, p in too_long)


CHILD = "omega_mcp.sandbox.child"


def child_offenders(package: Scan, child: str) -> list[str]:
    """Every import in the `child` package that is neither the standard library nor a sibling there.

    The child side runs as `python -I -S` with its directory on `sys.path` (no site-packages, no
    omega_mcp), so a sibling is imported by its bare name there (`import landlock`) and by its full
    name when omega imports the file (`omega_mcp.sandbox.child.landlock`); both count as siblings."""
    prefix = child + "."
    siblings = {name.removeprefix(prefix) for name in package.modules if name.startswith(prefix)}
    offenders: list[str] = []
    for found in package.imports:
        if found.importer != child and not found.importer.startswith(prefix):
            continue
        target = found.target
        if target == child or target.startswith(prefix):
            continue
        if target.split(".")[0] in sys.stdlib_module_names or target in siblings:
            continue
        offenders.append(f"{found.importer} imports {target} ({package.where(found)})")
    return offenders


def test_the_child_side_imports_only_the_standard_library_and_its_siblings() -> None:
    """`sandbox/child/` runs inside the sandbox as `python -I -S`: anything else it imported would fail
    there at run time (or, worse, be found in a write root on `sys.path`)."""
    package = omega()
    assert CHILD in package.modules, f"no package {CHILD}"
    offenders = child_offenders(package, CHILD)
    assert not offenders, "sandbox/child/ must import only the standard library and its siblings:\n" + "\n".join(
        offenders
    )


def test_the_child_check_finds_a_package_import_and_a_third_party_one(tmp_path: Path) -> None:
    child = tmp_path / "pkg" / "sandbox" / "child"
    child.mkdir(parents=True)
    for init in (tmp_path / "pkg", tmp_path / "pkg" / "sandbox", child):
        (init / "__init__.py").write_text("")
    (tmp_path / "pkg" / "errors.py").write_text("")
    (child / "good.py").write_text("import os\nimport _ctypes\nimport sibling\nfrom pkg.sandbox.child import sibling\n")
    (child / "sibling.py").write_text("from . import good\n")
    (child / "bad.py").write_text("import pydantic\nfrom pkg import errors\nfrom ..policy import x\n")
    offenders = child_offenders(scan(tmp_path / "pkg"), "pkg.sandbox.child")
    assert [line.split(" (")[0] for line in offenders] == [
        "pkg.sandbox.child.bad imports pydantic",
        "pkg.sandbox.child.bad imports pkg",
        "pkg.sandbox.child.bad imports pkg.sandbox.policy",
    ]


SEARCH = "omega_mcp.search"
_IO_MODULES = frozenset({"os", "io", "socket", "subprocess", "pathlib", "shutil", "urllib", "http", "anyio", "httpx2"})


def test_the_search_index_is_pure_python_without_mcp_or_io() -> None:
    """search/ ranks tools and nothing else: it imports no other omega_mcp module, no SDK, no I/O."""
    package = omega()
    offenders = [
        f"{found.importer} imports {found.target} ({package.where(found)})"
        for found in package.imports
        if (found.importer == SEARCH or found.importer.startswith(SEARCH + "."))
        and (
            (package.is_ours(found.target) and not (found.target == SEARCH or found.target.startswith(SEARCH + ".")))
            or found.target.split(".")[0] in SDK_PACKAGES | _IO_MODULES
        )
    ]
    assert not offenders, "search/ must stay pure:\n" + "\n".join(offenders)


def _unit(package: Scan, name: str) -> str:
    """The package (`omega_mcp.proxy`) or top-level module (`omega_mcp.narrow`) a module belongs to."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else name


def test_no_two_packages_import_each_other() -> None:
    """Packages are layers: `fastpath/` may use `proxy/`, never the other way round (their shared pipe
    framing lives below both, in `omega_mcp.wire.pipes`)."""
    package = omega()
    edges: dict[str, set[str]] = {}
    for importer, targets in package.graph.items():
        for target in targets:
            a, b = _unit(package, importer), _unit(package, target)
            if a != b:
                edges.setdefault(a, set()).add(b)
    both = sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, set()))
    assert not both, "packages importing each other both ways:\n" + "\n".join(f"{a} <-> {b}" for a, b in both)


TOOLBOX = ("omega_mcp.toolbox", "omega_mcp.calling", "omega_mcp.builtin")


def test_the_toolbox_and_the_builtins_need_only_the_wire_types() -> None:
    """`Toolbox`, the call's context and the built-in tools import the wire types (`mcp_types`, which
    `mcp.types` mirrors name for name), never the SDK (`mcp`: its client, server and transports cost a
    process 0.35 s of CPU to import), directly or through another omega_mcp module: a program or an
    attack that drives a Toolbox starts in half the time, and the tools do not depend on a transport."""
    package = omega()
    sdk_users = _importers_of(package, frozenset({"mcp"}))
    offenders = [
        way
        for name in sorted(m for m in package.modules if any(_within(m, root) for root in TOOLBOX))
        for way in _ways_to(package, name, sdk_users)
    ]
    assert not offenders, "the Toolbox reaches the MCP SDK (import mcp_types instead):\n" + "\n".join(offenders)
