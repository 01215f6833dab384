"""Clean MCP `inputSchema`s so every provider accepts real servers' schemas.

The common pass (all providers) never mutates its input: it drops `$schema`/`$id`/`$comment`,
makes the root an object schema with `properties` (a root `$ref` is resolved, a root
`anyOf`/`oneOf`/`allOf` merged into one object), gives arrays `items`, drops `required` names that
are not properties, rewrites draft-04 boolean exclusive bounds, replaces boolean or malformed
subschemas, and finally drops any keyword that still breaks the JSON Schema 2020-12 metaschema
(Anthropic rejects the whole request for one invalid tool schema). The Gemini pass (for
`parametersJsonSchema`) also inlines local `$ref`s (a recursive one becomes `{}`), turns
`type: [X, "null"]` into `nullable`, `const` into a one-value `enum`, and drops `title`,
`examples`, `discriminator` and draft-2020 exclusive bounds. Depth and node budgets keep hostile
schemas from blowing up the request.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal, cast

from omega_mcp.narrow import as_list, as_object

__all__ = ["Dialect", "clean_schema"]

Dialect = Literal["openai", "anthropic", "ollama", "gemini"]

_MAX_DEPTH = 64
_MAX_NODES = 20_000
_MAX_CHECKED_NODES = 2_000
_DROP_ALWAYS = frozenset({"$schema", "$id", "$comment"})
_DROP_GEMINI = frozenset(
    {"title", "examples", "discriminator", "$defs", "definitions", "$anchor", "$dynamicAnchor", "$dynamicRef"}
)
# Keywords whose value is a map of name -> subschema, a single subschema, or a list of subschemas.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA_SINGLE = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
     "unevaluatedProperties", "unevaluatedItems", "additionalItems"}
)  # fmt: skip
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})


def clean_schema(schema: Mapping[str, Any] | None, dialect: Dialect) -> dict[str, Any]:
    """A copy of `schema` that `dialect` accepts as a function's parameters."""
    source: Mapping[str, Any] = schema if isinstance(schema, Mapping) else {}
    cleaner = _Cleaner(source, gemini=dialect == "gemini")
    root = _object_root(cleaner.node(cleaner.resolve_root(source), 0, root=True), gemini=dialect == "gemini")
    # Validation costs about 0.2 ms a node: only huge $ref expansions skip it.
    return _metaschema_repaired(root) if cleaner.nodes <= _MAX_CHECKED_NODES else root


class _Cleaner:
    def __init__(self, root: Mapping[str, Any], *, gemini: bool) -> None:
        self.gemini = gemini
        self.nodes = 0
        self.defs: dict[str, Any] = {}
        for key in ("$defs", "definitions"):
            table = root.get(key)
            if isinstance(table, Mapping):
                for name, value in table.items():  # pyright: ignore[reportUnknownVariableType]
                    self.defs[f"#/{key}/{name}"] = value
        self.expanding: list[str] = []

    def resolve_root(self, root: Mapping[str, Any]) -> Mapping[str, Any]:
        """The root with a local `$ref` replaced by its target (zod-to-json-schema emits
        `{"$ref": "#/definitions/Args", "definitions": ...}`): models only see root properties."""
        ref = root.get("$ref")
        target = self.defs.get(ref) if isinstance(ref, str) else None
        if not isinstance(target, Mapping):
            return root
        return {**cast(Mapping[str, Any], target), **{k: v for k, v in root.items() if k != "$ref"}}

    def node(self, value: object, depth: int, *, root: bool = False) -> Any:
        self.nodes += 1
        if depth > _MAX_DEPTH or self.nodes > _MAX_NODES:
            return {"description": "(schema truncated: too deep or too large)"}
        if value is False:
            return {"not": {}}
        schema = _mapping(value)
        if schema is None:
            return {}  # `true`, or junk (draft-04 tuple `items`): accept anything rather than fail the tool
        if self.gemini and isinstance(schema.get("$ref"), str):
            return self._inline(schema, depth)
        out: dict[str, Any] = {}
        for key, sub in schema.items():
            if key in _DROP_ALWAYS or (self.gemini and key in _DROP_GEMINI):
                continue
            table, items = _mapping(sub), _list(sub)
            if key in _SCHEMA_MAPS and table is not None:
                out[key] = {name: self.node(s, depth + 1) for name, s in table.items()}
            elif key in _SCHEMA_SINGLE and not (key == "additionalProperties" and isinstance(sub, bool)):
                out[key] = self.node(sub, depth + 1)
            elif key in _SCHEMA_LISTS and items is not None:
                out[key] = [self.node(s, depth + 1) for s in items]
            else:
                out[key] = sub
        _draft04_bounds(out)
        if self.gemini:
            _gemini_fixups(out)
        _fix_object(out)
        if _has_type(out, "array") and "items" not in out and "prefixItems" not in out:
            out["items"] = {}
        return out

    def _inline(self, schema: dict[str, Any], depth: int) -> Any:
        ref = str(schema["$ref"])
        target = self.defs.get(ref)
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        if target is None or ref in self.expanding:
            reason = "recursive" if ref in self.expanding else "unresolvable"
            merged: dict[str, Any] = {"description": f"({reason} reference {ref} omitted)"}
            return self.node({**siblings, **merged}, depth)
        self.expanding.append(ref)
        try:
            resolved = self.node(target, depth + 1)
        finally:
            self.expanding.pop()
        if siblings:
            return {**as_object(resolved), **as_object(self.node(siblings, depth + 1))}
        return resolved


def _has_type(schema: Mapping[str, Any], name: str) -> bool:
    kind = schema.get("type")
    return kind == name or (isinstance(kind, list) and name in kind)


def _fix_object(schema: dict[str, Any]) -> None:
    props = schema.get("properties")
    required = schema.get("required")
    if "required" in schema and (not isinstance(required, list) or not required):
        del schema["required"]
    elif isinstance(props, dict) and isinstance(required, list):
        kept = [name for name in required if isinstance(name, str) and name in props]  # pyright: ignore[reportUnknownVariableType]
        if kept:
            schema["required"] = list(dict.fromkeys(kept))
        else:
            del schema["required"]


def _draft04_bounds(schema: dict[str, Any]) -> None:
    """Draft-04 `exclusiveMinimum: true` + `minimum: N` is `exclusiveMinimum: N` since draft-06."""
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = schema.get(exclusive)
        if isinstance(flag, bool):
            del schema[exclusive]
            bound = schema.get(inclusive)
            if flag and isinstance(bound, int | float) and not isinstance(bound, bool):
                schema[exclusive] = schema.pop(inclusive)


def _gemini_fixups(schema: dict[str, Any]) -> None:
    kind = schema.get("type")
    if isinstance(kind, list):
        names = [t for t in kind if isinstance(t, str)]  # pyright: ignore[reportUnknownVariableType]
        concrete = [t for t in names if t != "null"]
        if len(concrete) < len(names):
            schema["nullable"] = True
        if len(concrete) == 1:
            schema["type"] = concrete[0]
        elif concrete:
            del schema["type"]
            schema["anyOf"] = [{"type": t} for t in concrete]
        else:
            schema["type"] = "null"
    if "const" in schema:
        schema["enum"] = [schema.pop("const")]
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if exclusive in schema:
            bound = schema.pop(exclusive)
            if isinstance(bound, int | float) and not isinstance(bound, bool) and inclusive not in schema:
                schema[inclusive] = bound


def _object_root(root: Any, *, gemini: bool = False) -> dict[str, Any]:
    schema = dict(as_object(root))
    kind = schema.get("type")
    if kind not in (None, "object") and not (isinstance(kind, list) and "object" in kind):
        # Not an object: the provider would reject it; offer a free-form object instead.
        return {"type": "object", "properties": {}}
    if gemini:
        schema.pop("nullable", None)  # the arguments are always an object, never null
    for combinator in ("allOf", "anyOf", "oneOf"):
        branches = schema.pop(combinator, None)
        if isinstance(branches, list):
            _merge_branches(schema, [b for b in branches if isinstance(b, dict)], all_required=combinator == "allOf")  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    schema["type"] = "object"
    if not isinstance(schema.get("properties"), dict):
        schema["properties"] = {}
    _fix_object(schema)
    return schema


def _merge_branches(schema: dict[str, Any], branches: list[dict[str, Any]], *, all_required: bool) -> None:
    """Flatten a root combinator into one object: union of properties; required per combinator."""
    props = dict(as_object(schema.get("properties")))
    required = [r for r in as_list(schema.get("required")) if isinstance(r, str)]
    branch_required: list[set[str]] = []
    for branch in branches:
        props.update({k: v for k, v in as_object(branch.get("properties")).items() if k not in props})
        branch_required.append({r for r in as_list(branch.get("required")) if isinstance(r, str)})
    if branch_required:
        first, *rest = branch_required
        extra = first.union(*rest) if all_required else first.intersection(*rest)
        required += sorted(extra - set(required))
    schema["properties"] = props
    if required:
        schema["required"] = required


def _mapping(value: object) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(k): v for k, v in cast(Mapping[Any, Any], value).items()}


def _list(value: object) -> list[Any] | None:
    return cast(list[Any], value) if isinstance(value, list) else None


_MAX_REPAIRS = 50


def _metaschema_repaired(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every keyword that breaks JSON Schema 2020-12 dropped.

    Anthropic rejects the whole request when one tool's schema is not valid 2020-12, so one odd
    downstream tool would otherwise cost the run every tool. Checked with `jsonschema` (a
    dependency of the MCP SDK); the repair is skipped if it is missing.
    """
    try:
        from jsonschema import Draft202012Validator
    except ImportError:  # pragma: no cover - installed with mcp
        return schema
    meta = Draft202012Validator(Draft202012Validator.META_SCHEMA)
    for _ in range(_MAX_REPAIRS):
        errors: Iterator[Any] = meta.iter_errors(schema)  # pyright: ignore[reportUnknownMemberType]
        error = next(errors, None)
        if error is None:
            return schema
        path: list[str | int] = list(error.absolute_path)
        while path and isinstance(path[-1], int):
            path.pop()  # a bad list item: drop the whole keyword
        if not path or not _delete_at(schema, path):
            break
    return {"type": "object", "properties": {}}


def _delete_at(schema: dict[str, Any], path: list[str | int]) -> bool:
    """Delete the key at `path`; False when the path does not lead to a key."""
    container: object = schema
    for step in path[:-1]:
        if isinstance(container, dict) and step in container:
            container = cast(dict[Any, Any], container)[step]
        elif isinstance(container, list) and isinstance(step, int) and step < len(cast(list[Any], container)):
            container = cast(list[Any], container)[step]
        else:
            return False
    if isinstance(container, dict) and path[-1] in container:
        del cast(dict[Any, Any], container)[path[-1]]
        return True
    return False
