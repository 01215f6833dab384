"""Schema cleanup: real MCP server schemas must be accepted by every provider."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from omega_mcp.providers._schema import clean_schema

PYDANTIC_STYLE: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "Point": {
            "title": "Point",
            "type": "object",
            "properties": {"x": {"type": "number", "exclusiveMinimum": 0}, "y": {"type": "number"}},
            "required": ["x", "y"],
        },
        "Node": {
            "type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        },
    },
    "title": "DrawArgs",
    "type": "object",
    "properties": {
        "origin": {"$ref": "#/$defs/Point", "description": "where to start"},
        "tags": {"type": "array"},
        "mode": {"const": "fast"},
        "label": {"type": ["string", "null"], "default": None},
        "tree": {"$ref": "#/$defs/Node"},
        "title": {"type": "string", "title": "Title"},
        "$schema": {"type": "string"},
    },
    "required": ["origin", "ghost"],
}


def _walk(value: Any):
    if isinstance(value, dict):
        yield value
        for sub in value.values():
            yield from _walk(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _walk(sub)


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "ollama", "gemini"])
def test_common_cleanup_fixes_root_arrays_required_and_never_mutates_the_input(dialect) -> None:
    original = copy.deepcopy(PYDANTIC_STYLE)
    cleaned = clean_schema(PYDANTIC_STYLE, dialect)
    assert PYDANTIC_STYLE == original
    assert cleaned["type"] == "object"
    assert "$schema" not in cleaned
    assert cleaned["required"] == ["origin"]  # "ghost" is not a property
    assert cleaned["properties"]["tags"] == {"type": "array", "items": {}}
    assert "$schema" in cleaned["properties"]  # a *property* named like a keyword stays
    assert "title" in cleaned["properties"]


@pytest.mark.parametrize("schema", [None, {}, {"type": "object"}, {"properties": {"a": {"type": "string"}}}])
def test_root_always_becomes_an_object_with_properties(schema) -> None:
    cleaned = clean_schema(schema, "openai")
    assert cleaned["type"] == "object"
    assert isinstance(cleaned["properties"], dict)


def test_gemini_inlines_refs_and_cuts_recursion() -> None:
    cleaned = clean_schema(PYDANTIC_STYLE, "gemini")
    assert all("$ref" not in node and "$defs" not in node for node in _walk(cleaned))
    origin = cleaned["properties"]["origin"]
    assert origin["properties"]["y"] == {"type": "number"}
    assert origin["description"] == "where to start"
    inner = cleaned["properties"]["tree"]["properties"]["children"]["items"]
    assert "recursive reference #/$defs/Node omitted" in inner["description"]


def test_gemini_rewrites_keywords_it_rejects() -> None:
    cleaned = clean_schema(PYDANTIC_STYLE, "gemini")
    props = cleaned["properties"]
    assert props["label"] == {"type": "string", "nullable": True, "default": None}
    assert props["mode"] == {"enum": ["fast"]}
    assert props["origin"]["properties"]["x"] == {"type": "number", "minimum": 0}
    assert props["title"] == {"type": "string"}  # the keyword `title` dropped, the property kept
    for node in _walk(cleaned):
        for keyword in ("title", "exclusiveMinimum", "const", "$schema"):
            assert keyword not in node or node is props, f"{keyword} left in {node}"
        assert not isinstance(node.get("type"), list)


def test_non_gemini_dialects_keep_json_schema_features() -> None:
    cleaned = clean_schema(PYDANTIC_STYLE, "anthropic")
    assert cleaned["properties"]["origin"]["$ref"] == "#/$defs/Point"
    assert "$defs" in cleaned
    assert cleaned["properties"]["label"]["type"] == ["string", "null"]


def test_a_root_union_is_merged_into_one_object() -> None:
    schema = {
        "type": "object",
        "oneOf": [
            {"properties": {"path": {"type": "string"}, "recursive": {"type": "boolean"}}, "required": ["path"]},
            {"properties": {"path": {"type": "string"}, "glob": {"type": "string"}}, "required": ["path", "glob"]},
        ],
    }
    cleaned = clean_schema(schema, "anthropic")
    assert "oneOf" not in cleaned
    assert set(cleaned["properties"]) == {"path", "recursive", "glob"}
    assert cleaned["required"] == ["path"]  # only what every branch requires


def test_a_root_all_of_requires_everything() -> None:
    schema = {"allOf": [{"properties": {"a": {}}, "required": ["a"]}, {"properties": {"b": {}}, "required": ["b"]}]}
    cleaned = clean_schema(schema, "openai")
    assert cleaned == {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"]}


def test_a_non_object_root_becomes_a_free_object() -> None:
    assert clean_schema({"type": "string"}, "openai") == {"type": "object", "properties": {}}


def test_boolean_and_junk_subschemas_are_replaced() -> None:
    schema = {"type": "object", "properties": {"any": True, "never": False, "odd": 5}, "required": []}
    cleaned = clean_schema(schema, "openai")
    assert cleaned == {"type": "object", "properties": {"any": {}, "never": {"not": {}}, "odd": {}}}


def test_additional_properties_boolean_is_kept() -> None:
    cleaned = clean_schema({"type": "object", "properties": {}, "additionalProperties": False}, "openai")
    assert cleaned["additionalProperties"] is False


def test_hostile_depth_is_truncated_not_followed() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    node = schema
    for _ in range(500):
        child: dict[str, Any] = {"type": "object", "properties": {}}
        node["properties"]["next"] = child
        node = child
    cleaned = clean_schema(schema, "gemini")
    depth = 0
    node = cleaned
    while "next" in node.get("properties", {}):
        node = node["properties"]["next"]
        depth += 1
    assert depth < 100
    assert "truncated" in node.get("description", "")


DIALECTS = ["openai", "anthropic", "ollama", "gemini"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_draft_04_boolean_exclusive_bounds_become_valid_2020_12(dialect) -> None:
    # Anthropic rejects the *whole request* when one tool's schema is not valid draft 2020-12.
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "number", "minimum": 1, "exclusiveMinimum": True, "maximum": 9, "exclusiveMaximum": False},
            "m": {"type": "integer", "exclusiveMaximum": True},
        },
    }
    cleaned = clean_schema(schema, dialect)
    Draft202012Validator.check_schema(cleaned)
    n = cleaned["properties"]["n"]
    if dialect == "gemini":
        assert n["minimum"] == 1 and n["maximum"] == 9
    else:
        assert n["exclusiveMinimum"] == 1 and "minimum" not in n and n["maximum"] == 9
    assert "exclusiveMaximum" not in n and "exclusiveMaximum" not in cleaned["properties"]["m"]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "bad",
    [
        {"type": "any"},
        {"type": ["string", "whatever"]},
        {"enum": "a,b"},
        {"minLength": "3", "type": "string"},
        {"properties": {"x": {"required": True, "type": "string"}}, "type": "object"},
        {"type": "string", "pattern": 5},
    ],
)
def test_any_other_invalid_keyword_is_dropped_rather_than_failing_the_request(dialect, bad) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "string"}, "bad": bad}, "required": ["ok"]}
    cleaned = clean_schema(schema, dialect)
    Draft202012Validator.check_schema(cleaned)
    assert cleaned["properties"]["ok"] == {"type": "string"} and cleaned["required"] == ["ok"]
    assert "bad" in cleaned["properties"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_root_ref_is_resolved_so_the_model_sees_the_properties(dialect) -> None:
    # zod-to-json-schema with a name emits {"$ref": "#/definitions/Name", "definitions": {...}}.
    schema = {
        "$ref": "#/definitions/Args",
        "definitions": {"Args": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
        "$schema": "http://json-schema.org/draft-07/schema#",
    }
    cleaned = clean_schema(schema, dialect)
    assert cleaned["properties"] == {"q": {"type": "string"}} and cleaned["required"] == ["q"]
    assert "$ref" not in cleaned
    Draft202012Validator.check_schema(cleaned)


@pytest.mark.parametrize("schema", [["a"], "string", True, 5])
def test_a_schema_that_is_not_an_object_becomes_a_free_object(schema) -> None:
    for dialect in DIALECTS:
        assert clean_schema(schema, dialect) == {"type": "object", "properties": {}}  # pyright: ignore[reportArgumentType]


def test_gemini_root_is_never_nullable() -> None:
    cleaned = clean_schema({"type": ["object", "null"], "properties": {"a": {"type": ["string", "null"]}}}, "gemini")
    assert "nullable" not in cleaned and cleaned["type"] == "object"
    assert cleaned["properties"]["a"] == {"type": "string", "nullable": True}
