"""Narrowing helpers for decoded JSON, shared by the agent, the providers, the proxy, the relay and config.

Decoded JSON (a provider's answer, a model's tool-call arguments in `omega_mcp.messages`, a TOML
table in `omega_mcp.config`) is an untrusted `object`. Each helper returns a typed value or a
neutral default instead of raising, so a missing or mistyped field degrades to "absent" rather
than a crash. The module imports nothing from the package, so anything may use it without a cycle.
"""

from __future__ import annotations

from typing import Any, cast

__all__ = ["as_int", "as_list", "as_object", "as_str", "object_or_none"]


def as_object(value: object) -> dict[str, Any]:
    """`value` if it is a JSON object, else `{}` (json.loads objects always have string keys)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    """`value` if it is a JSON array, else `[]`."""
    return cast(list[Any], value) if isinstance(value, list) else []


def as_int(value: object) -> int:
    """`value` if it is an integer (not a bool), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def as_str(value: object) -> str | None:
    """`value` if it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def object_or_none(value: object) -> dict[str, Any] | None:
    """`value` if it is a JSON object, else None (for callers that must tell "not an object" from `{}`)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else None
