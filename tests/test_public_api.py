"""The package's public API: one table (`_EXPORTS`), loaded lazily, with matching type-checker imports."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import omega_mcp

INIT = Path(omega_mcp.__file__)


def _module_ast() -> ast.Module:
    return ast.parse(INIT.read_text(encoding="utf-8"), filename=str(INIT))


def _exports_table() -> dict[str, str]:
    """`_EXPORTS` as written in the source (the module's private name is not read at runtime)."""
    for node in _module_ast().body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == "_EXPORTS" for target in targets):
            table = ast.literal_eval(value)
            assert isinstance(table, dict)
            return {str(name): str(module) for name, module in table.items()}
    raise AssertionError(f"no `_EXPORTS = {{...}}` literal in {INIT}")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _type_checking_imports() -> list[tuple[str, str, str | None]]:
    """`(module, name, alias)` for every import under a top-level `if TYPE_CHECKING:`."""
    found: list[tuple[str, str, str | None]] = []
    for node in _module_ast().body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in ast.walk(node):
            if isinstance(statement, ast.ImportFrom):
                assert statement.level == 0 and statement.module, "use absolute imports in the TYPE_CHECKING block"
                found.extend((statement.module, alias.name, alias.asname) for alias in statement.names)
            elif isinstance(statement, ast.Import):
                found.extend((alias.name, alias.name, alias.asname) for alias in statement.names)
    return found


def test_all_is_the_table_plus_version() -> None:
    assert omega_mcp.__all__ == [*_exports_table(), "__version__"]
    assert len(set(omega_mcp.__all__)) == len(omega_mcp.__all__)


@pytest.mark.parametrize("name", omega_mcp.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(omega_mcp, name)
    assert value is not None
    module = _exports_table().get(name)
    if module is not None:
        assert value is getattr(importlib.import_module(module), name)
    assert name in dir(omega_mcp)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = omega_mcp.no_such_name


def test_type_checking_imports_match_the_table() -> None:
    imports = _type_checking_imports()
    seen = {alias or name: module for module, name, alias in imports}
    assert len(seen) == len(imports), "a name is imported twice under TYPE_CHECKING"
    assert seen == _exports_table()
    # `from m import X as X` is an explicit re-export: type checkers then treat X as public API
    # even though the computed `__all__` is opaque to them.
    not_reexported = [name for _, name, alias in imports if alias != name]
    assert not not_reexported, f"write `import {not_reexported[0]} as {not_reexported[0]}`"


def test_importing_the_package_loads_neither_the_sdk_nor_its_modules() -> None:
    code = "import json, sys\nimport omega_mcp\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(json.loads(done.stdout))
    assert "omega_mcp" in loaded
    heavy = sorted(
        module
        for module in loaded
        if module.split(".")[0] in {"mcp", "mcp_types", "pydantic", "httpx2", "anyio"}
        or (module.startswith("omega_mcp.") and module != "omega_mcp.version")
    )
    assert heavy == []
