"""One answer per provider, both as the non-streamed JSON and as the stream the same API sends for it.

Each case's text holds multi-byte UTF-8 (2-, 3- and 4-byte characters) and its tool arguments a
non-ASCII character, so byte-level chunk boundaries can land inside a character, inside a JSON
value and inside tool arguments. The streams are written as the providers document them: named
SSE events (Anthropic), `data:` chunks ending in `[DONE]` with `:` keep-alive comments (OpenAI,
OpenRouter), CRLF-separated SSE (Gemini), NDJSON (Ollama).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2

from omega_mcp.messages import ModelResponse, ToolSpec, UserMessage
from omega_mcp.providers import RetryPolicy
from omega_mcp.providers.anthropic import AnthropicProvider
from omega_mcp.providers.gemini import GeminiProvider
from omega_mcp.providers.ollama import OllamaProvider
from omega_mcp.providers.openai import OpenAIProvider

NO_WAIT = RetryPolicy(initial_backoff_seconds=0, jitter=0)
PIECES = ("Grüße aus ", "Köln — 你好", " 🎉")
TEXT = "".join(PIECES)
FIRST_PIECE_AT = "Grüße".encode()
SECOND_PIECE_AT = "Köln".encode()
READ_TOOL = ToolSpec("read", "Read a file", {"type": "object", "properties": {"file_path": {"type": "string"}}})
LIST_TOOL = ToolSpec("mcp__fs__list", "List", {"type": "object"})
TOOLS = [READ_TOOL, LIST_TOOL]
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def data_events(*chunks: Any, done: bool = True, comment: bool = False) -> bytes:
    """OpenAI-style SSE: `data: <json>` events, optionally keep-alive comments, then `[DONE]`."""
    out = [": OPENROUTER PROCESSING\n\n" if comment else ""]
    out += [f"data: {dump(chunk)}\n\n" for chunk in chunks]
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def named_events(*events: dict[str, Any]) -> bytes:
    """Anthropic-style SSE: `event: <type>` plus `data: <json>`."""
    return "".join(f"event: {event['type']}\ndata: {dump(event)}\n\n" for event in events).encode()


def crlf_events(*chunks: Any) -> bytes:
    """Gemini-style SSE (`alt=sse`): CRLF line ends, no event names, no end marker."""
    return "".join(f"data: {dump(chunk)}\r\n\r\n" for chunk in chunks).encode()


def ndjson(*lines: Any) -> bytes:
    return "".join(dump(line) + "\n" for line in lines).encode()


@dataclass(frozen=True)
class Case:
    """One provider's answer, whole and streamed."""

    name: str
    spec: str
    whole: dict[str, Any]
    stream: bytes
    content_type: str
    make: Callable[..., Any]

    def provider(self, client: httpx2.AsyncClient, **options: Any) -> Any:
        options.setdefault("retry", NO_WAIT)
        return self.make(client=client, **options)

    async def expected(self) -> ModelResponse:
        """The turn the non-streamed request gives for this answer."""
        client = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda _: httpx2.Response(200, json=self.whole)))
        async with self.provider(client) as provider:
            return await provider.request(model="m", system="Be brief.", messages=[UserMessage("go")], tools=TOOLS)

    def streamed(self, stream: bytes | None = None, chunks: Sequence[int] = ()) -> httpx2.Response:
        """The stream as a response whose body arrives in pieces cut at the byte offsets `chunks`."""
        return streamed_response(self.stream if stream is None else stream, self.content_type, chunks)


class Recorder:
    """Answers requests from a queue and records them; `sleep` records retry waits instead of waiting."""

    def __init__(self, *replies: httpx2.Response) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []
        self.delays: list[float] = []
        self.client = httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.replies, "unexpected extra request"
        return self.replies.pop(0)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)


def streamed_response(data: bytes, content_type: str, cuts: Sequence[int] = ()) -> httpx2.Response:
    bounds = [0, *sorted(cuts), len(data)]

    async def body() -> AsyncIterator[bytes]:
        for start, end in itertools.pairwise(bounds):
            if end > start:
                yield data[start:end]

    return httpx2.Response(200, headers={"content-type": content_type}, content=body())


def _openai_chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **extra,
    }


ARGS_A = '{"file_path": "/tmp/ü.txt"}'
OPENAI_USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 100},
}
OPENAI = Case(
    "openai",
    "openai",
    whole={
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": TEXT,
                    "refusal": None,
                    "annotations": [],
                    "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": ARGS_A}},
                        {"id": "call_b", "type": "function", "function": {"name": "mcp__fs__list", "arguments": "{}"}},
                    ],
                },
            }
        ],
        "usage": OPENAI_USAGE,
    },
    # Parallel calls: the fragments of call 0 and call 1 interleave, matched by `index`.
    stream=data_events(
        _openai_chunk({"role": "assistant", "content": "", "refusal": None}, usage=None),
        *[_openai_chunk({"content": piece}, usage=None) for piece in PIECES],
        _openai_chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}}
                ]
            }
        ),
        _openai_chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "mcp__fs__list", "arguments": ""},
                    }
                ]
            }
        ),
        _openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGS_A[:17]}}]}),
        _openai_chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        _openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGS_A[17:]}}]}),
        _openai_chunk({}, "tool_calls"),
        _openai_chunk(usage=OPENAI_USAGE),
    ),
    content_type=SSE,
    make=lambda **kw: OpenAIProvider(api_key="sk", **kw),
)

DETAIL = {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0}
OPENROUTER_USAGE = {
    "prompt_tokens": 50,
    "completion_tokens": 10,
    "total_tokens": 60,
    "cost": 0.0012,
    "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 5},
}
OPENROUTER = Case(
    "openrouter",
    "openai",
    whole={
        "id": "gen-1",
        "object": "chat.completion",
        "created": 1,
        "model": "anthropic/claude-sonnet-4.5",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": TEXT,
                    "refusal": None,
                    "reasoning": "Thinking.",
                    "reasoning_details": [{**DETAIL, "text": "Thinking.", "signature": "c2ln"}],
                },
            }
        ],
        "usage": OPENROUTER_USAGE,
    },
    stream=data_events(
        _openai_chunk(
            {
                "role": "assistant",
                "content": "",
                "reasoning": "Think",
                "reasoning_details": [{**DETAIL, "text": "Think", "signature": None}],
            }
        ),
        _openai_chunk({"reasoning": "ing.", "reasoning_details": [{**DETAIL, "text": "ing.", "signature": None}]}),
        _openai_chunk({"reasoning_details": [{**DETAIL, "text": "", "signature": "c2ln"}]}),
        *[_openai_chunk({"content": piece}) for piece in PIECES],
        _openai_chunk({"content": ""}, "stop", usage=OPENROUTER_USAGE),
        comment=True,
    ),
    content_type=SSE,
    make=lambda **kw: OpenAIProvider(
        **{"api_key": "sk-or", "flavor": "openrouter", "base_url": "https://openrouter.ai/api/v1", **kw}
    ),
)

SIGNATURE = "EqQBCkgIARABGAIiQL2sig=="
TOOL_INPUT = '{"file_path": "aü", "content": "1"}'
ANTHROPIC = Case(
    "anthropic",
    "anthropic",
    whole={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [
            {"type": "thinking", "thinking": "Two files.", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "text", "text": TEXT},
            {"type": "tool_use", "id": "toolu_01A", "name": "write", "input": json.loads(TOOL_INPUT)},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 1000,
            "output_tokens": 80,
        },
    },
    stream=named_events(
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 10,
                    "cache_creation_input_tokens": 200,
                    "cache_read_input_tokens": 1000,
                    "output_tokens": 1,
                },
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Two "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "files."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": SIGNATURE}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        *[
            {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": piece}}
            for piece in PIECES
        ],
        {"type": "content_block_stop", "index": 2},
        {
            "type": "content_block_start",
            "index": 3,
            "content_block": {"type": "tool_use", "id": "toolu_01A", "name": "write", "input": {}},
        },
        {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": TOOL_INPUT[:16]},
        },
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": TOOL_INPUT[16:]},
        },
        {"type": "content_block_stop", "index": 3},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 80},
        },
        {"type": "message_stop"},
    ),
    content_type=SSE,
    make=lambda **kw: AnthropicProvider(api_key="sk-ant", **kw),
)

OLLAMA_CALL = {"id": "call_k3j9x0ab", "function": {"index": 0, "name": "bash", "arguments": {"command": "ls ü"}}}
OLLAMA_HEAD = {"model": "qwen3", "created_at": "2026-11-01T00:00:00Z"}
OLLAMA = Case(
    "ollama",
    "ollama",
    whole={
        **OLLAMA_HEAD,
        "message": {"role": "assistant", "content": TEXT, "thinking": "list then pwd", "tool_calls": [OLLAMA_CALL]},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 412,
        "eval_count": 35,
    },
    stream=ndjson(
        {**OLLAMA_HEAD, "message": {"role": "assistant", "content": "", "thinking": "list "}, "done": False},
        {**OLLAMA_HEAD, "message": {"role": "assistant", "content": "", "thinking": "then pwd"}, "done": False},
        *[{**OLLAMA_HEAD, "message": {"role": "assistant", "content": piece}, "done": False} for piece in PIECES],
        {**OLLAMA_HEAD, "message": {"role": "assistant", "content": "", "tool_calls": [OLLAMA_CALL]}, "done": False},
        {
            **OLLAMA_HEAD,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 412,
            "eval_count": 35,
        },
    ),
    content_type=NDJSON,
    make=lambda **kw: OllamaProvider(**kw),
)

GEMINI_CALL = {
    "functionCall": {"id": "a1b2", "name": "read", "args": {"file_path": "/ü"}},
    "thoughtSignature": "CiQBzGm+",
}
GEMINI_USAGE = {
    "promptTokenCount": 120,
    "candidatesTokenCount": 15,
    "thoughtsTokenCount": 40,
    "cachedContentTokenCount": 100,
    "totalTokenCount": 175,
}


def _gemini_chunk(*parts: dict[str, Any], **candidate: Any) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": list(parts)}, "index": 0, **candidate}],
        "usageMetadata": {"promptTokenCount": 120, "totalTokenCount": 120},
        "modelVersion": "gemini-3-pro",
        "responseId": "r1",
    }


GEMINI = Case(
    "gemini",
    "gemini",
    whole={
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Plan: read it", "thought": True},
                        {"text": TEXT, "thoughtSignature": "Zm9v"},
                        GEMINI_CALL,
                    ],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": GEMINI_USAGE,
        "modelVersion": "gemini-3-pro",
        "responseId": "r1",
    },
    # Text arrives in pieces, its signature last on an empty piece; the call arrives whole.
    stream=crlf_events(
        _gemini_chunk({"text": "Plan: ", "thought": True}),
        _gemini_chunk({"text": "read it", "thought": True}),
        *[_gemini_chunk({"text": piece}) for piece in PIECES],
        _gemini_chunk({"text": "", "thoughtSignature": "Zm9v"}),
        {**_gemini_chunk(GEMINI_CALL, finishReason="STOP"), "usageMetadata": GEMINI_USAGE},
    ),
    content_type=SSE,
    make=lambda **kw: GeminiProvider(api_key="g", **kw),
)

CASES = {case.name: case for case in (OPENAI, OPENROUTER, ANTHROPIC, OLLAMA, GEMINI)}
