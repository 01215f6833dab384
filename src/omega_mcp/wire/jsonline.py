"""JSON for the relayed wire: parse and encode one message with pydantic-core's Rust JSON.

The relay (`fastpath/relay.py`) and the pipe reader (`pipes.py`) parse and re-encode every message
they touch; the stdlib `json` module costs about 5 µs each way per small message, pydantic-core
(which the SDK already brings) about 1. Same values as `json`: duplicate keys keep the last,
big integers stay exact, `NaN`/`Infinity` are accepted. What pydantic-core refuses but `json`
takes (a lone surrogate escape, say) goes through `json`, so nothing the stdlib path accepted is
refused here; an encoding pydantic-core cannot write (a lone surrogate in a string) is written by
`json` with `\\u` escapes, as valid JSON. A text nested too deeply for either is a ValueError like any
other bad JSON.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import PydanticSerializationError, from_json, to_json

__all__ = ["decode", "encode_line"]


def decode(data: bytes | str) -> Any:
    """The value of one JSON text; raises ValueError when it is not JSON, or not UTF-8, or nested deeper
    than Python's recursion limit lets `json` decode (never RecursionError: a peer's line must not end
    the reader that decodes it)."""
    try:
        return from_json(data, allow_inf_nan=True)
    except ValueError:
        try:
            return json.loads(data)
        except RecursionError:
            raise ValueError("nested too deeply") from None


def encode_line(message: Any) -> bytes:
    """`message` as compact JSON (UTF-8) and a newline."""
    try:
        return to_json(message) + b"\n"
    except PydanticSerializationError:
        return json.dumps(message, separators=(",", ":")).encode() + b"\n"
