"""The relay's JSON reads and writes the same values as the stdlib `json` module."""

from __future__ import annotations

import json
import math

import pytest

from omega_mcp.wire.jsonline import decode, encode_line

SAMPLES = [
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"x":[1,2.5,null,true]}}}',
    b'{"a":1,"a":2}',
    b'{"big":123456789012345678901234567890,"neg":-98765432109876543210}',
    '{"text":"é ☃ \\u2028 \\ud83d\\ude00"}'.encode(),
    b'{"lone":"\\ud800"}',
    b'  {"spaced" : [ ] }  ',
]


@pytest.mark.parametrize("line", SAMPLES)
def test_decode_gives_what_json_gives(line: bytes) -> None:
    assert decode(line) == json.loads(line)


def test_decode_takes_the_constants_json_takes() -> None:
    value = decode(b'{"n":NaN,"i":Infinity,"m":-Infinity}')
    assert math.isnan(value["n"]) and value["i"] == math.inf and value["m"] == -math.inf


@pytest.mark.parametrize("line", [b"", b"{", b'{"a":1} x', b"not json"])
def test_decode_refuses_what_is_not_json(line: bytes) -> None:
    with pytest.raises(ValueError):
        decode(line)


@pytest.mark.parametrize("line", SAMPLES)
def test_encode_round_trips_to_the_same_value(line: bytes) -> None:
    value = json.loads(line)
    encoded = encode_line(value)
    assert encoded.endswith(b"\n") and encoded.count(b"\n") == 1
    assert json.loads(encoded) == value


def test_encode_writes_a_lone_surrogate_as_an_escape() -> None:
    encoded = encode_line({"s": "\ud800"})
    assert encoded == b'{"s":"\\ud800"}\n'


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_line_nested_too_deeply_is_a_value_error_never_a_recursion_error(depth: int) -> None:
    for line in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth):
        with pytest.raises(ValueError, match="nested too deeply"):
            decode(line)


def test_bad_utf8_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        decode(b'{"a": "\xff"}')
