"""The one error tree of omega-mcp.

Exceptions are for the caller of a library function; a *tool* failure that a model should
see is data (`CallToolResult(is_error=True)`) and is built from a `ToolError` at the Toolbox
boundary, never raised through the MCP server.

    OmegaError
    ├── ConfigError            servers.toml or a flag is wrong (CLI exit 2); names file and key
    ├── ToolError              a tool call failed; its message goes back to the model as isError
    │   ├── UnknownToolError       no tool by that name (carries the closest names)
    │   ├── InvalidArgumentsError  arguments do not match the tool's input schema
    │   ├── PathDeniedError        the sandbox policy refuses a path ("denied", names the path)
    │   ├── SandboxUnavailableError the OS sandbox cannot be applied and the config requires it
    │   └── DownstreamError        a downstream server is down, timed out or failed
    ├── OAuthError             OAuth for a remote server (`auth = "oauth"`) failed (login, discovery, tokens)
    │   └── LoginRequiredError     no usable tokens: the user must run `omega-mcp login SERVER`
    ├── ProviderError          an LLM provider request failed (agent loop)
    │   ├── ProviderAuthError      authentication / permission / quota: never retried
    │   └── ProviderHTTPError      any other non-success answer after retries
    │       └── ContextOverflowError   the request is longer than the model's context window
    └── AgentError             the agent loop could not finish (CLI exit 1)
        └── MaxTurnsExceededError  the model still wanted tools after `max_turns` requests
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

__all__ = [
    "AgentError",
    "ConfigError",
    "ContextOverflowError",
    "DownstreamError",
    "InvalidArgumentsError",
    "LoginRequiredError",
    "MaxTurnsExceededError",
    "OAuthError",
    "OmegaError",
    "PathDeniedError",
    "ProviderAuthError",
    "ProviderError",
    "ProviderHTTPError",
    "SandboxUnavailableError",
    "ToolError",
    "UnknownToolError",
    "first_leaf",
]


class OmegaError(Exception):
    """Base class of every error omega-mcp raises on purpose."""


class ConfigError(OmegaError):
    """The configuration (file, environment or flags) is invalid.

    `problems` holds one line per problem, each naming the file, the key and what is wrong; `str()`
    is those lines joined by newlines. Most errors have one; `combine` makes one error of several,
    so a file with three mistakes is reported whole instead of one mistake per run.
    """

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        self.path = path
        self.key = key
        where = ": ".join(part for part in (path, key) if part)
        line = f"{where}: {message}" if where else message
        self.problems: list[str] = [line]
        super().__init__(line)

    def __str__(self) -> str:
        return "\n".join(self.problems)

    @classmethod
    def combine(cls, errors: Sequence[ConfigError]) -> ConfigError:
        """One error reporting every problem of `errors` in order (`path` and `key` are the first one's)."""
        if not errors:
            raise ValueError("ConfigError.combine needs at least one error")
        first = errors[0]
        combined = cls(first.problems[0])
        combined.path, combined.key = first.path, first.key
        combined.problems = [line for error in errors for line in error.problems]
        return combined


class ToolError(OmegaError):
    """A tool call failed in a way the model can act on; becomes an isError result."""


class UnknownToolError(ToolError):
    """No tool has this name; `suggestions` holds the closest exported names."""

    def __init__(self, name: str, suggestions: Sequence[str] = ()) -> None:
        self.name = name
        self.suggestions = tuple(suggestions)
        hint = f" Did you mean: {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"Unknown tool: {name!r}.{hint}")


class InvalidArgumentsError(ToolError):
    """The arguments do not validate against the tool's input schema."""


class PathDeniedError(ToolError):
    """The sandbox policy refuses access to a path. The message contains `denied` and the path.

    `askable` marks a write refused only for being outside the writable roots (never the blocklist):
    with `[sandbox] on_denied = "ask"` the user may approve it once (`sandbox/approvals.py`).
    """

    def __init__(self, path: str, reason: str, *, askable: bool = False) -> None:
        self.path = path
        self.reason = reason
        self.askable = askable
        super().__init__(f"denied: {path}: {reason}")


class SandboxUnavailableError(ToolError):
    """The OS-level sandbox is required by the configuration but cannot be applied here."""


class DownstreamError(ToolError):
    """A downstream MCP server is unavailable, timed out, or failed the request."""


class DownstreamRefusedError(DownstreamError):
    """A downstream answered a call with a JSON-RPC error: an MCP client gets that error as it is.

    `code`, `rpc_message` and `data` are the downstream's; the message says which server refused.
    """

    def __init__(self, message: str, *, code: int, rpc_message: str, data: object = None) -> None:
        self.code = code
        self.rpc_message = rpc_message
        self.data = data
        super().__init__(message)


class OAuthError(OmegaError):
    """OAuth for a remote server failed: login, metadata discovery, registration or a token exchange."""


class LoginRequiredError(OAuthError):
    """A remote server with `auth = "oauth"` has no usable tokens; only `omega-mcp login` can get them.

    The message is the status the server shows everywhere: `needs login: run omega-mcp login NAME`,
    or, when the server asks for more than the tokens on file grant (a scope step-up), which scope:
    `needs login: server NAME asks for scope "admin": run omega-mcp login NAME`.
    """

    def __init__(self, server_name: str, *, scope: str | None = None) -> None:
        self.server_name = server_name
        self.scope = scope
        asks = f"server {server_name} asks for scope {scope!r}: " if scope else ""
        super().__init__(f"needs login: {asks}run omega-mcp login {server_name}".replace("'", '"'))


class ProviderError(OmegaError):
    """An LLM provider request failed; the message carries the provider's own error text."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class ProviderAuthError(ProviderError):
    """Authentication, permission or quota failure: retrying cannot help."""


class ProviderHTTPError(ProviderError):
    """Any other provider failure (after retries, where retries apply)."""


class ContextOverflowError(ProviderHTTPError):
    """The provider refused the request because the conversation exceeds the model's context window."""


class AgentError(OmegaError):
    """The agent loop could not produce a final answer."""


class MaxTurnsExceededError(AgentError):
    """The model was still calling tools after `max_turns` model requests.

    `result` holds the conversation so far (an `omega_mcp.agent.loop.AgentResult`), so callers can
    still report usage and messages.
    """

    def __init__(self, max_turns: int, result: object = None) -> None:
        self.max_turns = max_turns
        self.result = result
        super().__init__(
            f"stopped after {max_turns} turn{'' if max_turns == 1 else 's'}: the model was still calling tools "
            "(raise --max-turns or [agent] max_turns to allow more)"
        )


def first_leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups: anyio task groups wrap what they raise."""
    while True:
        if not isinstance(exc, BaseExceptionGroup):
            return exc
        inner: tuple[BaseException, ...] = cast(BaseExceptionGroup[BaseException], exc).exceptions
        if not inner:
            return cast(BaseException, exc)
        exc = inner[0]
