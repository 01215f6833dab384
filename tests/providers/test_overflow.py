"""A request refused for a too-long context is a ContextOverflowError, never retried, streamed or not."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from stream_support import CASES, TOOLS

from omega_mcp.errors import ContextOverflowError, ProviderAuthError, ProviderHTTPError
from omega_mcp.messages import UserMessage
from omega_mcp.providers import RetryPolicy

RETRY = RetryPolicy(max_retries=3, initial_backoff_seconds=0, jitter=0)

# The bodies each provider sends when the prompt does not fit.
OVERFLOWS: list[tuple[str, int, Any]] = [
    (
        "openai",
        400,
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
                "130512 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    (
        "openrouter",
        400,
        {
            "error": {
                "code": 400,
                "message": "This endpoint's maximum context length is 200000 tokens. However, you requested about "
                "250000 tokens (249000 of text input, 1000 in the output). Please reduce the length.",
            }
        },
    ),
    (
        "anthropic",
        400,
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "prompt is too long: 215034 tokens > 200000 maximum"},
            "request_id": "req_1",
        },
    ),
    (
        "gemini",
        400,
        {
            "error": {
                "code": 400,
                "message": "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
                "status": "INVALID_ARGUMENT",
            }
        },
    ),
    (
        "ollama",
        400,
        {
            "error": '{"error":{"code":400,"message":"request (8889 tokens) exceeds the available context size '
            '(4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":8889,"n_ctx":4096}}'
        },
    ),
    ("ollama", 500, {"error": "the input length exceeds the context length"}),
]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(("name", "status", "body"), OVERFLOWS, ids=[f"{o[0]}-{o[1]}" for o in OVERFLOWS])
async def test_each_providers_overflow_error_is_a_context_overflow_and_not_retried(
    fake_http, name: str, status: int, body: Any, streamed: bool
) -> None:
    case = CASES[name]
    fake = fake_http(*[httpx2.Response(status, json=body) for _ in range(4)])
    provider = case.provider(fake.client, retry=RETRY)
    on_text = [].append if streamed else None
    with pytest.raises(ContextOverflowError) as info:
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=TOOLS, on_text=on_text)
    assert len(fake.requests) == 1
    assert info.value.status_code == status
    assert name in str(info.value)  # the provider's own words stay in the message


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        # A rate limit on request size is about tokens per minute, not the context window.
        (
            429,
            {
                "error": {
                    "message": "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000."
                }
            },
            ProviderHTTPError,
        ),
        (
            400,
            {"error": {"message": "Invalid schema for function 'read'", "code": "invalid_function_parameters"}},
            None,
        ),
        (401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}, ProviderAuthError),
    ],
)
async def test_other_errors_are_not_overflows(fake_http, status: int, body: Any, error: type | None) -> None:
    fake = fake_http(*[httpx2.Response(status, json=body) for _ in range(4)])
    provider = CASES["openai"].provider(fake.client, retry=RETRY)
    with pytest.raises(error or ProviderHTTPError) as info:
        await provider.request(model="m", system=None, messages=[UserMessage("x")], tools=TOOLS)
    assert not isinstance(info.value, ContextOverflowError)
