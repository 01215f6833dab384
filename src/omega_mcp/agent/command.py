"""`omega-mcp agent`: resolve settings, run the loop, print, and return the exit code.

Precedence: flags, then `[agent]` in servers.toml, then the provider's standard environment
variables, then built-in defaults. `[agent]` model, base URL and key variable apply only when its
`provider` is unset or is the one chosen. The final answer goes to stdout (or one JSON object with
`--json`); tool activity and the text around it go to stderr as they happen. Exit codes: 0 ok,
1 agent or provider failure (turn limit included), 2 configuration error; never a traceback.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit

import anyio
import httpx2

from omega_mcp.agent.loop import (
    AgentEvent,
    AgentResult,
    TextEvent,
    ToolCallEvent,
    ToolHost,
    ToolResultEvent,
    partial_result,
    run_agent,
)
from omega_mcp.config import AgentConfig, Config
from omega_mcp.errors import ConfigError, MaxTurnsExceededError, ProviderAuthError, ProviderError
from omega_mcp.providers import PRESETS, PROVIDER_NAMES, create_provider

__all__ = ["AgentSettings", "resolve_model", "resolve_settings", "run_agent_command"]

Tier = Literal["default", "fast", "complex"]
_OLLAMA_PORT = 11434
_SHORT = 300
_LISTED = 12
# Stop reasons meaning "the output token limit cut the answer off" (OpenAI/Ollama, Anthropic, Gemini).
_CUT_OFF = frozenset({"length", "max_tokens", "MAX_TOKENS"})
_NORMAL_STOP = frozenset(
    {None, "stop", "STOP", "end_turn", "stop_sequence", "tool_calls", "tool_use", "FINISH_REASON_UNSPECIFIED"}
)
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Everything needed to build the provider and run the loop."""

    provider: str
    model: str
    base_url: str
    api_key: str | None
    api_key_env: str | None
    max_turns: int
    anthropic_version: str | None
    max_tokens: int | None


def resolve_model(config: AgentConfig | Config, tier: Tier = "default", *, provider: str | None = None) -> str:
    """The model for a request tier: `model_fast` / `model_complex` fall back to `model`, then to
    the provider's default model.

    Raises:
        ConfigError: no model is configured and no provider is known to take a default from.
    """
    agent = config.agent if isinstance(config, Config) else config
    chosen = {"fast": agent.model_fast, "complex": agent.model_complex}.get(tier) or agent.model
    if chosen:
        return chosen
    name = provider or agent.provider
    preset = PRESETS.get(name or "")
    if preset is None:
        raise ConfigError("no model: set model (or provider) in [agent]", key="agent.model")
    return preset.default_model


def resolve_settings(
    config: Config,
    *,
    provider: str | None,
    model: str | None,
    base_url: str | None,
    max_turns: int | None,
    environ: Mapping[str, str],
) -> AgentSettings:
    """Combine flags, `[agent]`, environment and defaults.

    Raises:
        ConfigError: no or unknown provider, a missing API key, a bad base URL or turn limit.
    """
    where = str(config.path) if config.path else None
    name = provider or config.agent.provider
    if name is None:
        raise ConfigError(f"no provider: pass --provider ({', '.join(PROVIDER_NAMES)}) or set provider in [agent]")
    preset = PRESETS.get(name)
    if preset is None:
        raise ConfigError(f"unknown provider {name!r} (choose from {', '.join(PROVIDER_NAMES)})", key="--provider")
    own = config.agent if config.agent.provider in (None, name) else AgentConfig()
    url = base_url or own.base_url or environ.get(preset.base_url_env) or preset.default_base_url
    if name == "ollama":
        url = _ollama_url(url)
    problem = _url_problem(url)
    if problem:
        source = "--base-url" if base_url else ("agent.base_url" if own.base_url else preset.base_url_env)
        raise ConfigError(problem, key=source)
    key_env, key = _api_key(own, preset.key_envs, environ, where)
    if key is not None:
        key = key.strip()
        if not _PRINTABLE_ASCII.fullmatch(key):
            # Never echo the key: it is a secret, and the bad character may not even be visible.
            raise ConfigError(f"{key_env} contains a space, control or non-ASCII character (a stray newline or quote?)")
    if key is None and preset.key_required:
        raise ConfigError(f"{key_env} is not set: the {name} provider needs an API key")
    turns = max_turns if max_turns is not None else config.agent.max_turns
    if turns < 1:
        raise ConfigError(f"must be at least 1, got {turns}", key="--max-turns")
    return AgentSettings(
        provider=name,
        model=model or resolve_model(own, provider=name),
        base_url=url,
        api_key=key,
        api_key_env=key_env,
        max_turns=turns,
        anthropic_version=config.agent.anthropic_version,
        max_tokens=config.agent.max_tokens,
    )


def _api_key(
    agent: AgentConfig, standard: tuple[str, ...], environ: Mapping[str, str], where: str | None
) -> tuple[str | None, str | None]:
    if agent.api_key_env:
        value = environ.get(agent.api_key_env)
        if not value:
            raise ConfigError(
                f"{agent.api_key_env} is not set (named by api_key_env)", path=where, key="agent.api_key_env"
            )
        return agent.api_key_env, value
    for env in standard:
        if environ.get(env):
            return env, environ[env]
    return (standard[0] if standard else None), None


def _url_problem(url: str) -> str | None:
    """Why `url` cannot be a provider base URL, or None. Checked up front: a bad port or host
    would otherwise surface as a low-level socket error on the first request."""
    if not url.startswith(("http://", "https://")):
        return f"base URL must start with http:// or https://, got {url!r}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        problem = "the port must be 1-65535" if "port" in str(exc).lower() else f"not a valid URL ({exc})"
        return f"{problem}: {url!r}"
    if port == 0:
        return f"the port must be 1-65535: {url!r}"
    host = parts.hostname
    if not host or any(ch.isspace() for ch in host):
        return f"the base URL needs a host name without spaces: {url!r}"
    return None


def _ollama_url(value: str) -> str:
    """OLLAMA_HOST may be `host`, `host:port` or a URL, like the ollama CLI accepts."""
    if value.startswith(("http://", "https://")):
        return value
    host = value.strip().rstrip("/")
    if ":" not in host.rsplit("]", 1)[-1]:
        host = f"{host}:{_OLLAMA_PORT}"
    return f"http://{host}"


async def run_agent_command(
    *,
    prompt: str,
    config: Config,
    tools: ToolHost,
    provider: str | None,
    model: str | None,
    base_url: str | None,
    max_turns: int | None,
    no_tools: bool,
    allow_tools: list[str] | None,
    system: str | None,
    json_output: bool,
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
    http_client: httpx2.AsyncClient | None = None,
) -> int:
    """Run `omega-mcp agent` and return its exit code (0 ok, 1 failure, 2 configuration error)."""
    try:
        settings = resolve_settings(
            config, provider=provider, model=model, base_url=base_url, max_turns=max_turns, environ=environ
        )
    except ConfigError as exc:
        _line(stderr, f"omega-mcp agent: {exc}")
        return 2
    llm = create_provider(
        settings.provider,
        api_key=settings.api_key,
        base_url=settings.base_url,
        client=http_client,
        anthropic_version=settings.anthropic_version,
        max_tokens=settings.max_tokens,
    )
    allowed: list[str] | None = [] if no_tools else allow_tools
    failure: str
    partial: AgentResult | None = None
    try:
        if allowed:
            await _warn_unmatched(allowed, tools, stderr)
        result = await run_agent(
            prompt,
            provider=llm,
            tools=tools,
            model=settings.model,
            max_turns=settings.max_turns,
            allowed_tools=allowed,
            system=system,
            on_event=lambda event: _report(stderr, event),
        )
    except MaxTurnsExceededError as exc:
        failure = str(exc)
        partial = exc.result if isinstance(exc.result, AgentResult) else None
    except ProviderAuthError as exc:
        hint = f" (check {settings.api_key_env})" if settings.api_key_env else ""
        failure = f"{exc}{hint}"
        partial = partial_result(exc)
    except ProviderError as exc:
        failure = str(exc)
        partial = partial_result(exc)
    except Exception as exc:  # the CLI boundary: one line, never a traceback
        failure = f"internal error: {type(exc).__name__}: {exc}"
    else:
        if result.finish_reason in _CUT_OFF:
            _line(stderr, f"omega-mcp agent: warning: the answer was cut off at the output token limit{_why(result)}")
        elif not result.output.strip():
            _line(stderr, f"omega-mcp agent: warning: the model returned an empty answer{_why(result)}")
        elif result.finish_reason not in _NORMAL_STOP:  # a safety filter or refusal cut the answer short
            _line(stderr, f"omega-mcp agent: warning: the model stopped early{_why(result)}")
        if json_output:
            _json_line(stdout, result.to_json())
        else:
            _line(stdout, result.output)
        return 0
    finally:
        with anyio.CancelScope(shield=True):
            await llm.aclose()
    _line(stderr, f"omega-mcp agent: {failure}")
    if json_output:
        data: dict[str, Any] = partial.to_json() if partial else {"output": None}
        if not data["output"]:
            data["output"] = None
        data["error"] = failure
        _json_line(stdout, data)
    return 1


def _why(result: AgentResult) -> str:
    return f" (finish reason: {result.finish_reason})" if result.finish_reason else ""


async def _warn_unmatched(globs: list[str], tools: ToolHost, stderr: TextIO) -> None:
    """A typo in --allow-tool would silently leave the model without the tool it needs."""
    names = [tool.name for tool in await tools.list_tools()]
    for glob in globs:
        if not any(fnmatch.fnmatchcase(name, glob) for name in names):
            shown = ", ".join(names[:_LISTED]) + (", ..." if len(names) > _LISTED else "")
            _line(stderr, f"omega-mcp agent: warning: --allow-tool {glob!r} matches no tool (available: {shown})")


def _report(stream: TextIO, event: AgentEvent) -> None:
    if isinstance(event, TextEvent):
        if not event.final:  # the final answer goes to stdout only
            _line(stream, event.text)
    elif isinstance(event, ToolCallEvent):
        arguments = (
            "(unparsable arguments)" if event.arguments is None else json.dumps(event.arguments, ensure_ascii=False)
        )
        suffix = "" if event.run else " (not run: turn limit reached)"
        _line(stream, f"[tool] {event.name} {_shorten(arguments)}{suffix}")
    elif isinstance(event, ToolResultEvent):
        label = "error" if event.is_error else "result"
        _line(stream, f"[{label}] {event.name}: {_shorten(event.text)}")
    # Thinking is not shown: it can be long, and the answer matters more.


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHORT else f"{flat[:_SHORT]}... ({len(text)} chars)"


def _line(stream: TextIO, text: str) -> None:
    line = text if text.endswith("\n") else text + "\n"
    try:
        stream.write(line)
    except UnicodeEncodeError:
        # A terminal that cannot show the text (LANG=C, old consoles): escape rather than crash.
        encoding = stream.encoding or "ascii"
        stream.write(line.encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()


def _json_line(stream: TextIO, data: dict[str, Any]) -> None:
    """One JSON object; plain ASCII escapes when the stream cannot encode the text itself."""
    text = json.dumps(data, ensure_ascii=False)
    try:
        text.encode(stream.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(data)
    _line(stream, text)
