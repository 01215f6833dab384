"""Settings of `omega-mcp agent`: provider, model (or the routing pair), endpoint, key and limits.

Precedence: flags, then `[agent]` in servers.toml, then the provider's standard environment
variables, then built-in defaults. `[agent]` model, base URL, key variable and routing apply only
when its `provider` is unset or is the one chosen. Everything is checked up front, so a bad value is
a configuration error (exit 2) naming where it came from, never a low-level failure mid-run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from omega_mcp.agent.routing import Route
from omega_mcp.config import AgentConfig, Config
from omega_mcp.errors import ConfigError
from omega_mcp.providers import PRESETS, PROVIDER_NAMES

__all__ = ["AUTO_MODEL", "AgentSettings", "Tier", "resolve_model", "resolve_settings"]

Tier = Literal["default", "fast", "complex"]
AUTO_MODEL = "auto"
"""`--model auto`: classify each prompt on `model_fast`, then run on the fast or the complex model."""
_OLLAMA_PORT = 11434
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
    route: Route | None = None
    """Set when each prompt is routed (`--model auto`, `[agent] route`); `model` is then the complex one."""


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
        ConfigError: no or unknown provider, a missing API key, a bad base URL or turn limit,
            routing without both `model_fast` and `model_complex`.
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
    route = _route(own, model, where)
    return AgentSettings(
        provider=name,
        model=route.complex if route else (model or resolve_model(own, provider=name)),
        base_url=url,
        api_key=key,
        api_key_env=key_env,
        max_turns=turns,
        anthropic_version=config.agent.anthropic_version,
        max_tokens=config.agent.max_tokens,
        route=route,
    )


def _route(own: AgentConfig, model: str | None, where: str | None) -> Route | None:
    """The two models to route between, when `--model auto` (or `route = true` and no `--model`)."""
    if model != AUTO_MODEL and (model is not None or not own.route):
        return None
    if own.model_fast and own.model_complex:
        return Route(fast=own.model_fast, complex=own.model_complex)
    missing = " and ".join(key for key in ("model_fast", "model_complex") if not getattr(own, key))
    if model == AUTO_MODEL:
        raise ConfigError(f"auto needs model_fast and model_complex in [agent] ({missing} not set)", key="--model")
    raise ConfigError(f"routing needs model_fast and model_complex ({missing} not set)", path=where, key="agent.route")


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
