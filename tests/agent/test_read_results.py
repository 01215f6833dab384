"""The agent loop over the real Toolbox reading an image, a binary file and escape-laden text: what
reaches each provider's wire (the specs are checked in tests/providers)."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import httpx2
import pytest

from omega_mcp.agent.loop import run_agent
from omega_mcp.providers import RetryPolicy
from omega_mcp.providers.anthropic import AnthropicProvider
from omega_mcp.providers.openai import OpenAIProvider
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox

NO_WAIT = RetryPolicy(initial_backoff_seconds=0, jitter=0)


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def _anthropic(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    usage = {"input_tokens": 10, "output_tokens": 4}
    return {"id": "m", "type": "message", "role": "assistant", "model": "c", "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": usage}  # fmt: skip


class _Recorder:
    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.bodies: list[dict[str, Any]] = []
        self.client = httpx2.AsyncClient(transport=httpx2.MockTransport(self._answer))

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        return httpx2.Response(200, json=self.replies.pop(0))


async def _anthropic_read(policy: SandboxPolicy, file_path: str) -> dict[str, Any]:
    """The tool_result block the model gets back after calling read on `file_path`."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"file_path": file_path}}
    http = _Recorder([_anthropic([use], "tool_use"), _anthropic([{"type": "text", "text": "seen"}], "end_turn")])
    provider = AnthropicProvider(api_key="k", client=http.client, retry=NO_WAIT)
    async with Toolbox(policy) as toolbox:
        result = await run_agent("look", provider=provider, tools=toolbox, model="c", system=None)
    assert result.output == "seen"
    return http.bodies[1]["messages"][-1]["content"][0]


async def test_an_image_read_by_the_agent_reaches_anthropic_as_an_image_block(policy: SandboxPolicy) -> None:
    (policy.workspace / "shot.png").write_bytes(_png())
    block = await _anthropic_read(policy, "shot.png")
    assert block["tool_use_id"] == "toolu_1" and "is_error" not in block
    text, image = block["content"]
    assert text["type"] == "text" and "PNG image" in text["text"]
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == _png()


async def test_a_binary_file_read_by_the_agent_is_an_error_naming_its_type(policy: SandboxPolicy) -> None:
    (policy.workspace / "paper.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)))
    block = await _anthropic_read(policy, "paper.pdf")
    assert block["is_error"] is True
    assert "binary file (PDF document, 265 bytes)" in block["content"]


async def test_escape_sequences_read_by_the_agent_reach_the_model_escaped(policy: SandboxPolicy) -> None:
    (policy.workspace / "log.txt").write_bytes(b"\x1b[2J\x1b]0;title\x07done\n")
    block = await _anthropic_read(policy, "log.txt")
    assert block["content"] == "     1\t\\x1b[2J\\x1b]0;title\\x07done"


@pytest.mark.parametrize("flavor", ["openai", "openrouter"])
async def test_an_image_read_by_the_agent_follows_the_openai_tool_message(policy: SandboxPolicy, flavor: str) -> None:
    (policy.workspace / "shot.png").write_bytes(_png())
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"file_path":"shot.png"}'}}

    def completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
        choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}

    http = _Recorder(
        [completion({"content": None, "tool_calls": [call]}, "tool_calls"), completion({"content": "ok"}, "stop")]
    )
    provider = OpenAIProvider(api_key="k", client=http.client, retry=NO_WAIT, flavor=flavor)  # type: ignore[arg-type]
    async with Toolbox(policy) as toolbox:
        await run_agent("look", provider=provider, tools=toolbox, model="m", system=None)
    tool, user = http.bodies[1]["messages"][-2:]
    assert tool["role"] == "tool" and "[image: image/png" in tool["content"]
    assert user["role"] == "user" and user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
