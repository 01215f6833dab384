"""Schema cleanup: real MCP server schemas must be accepted by every provider."""

from __future__ import annotations

import copy
from typing import Any

import pytest

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
