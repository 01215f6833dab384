"""JSON-over-HTTP for provider adapters: timeouts, retries with backoff, and error mapping.

One POST helper shared by every adapter. Transient failures (connection errors, 408, 409, 429,
5xx, Anthropic's 529, and errors a gateway reports inside a 200) are retried with exponential
backoff and jitter, honoring `retry-after-ms`, `retry-after` and Gemini's `RetryInfo.retryDelay`,
each retry announced as a log warning; authentication, quota and validation errors never are, nor
is a request that used up its whole timeout (retrying would multiply a long silent wait). Every
failure is a `ProviderError` whose message carries the provider's own error text. The caller may
pass its own `httpx2.AsyncClient` (tests use `httpx2.MockTransport`); otherwise one is created and
closed by `aclose()`.

`stream()` is the same request streamed (SSE or NDJSON): every read is bounded by the timeout, and
a stream that breaks (or reports a transient error) is retried as a whole request as long as no
answer text was shown; after that it is an error that says so. A refusal for a too-long context
is a `ContextOverflowError`, never retried, streamed or not.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import anyio
import httpx2

from omega_mcp.errors import ContextOverflowError, ProviderAuthError, ProviderError, ProviderHTTPError, first_leaf
from omega_mcp.messages import ModelResponse
from omega_mcp.narrow import as_int, as_list, as_object, as_str
from omega_mcp.providers._stream import (
    Framing,
    StreamAssembler,
    StreamBrokenError,
    StreamErrorEvent,
    StreamProtocolError,
    TextSink,
)

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "HttpJson", "HttpProvider", "RetryPolicy", "error_text"]

DEFAULT_TIMEOUT_SECONDS = 600.0
"""Upper bound for one request, all reads included; a long reasoning answer can take minutes."""

logger = logging.getLogger(__name__)

_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_AUTH_STATUSES = frozenset({401, 402, 403})
# Markers of a spent budget rather than a rate limit: waiting does not help.
_QUOTA_MARKERS = ("insufficient_quota", "enforced_spend_limit_reached", "billing_error", "billing_hard_limit")
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)s\s*$")
# How each provider says the conversation no longer fits the model's context window (lowercase).
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|prompt is too long|exceeds the maximum number of tokens"
    r"|input token count.{0,80}exceed|exceed_context_size_error|exceeds the available context size"
    r"|longer than the context length|exceeds the context length"
)
# Error types (Anthropic, OpenAI) and statuses (Google) of errors sent without an HTTP status:
# inside a 200 body or a stream.
_ERROR_TYPE_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "rate_limit_exceeded": 429,
    "api_error": 500, "server_error": 500, "timeout_error": 504, "overloaded_error": 529,
    "INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504,
}  # fmt: skip
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry transient failures (tests pass zero backoff)."""

    max_retries: int = 3
    initial_backoff_seconds: float = 0.5
    max_backoff_seconds: float = 8.0
    max_retry_after_seconds: float = 120.0
    jitter: float = 0.25

    def backoff(self, attempt: int) -> float:
        base = min(self.initial_backoff_seconds * 2**attempt, self.max_backoff_seconds)
        return base * (1 + self.jitter * random.random())  # noqa: S311  (jitter, not crypto)


@dataclass(frozen=True, slots=True)
class _Failure:
    error: ProviderError
    retryable: bool
    delay_seconds: float | None = None


class HttpJson:
    """POST JSON, get JSON back, with the retry policy above."""

    def __init__(
        self,
        provider_name: str,
        *,
        client: httpx2.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.provider_name = provider_name
        self.retry = retry or RetryPolicy()
        self.timeout_seconds = timeout_seconds
        self._sleep = sleep
        self._owns_client = client is None
        self._client = client or httpx2.AsyncClient(
            timeout=httpx2.Timeout(timeout_seconds, connect=30.0), trust_env=True
        )

    async def aclose(self) -> None:
        if self._owns_client:
            with anyio.move_on_after(5, shield=True):
                await self._client.aclose()

    async def post(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        """POST `body` to `url`; the decoded JSON object of a successful answer.

        Raises:
            ProviderAuthError: authentication, permission or quota failure (never retried).
            ContextOverflowError: the conversation is too long for the model (never retried).
            ProviderHTTPError: any other failure, after the retries it deserves.
        """
        return await self._retrying(lambda: self._attempt(url, body, headers))

    async def stream(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        framing: Callable[[], Framing],
        assembler: Callable[[TextSink], StreamAssembler],
        on_text: Callable[[str], None],
    ) -> ModelResponse:
        """POST `body` and read the streamed answer; its text goes to `on_text` as it arrives.

        `framing` and `assembler` make a fresh decoder and assembler for each attempt.

        Raises:
            ProviderAuthError: authentication, permission or quota failure (never retried).
            ContextOverflowError: the conversation is too long for the model (never retried).
            ProviderHTTPError: any other failure, after the retries it deserves; a stream that
                broke after text was shown is not retried and says so.
        """
        sink = TextSink(on_text)
        return await self._retrying(
            lambda: self._stream_attempt(url, body, headers, decoder=framing(), assembler=assembler(sink), sink=sink)
        )

    async def _retrying(self, attempt_once: Callable[[], Awaitable[_T | _Failure]]) -> _T:
        attempt = 0
        while True:
            failure = await attempt_once()
            if not isinstance(failure, _Failure):
                return failure
            if not failure.retryable or attempt >= self.retry.max_retries:
                if attempt == 0:
                    raise failure.error
                raise type(failure.error)(
                    f"{failure.error} (gave up after {attempt + 1} attempts)", status_code=failure.error.status_code
                )
            delay = failure.delay_seconds if failure.delay_seconds is not None else self.retry.backoff(attempt)
            if delay > self.retry.max_retry_after_seconds:
                raise ProviderHTTPError(
                    f"{failure.error} (the provider asked to retry after {delay:g} s; giving up)",
                    status_code=failure.error.status_code,
                )
            # Waits can add up to minutes: say why the run is quiet.
            logger.warning(
                "%s; retrying in %.3g s (retry %d of %d)", failure.error, delay, attempt + 1, self.retry.max_retries
            )
            await self._sleep(max(delay, 0.0))
            attempt += 1

    async def _attempt(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> dict[str, Any] | _Failure:
        """One request: the decoded answer, or a classified failure."""
        response = await self._send(url, body, headers, stream=False)
        if isinstance(response, _Failure):
            return response
        data, failure = self._check(response)
        return data if failure is None else failure

    async def _stream_attempt(
        self,
        url: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        decoder: Framing,
        assembler: StreamAssembler,
        sink: TextSink,
    ) -> ModelResponse | _Failure:
        """One streamed request: the assembled answer, or a classified failure."""
        response = await self._send(url, body, headers, stream=True)
        if isinstance(response, _Failure):
            return response
        try:
            outcome = await self._read_stream(url, response, decoder, assembler)
        finally:
            with anyio.move_on_after(5, shield=True):
                await response.aclose()
        if isinstance(outcome, _Failure) and sink.shown and not isinstance(outcome.error, ProviderAuthError):
            # A retry would show the text twice: say what happened instead.
            error = ProviderHTTPError(
                f"the stream from {self.provider_name} broke after text was shown: {outcome.error}",
                status_code=outcome.error.status_code,
            )
            return _Failure(error, False)
        return outcome

    async def _send(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *, stream: bool
    ) -> httpx2.Response | _Failure:
        """Send the request and get the response head (and, unless `stream`, its body)."""
        try:
            request = self._client.build_request("POST", url, json=body, headers=dict(headers))
            with anyio.fail_after(self.timeout_seconds):
                return await self._client.send(request, stream=stream)
        except (httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
            raise self._error(f"invalid URL {url!r}: {exc}") from None
        except httpx2.LocalProtocolError as exc:
            # The request could not even be built. Its text may quote a header value (the API key).
            raise self._error(
                f"could not send the request to {url} ({type(exc).__name__}): "
                "check the API key and headers for invalid characters"
            ) from None
        except (TimeoutError, httpx2.ReadTimeout, httpx2.WriteTimeout):
            # The server took the request and went quiet for the whole budget: a retry would make
            # the user wait that long again, so fail now.
            return _Failure(self._error(f"no answer from {url} within {self.timeout_seconds:g} s"), False)
        except httpx2.HTTPError as exc:
            return _Failure(self._error(f"request to {url} failed: {_describe_exception(exc)}"), True)
        except Exception as exc:  # a client or socket-layer bug must still read as a provider failure
            raise self._error(f"request to {url} failed: {_describe_exception(first_leaf(exc))}") from None

    async def _read_stream(
        self, url: str, response: httpx2.Response, decoder: Framing, assembler: StreamAssembler
    ) -> ModelResponse | _Failure:
        status = response.status_code
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if not 200 <= status < 300 or kind == "application/json":
            # An error, or a server that ignored the stream flag: one JSON body either way.
            try:
                with anyio.fail_after(self.timeout_seconds):
                    await response.aread()
            except (TimeoutError, httpx2.HTTPError) as exc:
                return _Failure(self._error(f"reading the answer from {url} failed: {_describe_exception(exc)}"), True)
            data, failure = self._check(response)
            return failure if failure is not None else assembler.whole(data)
        chunks = response.aiter_bytes()
        try:
            while not assembler.done:
                try:
                    with anyio.fail_after(self.timeout_seconds):
                        chunk = await anext(chunks, None)
                except TimeoutError:
                    silent = f"the stream from {url} sent nothing for {self.timeout_seconds:g} s"
                    return _Failure(self._error(silent), False)
                except httpx2.HTTPError as exc:
                    return _Failure(self._error(f"the stream from {url} broke: {_describe_exception(exc)}"), True)
                for event in decoder.feed(chunk) if chunk is not None else decoder.close():
                    assembler.feed(event)
                if chunk is None:
                    break
            return assembler.result()
        except StreamErrorEvent as exc:
            code = _embedded_code(exc.body.get("error")) or status
            return self._failure(code, error_text(exc.body, str(exc)), response, exc.body)
        except StreamBrokenError as exc:
            return _Failure(self._error(f"the stream from {url} broke: {exc}"), True)
        except StreamProtocolError as exc:
            return _Failure(self._error(f"the stream from {url} is malformed: {exc}", status), False)
        finally:
            with anyio.move_on_after(5, shield=True):
                await chunks.aclose()

    def _error(
        self, message: str, status: int | None = None, *, auth: bool = False, overflow: bool = False
    ) -> ProviderError:
        cls = ProviderAuthError if auth else ContextOverflowError if overflow else ProviderHTTPError
        prefix = f"{self.provider_name} API error" + (f" (HTTP {status})" if status is not None else "")
        return cls(f"{prefix}: {message}", status_code=status)

    def _check(self, response: httpx2.Response) -> tuple[dict[str, Any], _Failure | None]:
        status = response.status_code
        body: object
        try:
            body = json.loads(response.content) if response.content else None
        except ValueError:
            body = None
        if 200 <= status < 300:
            data = as_object(body)
            if not isinstance(body, dict):
                snippet = response.text[:300]
                return {}, _Failure(self._error(f"expected a JSON object, got: {snippet!r}", status), False)
            if data.get("error"):
                # Errors inside a 200 (OpenRouter, Ollama): classify by the embedded code when there is one.
                code = _embedded_code(data["error"])
                return data, self._failure(code or status, error_text(data, response.text), response, data)
            return data, None
        message = error_text(body, response.text)
        if status in (404, 405):
            # Often a base URL missing or doubling a path segment such as /v1: show where we went.
            # Without credentials or query: those may hold secrets.
            where = response.request.url.copy_with(userinfo=b"", query=None)
            message += f" (POST {where}; check the base URL if the path is wrong)"
        return {}, self._failure(status, message, response, body)

    def _failure(self, status: int, message: str, response: httpx2.Response, body: object) -> _Failure:
        lowered = message.lower() + json.dumps(body, default=str).lower()
        if status in _AUTH_STATUSES or any(marker in lowered for marker in _QUOTA_MARKERS):
            return _Failure(self._error(message, status, auth=True), False)
        if _OVERFLOW.search(lowered):
            return _Failure(self._error(message, status, overflow=True), False)
        retryable = status in _RETRY_STATUSES or status >= 500
        should_retry = response.headers.get("x-should-retry", "").lower()
        if should_retry in ("true", "false"):
            retryable = should_retry == "true"
        delay = _retry_after(response.headers) if retryable else None
        if retryable and delay is None:
            delay = _body_retry_delay(body)
        return _Failure(self._error(message, status), retryable, delay)


def error_text(body: object, fallback: str = "") -> str:
    """The human message inside any provider's error body, with its type or code when present."""
    data = as_object(body)
    error: object = data.get("error", data)
    if isinstance(error, str):
        return error
    fields = as_object(error)
    message = as_str(fields.get("message"))
    if message:
        kind = as_str(fields.get("type") or fields.get("status") or fields.get("code"))
        return f"{kind}: {message}" if kind else message
    text = fallback.strip()
    return text[:500] if text else "(no error message in the response)"


def _embedded_code(error: object) -> int | None:
    """The HTTP status an error body implies: its numeric `code`, else its type or status name."""
    fields = as_object(error)
    code = as_int(fields.get("code"))
    if 400 <= code <= 599:
        return code
    return _ERROR_TYPE_STATUS.get(str(fields.get("type") or fields.get("status") or ""))


def _retry_after(headers: httpx2.Headers) -> float | None:
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return float(raw_ms) / 1000.0
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _body_retry_delay(body: object) -> float | None:
    """Gemini: `error.details[] {"@type": "...RetryInfo", "retryDelay": "51.8s"}`."""
    for detail in as_list(as_object(as_object(body).get("error")).get("details")):
        match = _DURATION.match(str(as_object(detail).get("retryDelay", "")))
        if match:
            return float(match.group(1))
    return None


def _describe_exception(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class HttpProvider:
    """Shared skeleton of the HTTP adapters: an `HttpJson`, `aclose()` and `async with` support."""

    name: str = "provider"

    def __init__(
        self,
        *,
        client: httpx2.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._http = HttpJson(self.name, client=client, retry=retry, timeout_seconds=timeout_seconds, sleep=sleep)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
