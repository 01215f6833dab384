"""What omega prints for a person shows control characters instead of letting the terminal run them."""

from __future__ import annotations

import io
import json

from omega_mcp.visible import VisibleStream, json_safe, visible


def test_control_characters_are_escaped_and_lines_and_tabs_kept() -> None:
    assert visible("a\x1b[2Kb\x07\tc\r\nd\re\x9b\u202e\x00") == "a\\x1b[2Kb\\x07\tc\nd\\re\\x9b\\u202e\\x00"
    assert visible("plain ünïcode 日本") == "plain ünïcode 日本"


def test_a_visible_stream_escapes_everything_written_but_trusted_text() -> None:
    inner = io.StringIO()
    stream = VisibleStream(inner)
    stream.write("\x1b]52;c;eA==\x07")
    stream.write_trusted("\x1b[1m")
    assert inner.getvalue() == "\\x1b]52;c;eA==\\x07\x1b[1m"


def test_json_safe_keeps_json_valid() -> None:
    data = {"text": "a\x1b\x7f\x9b\u202eb"}
    text = json_safe(json.dumps(data, ensure_ascii=False))
    assert json.loads(text) == data and visible(text) == text
