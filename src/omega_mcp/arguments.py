"""A downstream tool's arguments against its `inputSchema`: a quick verdict first, jsonschema for the rest.

jsonschema's validator costs more per call than everything else a relayed call does (several
times a JSON parse of the request). Most tools' schemas are flat: an object whose `properties`
name only JSON types, a `required` list, maybe `additionalProperties: false`, plus annotations.
`ArgumentCheck` compiles such a schema once into a few dict and type lookups that say whether
arguments are *certainly* valid; anything they cannot vouch for (another keyword anywhere, a
nested schema, an `integer` given as `1.0`, an argument that looks wrong) goes to the jsonschema
validator, which gives the verdict and words the error. The quick check can only skip work,
never change an answer (`tests/test_arguments.py` holds it to jsonschema's verdicts). The
validator never fetches a remote `$ref` (a downstream's schema must not make omega reach out).
jsonschema itself is imported at the first `compile` (a downstream tool's first call), not with this
module: it is about 50 ms that `serve` would otherwise spend before its first answer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from omega_mcp.narrow import object_or_none

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError
    from referencing import Registry

__all__ = ["ArgumentCheck"]

_ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "format"}
)
"""Keywords that assert nothing (`format` included: the validator is built without a format checker)."""
_TOP = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "$schema", "$id", "$defs"}


def _no_bool(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: not isinstance(value, bool) and check(value)


_TYPES: dict[str, Callable[[object], bool]] = {
    "string": lambda value: isinstance(value, str),
    "integer": _no_bool(lambda value: isinstance(value, int)),  # 1.0 is one too: left to jsonschema
    "number": _no_bool(lambda value: isinstance(value, int | float)),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


def _no_retrieval(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)


@functools.cache
def _offline() -> Registry[Any]:
    """The registry the validators resolve `$ref`s in: it retrieves nothing."""
    from referencing import Registry

    return Registry(retrieve=_no_retrieval)


_Types = tuple[Callable[[object], bool], ...] | None
"""The type checks of one property (any one passing will do), None for a property that takes anything."""


def _property(schema: object) -> tuple[bool, _Types]:
    """(flat, the property's checks): not flat when its schema is more than JSON types and annotations."""
    if schema is True:
        return True, None
    fields = object_or_none(schema)
    if fields is None or not fields.keys() <= _ANNOTATIONS | {"type"}:
        return False, None
    kind = fields.get("type")
    if kind is None:
        return True, None
    kinds: list[object] = (
        [kind] if isinstance(kind, str) else cast("list[object]", kind) if isinstance(kind, list) else []
    )
    names = [k for k in kinds if isinstance(k, str) and k in _TYPES]
    if not names or len(names) != len(kinds):
        return False, None
    return True, tuple(_TYPES[k] for k in names)


def _quick(schema: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, _Types], bool] | None:
    """(required, property checks, closed) for a flat schema; None when the schema is anything more."""
    if not schema.keys() <= _TOP or schema.get("type", "object") != "object":
        return None
    properties = object_or_none(schema.get("properties", {}))
    required = schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if properties is None or not isinstance(required, list) or not isinstance(closed, bool):
        return None
    names = tuple(name for name in cast("list[object]", required) if isinstance(name, str))
    if len(names) != len(cast("list[object]", required)):
        return None
    checks: dict[str, _Types] = {}
    for name, sub in properties.items():
        flat, check = _property(sub)
        if not flat:
            return None
        checks[name] = check
    return names, checks, not closed


class ArgumentCheck:
    """One tool's compiled `inputSchema` (build with `compile`)."""

    def __init__(self, validator: Draft202012Validator, schema: Mapping[str, Any]) -> None:
        self._validator = validator
        self._quick = _quick(schema)

    @classmethod
    def compile(cls, schema: Mapping[str, Any]) -> ArgumentCheck | None:
        """The compiled schema, or None when the schema itself is invalid."""
        from jsonschema import Draft202012Validator, SchemaError

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError:
            return None
        return cls(Draft202012Validator(schema, registry=_offline()), schema)

    def certainly_valid(self, args: Mapping[str, Any]) -> bool:
        """True only when `args` are valid for sure; False means: ask `first_error`."""
        quick = self._quick
        if quick is None:
            return False
        required, properties, closed = quick
        if not all(name in args for name in required):
            return False
        for name, value in args.items():
            if name not in properties:
                if closed:
                    return False
                continue
            checks = properties[name]
            if checks is not None and not any(check(value) for check in checks):
                return False
        return True

    def first_error(self, args: Mapping[str, Any]) -> ValidationError | None:
        """The first error jsonschema finds, or None (skipped when `certainly_valid`).

        Raises:
            Exception: whatever the validator raises on a schema it cannot apply (a `$ref` to a URL...).
        """
        if self.certainly_valid(args):
            return None
        return next(iter(self._validator.iter_errors(args)), None)  # pyright: ignore[reportUnknownMemberType]
