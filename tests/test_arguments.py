"""The quick argument check never says "valid" where jsonschema finds an error, and does take the common case."""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from omega_mcp.arguments import ArgumentCheck

_VALUES: list[Any] = [None, True, False, 0, 1, -3, 1.0, 2.5, "", "x", [], [1], {}, {"a": 1}]

_PROPERTY_SCHEMAS: list[Any] = [
    True,
    {},
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": "array"},
    {"type": "object"},
    {"type": ["string", "null"]},
    {"type": ["integer", "boolean"]},
    {"type": "string", "description": "d", "format": "uri", "default": "x"},
    {"type": "string", "minLength": 2},  # not flat: jsonschema decides
    {"type": "array", "items": {"type": "integer"}},  # not flat
    {"enum": ["a", "b"]},  # not flat
    False,  # not flat
]

_SHAPES: list[dict[str, Any]] = [
    {},
    {"required": ["p"]},
    {"additionalProperties": False},
    {"required": ["p", "q"], "additionalProperties": False},
    {"additionalProperties": {"type": "string"}},  # not flat
    {"minProperties": 1},  # not flat
]

_ARGUMENTS: list[dict[str, Any]] = [
    {},
    *({"p": value} for value in _VALUES),
    *({"p": value, "q": 1} for value in _VALUES[:6]),
    {"q": "x"},
    {"other": 1},
]


def _schemas() -> list[dict[str, Any]]:
    return [
        {"type": "object", "properties": {"p": prop, "q": {"type": "integer"}}, **shape}
        for prop, shape in itertools.product(_PROPERTY_SCHEMAS, _SHAPES)
    ]


@pytest.mark.parametrize("schema", _schemas(), ids=lambda s: str(s)[:90])
def test_the_quick_verdict_agrees_with_jsonschema(schema: dict[str, Any]) -> None:
    check = ArgumentCheck.compile(schema)
    assert check is not None
    reference = Draft202012Validator(schema)
    for args in _ARGUMENTS:
        expected = next(iter(reference.iter_errors(args)), None)
        if check.certainly_valid(args):
            assert expected is None, f"quick check passed {args} but jsonschema says {expected.message}"
        found = check.first_error(args)
        assert (found is None) == (expected is None), args
        if found is not None and expected is not None:
            assert found.message == expected.message


def test_flat_schemas_take_the_quick_path() -> None:
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "what to echo"}, "n": {"type": ["integer", "null"]}},
        "required": ["text"],
        "additionalProperties": False,
    }
    check = ArgumentCheck.compile(schema)
    assert check is not None
    assert check.certainly_valid({"text": "ping"})
    assert check.certainly_valid({"text": "ping", "n": 3})
    assert not check.certainly_valid({"text": 1})
    assert not check.certainly_valid({"n": 3})
    assert not check.certainly_valid({"text": "x", "extra": 1})
    error = check.first_error({"text": 1})
    assert error is not None and "is not of type 'string'" in error.message


def test_a_schema_with_more_than_types_is_left_to_jsonschema() -> None:
    check = ArgumentCheck.compile({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}})
    assert check is not None
    assert not check.certainly_valid({"s": "abc"})
    assert check.first_error({"s": "abc"}) is None
    error = check.first_error({"s": "xyz"})
    assert error is not None and "does not match" in error.message


def test_an_invalid_schema_compiles_to_none() -> None:
    assert ArgumentCheck.compile({"type": "object", "properties": {"n": {"type": 5}}}) is None


def test_jsonschema_loads_at_the_first_compile_not_with_the_module() -> None:
    # `serve` imports this module before its first answer; jsonschema is ~50 ms it does not need then.
    code = (
        "import sys\n"
        "from omega_mcp.arguments import ArgumentCheck\n"
        "assert 'jsonschema' not in sys.modules\n"
        "assert ArgumentCheck.compile({'type': 'object'}) is not None\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
