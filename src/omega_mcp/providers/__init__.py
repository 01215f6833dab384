"""LLM providers: the `Provider` protocol, per-provider presets and a factory.

Providers know nothing about MCP: each adapter maps the neutral messages of
`omega_mcp.messages` to one wire format and back. The presets hold what the CLI needs to
build one (default base URL, the environment variables for key and base URL, a default model);
adapters are imported lazily so `import omega_mcp.providers` stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

import httpx2

from omega_mcp.messages import AudioPart, ImagePart, Message, ModelResponse, RequestSettings, ToolSpec
from omega_mcp.providers._http import RetryPolicy

__all__ = [
    "PRESETS",
    "PROVIDER_NAMES",
    "Provider",
    "ProviderName",
    "ProviderPreset",
    "RetryPolicy",
    "create_provider",
    "media_problem",
]

ProviderName = Literal["openai", "anthropic", "ollama", "openrouter", "gemini"]
PROVIDER_NAMES: tuple[str, ...] = get_args(ProviderName)
_CHAT_AUDIO = frozenset({"audio/wav", "audio/x-wav", "audio/wave", "audio/mpeg", "audio/mp3"})
"""The audio a Chat Completions `input_audio` part takes (its `format`: wav or mp3)."""


class Provider(Protocol):
    """One LLM endpoint: turn a conversation plus tool specs into the next assistant turn."""

    @property
    def name(self) -> str: ...

    async def request(
        self,
        *,
        model: str,
        system: str | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None] | None = None,
        settings: RequestSettings | None = None,
    ) -> ModelResponse:
        """The next assistant turn. An empty `tools` means no tools are offered at all.

        `settings` (temperature, stop sequences, tool choice) are mapped to the provider's own fields;
        media parts of user messages are sent only where `media_problem` finds none.

        With `on_text`, the provider streams: each piece of answer text is passed to `on_text` as
        it arrives, and the returned turn is exactly the one the non-streamed request would give.

        Raises:
            ProviderAuthError: authentication, permission or quota failure.
            ContextOverflowError: the conversation is longer than the model's context window.
            ProviderHTTPError: any other failure, after retries.
        """
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ProviderPreset:
    """Defaults for one provider (SPEC.md "Agent loop")."""

    name: ProviderName
    default_base_url: str
    base_url_env: str
    key_envs: tuple[str, ...]
    key_required: bool
    default_model: str
    media: frozenset[str] = frozenset({"image"})
    """The media a user message may carry in this wire format ("image", "audio")."""
    audio_types: frozenset[str] | None = None
    """The audio MIME types it takes (None: any)."""


PRESETS: dict[str, ProviderPreset] = {
    "openai": ProviderPreset(
        "openai",
        "https://api.openai.com/v1",
        "OPENAI_BASE_URL",
        ("OPENAI_API_KEY",),
        True,
        "gpt-5.4",
        media=frozenset({"image", "audio"}),
        audio_types=_CHAT_AUDIO,
    ),
    "openrouter": ProviderPreset(
        "openrouter",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_BASE_URL",
        ("OPENROUTER_API_KEY",),
        True,
        "anthropic/claude-sonnet-4.5",
        media=frozenset({"image", "audio"}),
        audio_types=_CHAT_AUDIO,
    ),
    "anthropic": ProviderPreset(
        "anthropic",
        "https://api.anthropic.com",
        "ANTHROPIC_BASE_URL",
        ("ANTHROPIC_API_KEY",),
        True,
        "claude-sonnet-4-6",
    ),
    "ollama": ProviderPreset("ollama", "http://127.0.0.1:11434", "OLLAMA_HOST", ("OLLAMA_API_KEY",), False, "qwen3"),
    "gemini": ProviderPreset(
        "gemini",
        "https://generativelanguage.googleapis.com",
        "GEMINI_BASE_URL",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        True,
        "gemini-2.5-flash",
        media=frozenset({"image", "audio"}),
    ),
}


def media_problem(name: str, part: ImagePart | AudioPart) -> str | None:
    """Why provider `name` cannot take `part` in a user message, or None."""
    preset = PRESETS.get(name)
    kind = "image" if isinstance(part, ImagePart) else "audio"
    if preset is None or kind not in preset.media:
        return f"the {name} provider takes no " + ("images" if kind == "image" else "audio input")
    if kind == "audio" and preset.audio_types is not None and part.mime_type not in preset.audio_types:
        return f"the {name} provider takes wav or mp3 audio only, not {part.mime_type}"
    return None


def create_provider(
    name: str,
    *,
    api_key: str | None,
    base_url: str | None = None,
    client: httpx2.AsyncClient | None = None,
    retry: RetryPolicy | None = None,
    anthropic_version: str | None = None,
    max_tokens: int | None = None,
) -> Provider:
    """An adapter for `name` (one of `PROVIDER_NAMES`); close it with `aclose()`.

    Raises:
        ValueError: unknown provider name.
    """
    preset = PRESETS.get(name)
    if preset is None:
        raise ValueError(f"unknown provider {name!r} (choose from {', '.join(PROVIDER_NAMES)})")
    url = base_url or preset.default_base_url
    if preset.name in ("openai", "openrouter"):
        from omega_mcp.providers.openai import OpenAIProvider

        return OpenAIProvider(
            api_key=api_key, base_url=url, flavor=preset.name, max_tokens=max_tokens, client=client, retry=retry
        )
    if preset.name == "anthropic":
        from omega_mcp.providers.anthropic import DEFAULT_ANTHROPIC_VERSION, DEFAULT_MAX_TOKENS, AnthropicProvider

        return AnthropicProvider(
            api_key=api_key,
            base_url=url,
            anthropic_version=anthropic_version or DEFAULT_ANTHROPIC_VERSION,
            max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
            client=client,
            retry=retry,
        )
    if preset.name == "ollama":
        from omega_mcp.providers.ollama import OllamaProvider

        return OllamaProvider(api_key=api_key, base_url=url, max_tokens=max_tokens, client=client, retry=retry)
    from omega_mcp.providers.gemini import GeminiProvider

    return GeminiProvider(api_key=api_key, base_url=url, max_tokens=max_tokens, client=client, retry=retry)
