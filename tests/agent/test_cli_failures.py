"""`omega-mcp agent` failing the way real providers fail, end to end.

The real CLI runs in a subprocess against a scripted HTTP server on 127.0.0.1 (agent_cli_support)
that answers with the providers' own error bodies, retry hints and broken bodies. Every failure
must be one clear stderr line with exit code 1, never a traceback, and only transient failures
may be retried.
"""

from __future__ import annotations

import json

import pytest
from agent_cli_support import KEYS, Reply, answer, error_body, one_error_line, run_cli


@pytest.mark.parametrize("provider", list(KEYS))
def test_a_rejected_key_exits_1_with_the_providers_own_message(provider, tmp_path, fake_provider) -> None:
    body = error_body(provider, 401, "authentication_error", "invalid x-api-key ünïcode")
    fake = fake_provider(provider, [Reply(401, body)])
    done = run_cli(tmp_path, provider, fake.url)
    assert done.returncode == 1 and done.stdout == ""
    line = one_error_line(done)
    assert "HTTP 401" in line and "invalid x-api-key ünïcode" in line and f"(check {KEYS[provider]})" in line
    assert len(fake.bodies) == 1  # never retried


@pytest.mark.parametrize(
    ("provider", "error"),
    [
        ("openai", (400, "invalid_request_error", "Invalid schema for function 'bash'")),
        ("anthropic", (404, "not_found_error", "model: m")),
        ("gemini", (403, "PERMISSION_DENIED", "Generative Language API has not been used")),
    ],
)
def test_validation_permission_and_model_errors_are_not_retried(provider, error, tmp_path, fake_provider) -> None:
    status, kind, message = error
    fake = fake_provider(provider, [Reply(status, error_body(provider, status, kind, message)), Reply(body={})])
    done = run_cli(tmp_path, provider, fake.url)
    assert done.returncode == 1
    assert message in one_error_line(done) and len(fake.bodies) == 1


@pytest.mark.parametrize(
    ("provider", "status", "headers"),
    [
        ("openai", 429, {"retry-after-ms": "20"}),
        ("gemini", 429, {"retry-after": "0"}),
        ("anthropic", 529, {"retry-after-ms": "10"}),
    ],
)
def test_transient_errors_are_retried_visibly_then_answered(provider, status, headers, tmp_path, fake_provider) -> None:
    failing = Reply(status, error_body(provider, status, "overloaded_error", "busy right now"), headers=headers)
    fake = fake_provider(provider, [failing, Reply(body=answer(provider, "fine ✓"))])
    done = run_cli(tmp_path, provider, fake.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "fine ✓\n" and len(fake.bodies) == 2
    assert f"HTTP {status}" in done.stderr and "busy right now" in done.stderr and "retrying in" in done.stderr


@pytest.mark.parametrize(
    ("provider", "reply", "expected"),
    [
        ("openrouter", Reply(body=error_body("openrouter", 400, "", "Provider returned error")), "Provider returned"),
        ("openai", Reply(body={"choices": []}), "no choices"),
        ("gemini", Reply(body={"candidates": [], "promptFeedback": {"blockReason": "SAFETY"}}), "blockReason SAFETY"),
        ("anthropic", Reply(raw=b'{"type": "message", "content": [ not json'), "expected a JSON object"),
    ],
)
def test_broken_success_responses_fail_with_one_clear_line(provider, reply, expected, tmp_path, fake_provider) -> None:
    fake = fake_provider(provider, [reply])
    done = run_cli(tmp_path, provider, fake.url)
    assert done.returncode == 1 and done.stdout == ""
    assert expected in one_error_line(done)


def test_a_truncated_body_is_retried_like_a_dropped_connection(tmp_path, fake_provider) -> None:
    truncated = Reply(raw=json.dumps(answer("ollama", "x" * 200)).encode(), truncate=True)
    fake = fake_provider("ollama", [truncated, Reply(body=answer("ollama", "whole ✓"))])
    done = run_cli(tmp_path, "ollama", fake.url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "whole ✓\n" and len(fake.bodies) == 2
    assert "RemoteProtocolError" in done.stderr and "retrying in" in done.stderr
