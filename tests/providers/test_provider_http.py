"""The shared HTTP layer: which failures are retried, how long it waits, what the error says."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import anyio
import httpx2
import pytest

from omega_mcp.errors import ProviderAuthError, ProviderHTTPError
from omega_mcp.providers._http import HttpJson, RetryPolicy
from waits import deadline

URL = "http://127.0.0.1:9/v1/chat"
OK = {"ok": True}


@pytest.fixture
def owned_clients(monkeypatch: pytest.MonkeyPatch) -> list[httpx2.AsyncClient]:
    """Every client an `HttpJson` creates for itself (given no `client`) during the test."""
    created: list[httpx2.AsyncClient] = []
    real = httpx2.AsyncClient

    def record(**kwargs: Any) -> httpx2.AsyncClient:
        client = real(**kwargs)
        created.append(client)
        return client

    monkeypatch.setattr(httpx2, "AsyncClient", record)
    return created


def make(fake, *, policy: RetryPolicy | None = None) -> tuple[HttpJson, list[float]]:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    http = HttpJson("acme", client=fake.client, retry=policy or RetryPolicy(jitter=0), sleep=sleep)
    return http, delays


async def test_retry_after_ms_wins_over_retry_after(fake_http) -> None:
    fake = fake_http(
        httpx2.Response(
            429, json={"error": {"message": "slow down"}}, headers={"retry-after-ms": "250", "retry-after": "9"}
        ),
        httpx2.Response(200, json=OK),
    )
    http, delays = make(fake)
    assert await http.post(URL, {}, {}) == OK
    assert delays == [0.25]


async def test_retry_after_seconds_and_http_dates_are_honored(fake_http) -> None:
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    fake = fake_http(
        httpx2.Response(503, headers={"retry-after": "2"}),
        httpx2.Response(503, headers={"retry-after": soon}),
        httpx2.Response(200, json=OK),
    )
    http, delays = make(fake)
    assert await http.post(URL, {}, {}) == OK
    assert delays[0] == 2.0
    assert 20 < delays[1] <= 30


async def test_without_hints_backoff_is_exponential_then_gives_up_with_the_last_message(fake_http) -> None:
    fake = fake_http(
        *[httpx2.Response(500, json={"error": {"message": f"boom {i}", "type": "server_error"}}) for i in range(4)]
    )
    http, delays = make(fake, policy=RetryPolicy(max_retries=3, initial_backoff_seconds=1, jitter=0))
    with pytest.raises(ProviderHTTPError, match=r"acme API error \(HTTP 500\): server_error: boom 3") as info:
        await http.post(URL, {}, {})
    assert delays == [1, 2, 4]
    assert info.value.status_code == 500
    assert len(fake.requests) == 4


def test_jitter_stays_within_a_quarter_of_the_base_delay() -> None:
    policy = RetryPolicy(initial_backoff_seconds=1, max_backoff_seconds=8)
    samples = [policy.backoff(attempt) for attempt in (0, 3, 10) for _ in range(50)]
    assert all(1 <= s <= 1.25 or 8 <= s <= 10 for s in samples)
    assert len(set(samples)) > 3


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_client_errors_are_not_retried(fake_http, status: int) -> None:
    fake = fake_http(httpx2.Response(status, json={"error": {"message": "bad field tools[0]"}}))
    http, delays = make(fake)
    with pytest.raises(ProviderHTTPError, match="bad field tools"):
        await http.post(URL, {}, {})
    assert delays == [] and len(fake.requests) == 1


@pytest.mark.parametrize("status", [401, 402, 403])
async def test_auth_and_billing_errors_are_auth_errors_and_not_retried(fake_http, status: int) -> None:
    fake = fake_http(httpx2.Response(status, json={"error": {"message": "no entry"}}, headers={"retry-after": "1"}))
    http, delays = make(fake)
    with pytest.raises(ProviderAuthError, match="no entry"):
        await http.post(URL, {}, {})
    assert delays == [] and len(fake.requests) == 1


async def test_a_retry_after_beyond_the_cap_gives_up_at_once(fake_http) -> None:
    fake = fake_http(httpx2.Response(429, json={"error": {"message": "daily limit"}}, headers={"retry-after": "3600"}))
    http, delays = make(fake)
    with pytest.raises(ProviderHTTPError, match="retry after 3600 s"):
        await http.post(URL, {}, {})
    assert delays == []


async def test_x_should_retry_false_stops_retries(fake_http) -> None:
    fake = fake_http(httpx2.Response(503, json={"error": {"message": "no"}}, headers={"x-should-retry": "false"}))
    http, _delays = make(fake)
    with pytest.raises(ProviderHTTPError):
        await http.post(URL, {}, {})
    assert len(fake.requests) == 1


async def test_connection_errors_are_retried_and_reported(fake_http) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    fake = fake_http(refuse, refuse, httpx2.Response(200, json=OK))
    http, delays = make(fake, policy=RetryPolicy(initial_backoff_seconds=0, jitter=0))
    assert await http.post(URL, {}, {}) == OK
    assert len(delays) == 2

    fake = fake_http(refuse, refuse)
    http, _ = make(fake, policy=RetryPolicy(max_retries=1, initial_backoff_seconds=0, jitter=0))
    with pytest.raises(ProviderHTTPError, match=r"request to http://127.0.0.1:9/v1/chat failed: ConnectError"):
        await http.post(URL, {}, {})


async def test_a_non_json_success_is_an_error_quoting_the_body(fake_http) -> None:
    fake = fake_http(httpx2.Response(200, text="<html>proxy login</html>"))
    http, _ = make(fake)
    with pytest.raises(ProviderHTTPError, match="proxy login"):
        await http.post(URL, {}, {})


async def test_an_error_without_json_quotes_the_text(fake_http) -> None:
    fake = fake_http(httpx2.Response(418, text="I'm a teapot"))
    http, _ = make(fake)
    with pytest.raises(ProviderHTTPError, match=r"HTTP 418\): I'm a teapot"):
        await http.post(URL, {}, {})


async def test_headers_and_body_are_sent_as_given(fake_http) -> None:
    fake = fake_http(httpx2.Response(200, json=OK))
    http, _ = make(fake)
    await http.post(URL, {"a": [1, "ü"]}, {"x-api-key": "k"})
    assert fake.requests[0].headers["x-api-key"] == "k"
    assert fake.requests[0].headers["content-type"] == "application/json"
    assert fake.bodies == [{"a": [1, "ü"]}]


async def test_an_owned_client_is_closed_by_aclose(owned_clients: list[httpx2.AsyncClient]) -> None:
    http = HttpJson("acme")
    [client] = owned_clients
    await http.aclose()
    assert client.is_closed


async def test_an_invalid_url_fails_at_once_with_the_url() -> None:
    http = HttpJson("acme", retry=RetryPolicy(initial_backoff_seconds=0, jitter=0))
    try:
        with pytest.raises(ProviderHTTPError, match=r"invalid URL 'ftp://127\.0\.0\.1/x'"):
            await http.post("ftp://127.0.0.1/x", {}, {})
    finally:
        await http.aclose()


async def test_a_request_the_client_cannot_send_fails_at_once_without_echoing_headers(fake_http) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.LocalProtocolError("Illegal header value b'Bearer sk-secret\\n'", request=request)

    fake = fake_http(refuse, httpx2.Response(200, json=OK))
    http, delays = make(fake)
    with pytest.raises(ProviderHTTPError, match="could not send") as caught:
        await http.post(URL, {}, {})
    assert "sk-secret" not in str(caught.value)
    assert delays == [] and len(fake.requests) == 1


async def test_an_unexpected_client_exception_becomes_a_provider_error(fake_http) -> None:
    def explode(request: httpx2.Request) -> httpx2.Response:
        raise ExceptionGroup("unhandled errors in a TaskGroup", [OverflowError("connect(): port must be 0-65535.")])

    fake = fake_http(explode)
    http, _ = make(fake)
    with pytest.raises(ProviderHTTPError, match=r"OverflowError: connect\(\): port must be 0-65535"):
        await http.post(URL, {}, {})


async def test_a_server_that_never_answers_fails_after_one_bounded_wait(fake_http) -> None:
    async def stall(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    fake = FakeAsync([stall, stall])
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    http = HttpJson("acme", client=fake.client, retry=RetryPolicy(jitter=0), timeout_seconds=0.05, sleep=sleep)
    with deadline(10):
        with pytest.raises(ProviderHTTPError, match=r"no answer from .* within 0.05 s"):
            await http.post(URL, {}, {})
    # A whole timeout already cost the user that long; retrying would multiply it.
    assert len(fake.requests) == 1 and delays == []


def test_default_timeouts_are_bounded_and_sane(owned_clients: list[httpx2.AsyncClient]) -> None:
    http = HttpJson("acme")
    [client] = owned_clients
    timeout = client.timeout
    assert 60 <= http.timeout_seconds <= 900  # long answers take minutes; never unbounded
    assert timeout.connect is not None and timeout.connect <= 30
    assert timeout.read is not None and timeout.read <= http.timeout_seconds


async def test_each_retry_is_announced_and_the_final_error_counts_the_attempts(fake_http, caplog) -> None:
    limited = httpx2.Response(429, headers={"retry-after-ms": "10"}, json={"error": {"message": "slow down"}})
    fake = fake_http(limited, limited, limited)
    http, delays = make(fake, policy=RetryPolicy(max_retries=2, jitter=0))
    with caplog.at_level("WARNING"), pytest.raises(ProviderHTTPError, match=r"slow down \(gave up after 3 attempts\)"):
        await http.post(URL, {}, {})
    assert delays == [0.01, 0.01]
    notices = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(notices) == 2 and "HTTP 429" in notices[0] and "0.01 s" in notices[0]


class FakeAsync:
    """Like the `fake_http` fixture, with async handlers (to stall without blocking)."""

    def __init__(self, handlers: list[Any]) -> None:
        self.handlers = handlers
        self.requests: list[httpx2.Request] = []
        self.client = httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    async def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return await self.handlers.pop(0)(request)


async def test_a_404_or_405_names_the_url_so_a_wrong_base_url_is_easy_to_spot(fake_http) -> None:
    fake = fake_http(httpx2.Response(404, text="404 page not found"), httpx2.Response(405, text=""))
    http, _ = make(fake)
    with pytest.raises(ProviderHTTPError, match=r"HTTP 404\): 404 page not found \(POST http://127\.0\.0\.1:9/v1/chat"):
        await http.post(URL, {}, {})
    with pytest.raises(ProviderHTTPError, match=r"HTTP 405\): .*check the base URL"):
        await http.post(URL, {}, {})
