"""A 2026-era call's `Mcp-Param-*` headers are checked only against a tool its client may call.

The SDK's 2026 transport validates the headers against the tool's schema before any handler of the
MCP server runs; the schema lookup (`input_schema_for_caller`) must already know the client then, or
a client's headers are checked against a tool its profile hides and the answer (a 400 naming the
mismatch) tells it the tool and its header exist. Through a real hub over HTTP, raw requests.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hub_support import Hub, configured_hub

MODERN = Path(__file__).parent.parent / "fixtures" / "modern_server.py"
ALICE = "alice-token-0123456789abcdef"  # may call `read` only
DAVE = "dave-token-0123456789abcdef01"  # may call everything
VERSION = "2026-07-28"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with configured_hub(
        tmp_path_factory.mktemp("params"),
        (
            f"[servers.m]\ncommand = {sys.executable!r}\nargs = [{str(MODERN)!r}]\n"
            '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\ntools = ["read"]\n'
            '[hub.clients.dave]\ntoken = "${DAVE_TOKEN}"\n'
        ),
        env={"ALICE_TOKEN": ALICE, "DAVE_TOKEN": DAVE},
    ) as hub:
        yield hub


def _call(hub: Hub, token: str, name: str, region_header: str) -> tuple[int, dict[str, Any]]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"region": "eu"}, "_meta": meta},
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
        "Mcp-Param-Region": region_header,
    }
    answer = httpx2.post(hub.url, json=body, headers=headers, timeout=60)
    text = answer.text
    if text.startswith(("event:", "data:")):  # an SSE answer: its one message
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return answer.status_code, json.loads(text)


def test_a_client_allowed_the_tool_gets_its_mismatched_header_refused(hub: Hub) -> None:
    status, answer = _call(hub, DAVE, "mcp__m__region", "us")  # the control: the check runs
    assert status == 400, answer
    assert "error" in answer and "Region" in json.dumps(answer), answer


def test_a_hidden_tool_with_mismatched_headers_answers_as_an_unknown_one(hub: Hub) -> None:
    hidden = _call(hub, ALICE, "mcp__m__region", "us")
    unknown = _call(hub, ALICE, "mcp__m__nosuch", "us")
    assert hidden[0] == unknown[0], (hidden, unknown)
    # The very same error; an unknown name's hints name only tools she may call (none of m's).
    assert json.dumps(hidden[1]) == json.dumps(unknown[1]).replace("mcp__m__nosuch", "mcp__m__region")
    assert "mcp__m__" not in json.dumps(unknown[1]).replace("mcp__m__nosuch", ""), unknown
