"""Routing: one cheap classification request on `model_fast` picks the model a prompt runs on.

`--model auto` (or `[agent] route = true` without `--model`) needs both `model_fast` and
`model_complex` in `[agent]`. The classification request offers no tools at all (no `tools` key
on the wire) and is never streamed; the fast model is asked whether the request is simple or
complex and answers with one word. "simple" runs the loop on `model_fast`, "complex" on
`model_complex`, and anything else falls back to `model_complex` (the safe choice), marked as a
fallback so the caller can say so. The classification's tokens belong to the run's usage; it is
not one of the run's turns. Provider failures propagate: a broken fast model is not hidden.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from omega_mcp.messages import Usage, UserMessage
from omega_mcp.providers import Provider

__all__ = ["CLASSIFIER_SYSTEM", "Route", "RouteChoice", "choose_model", "parse_classification"]

CLASSIFIER_SYSTEM = (
    "You route requests for an agent that works on the user's computer with tools (a shell, file "
    "reading and editing, and other services). Decide how hard the user's request is. It is simple "
    "when a quick answer, one lookup or one small, obvious change will do. It is complex when it needs "
    "several steps, investigation, debugging, design, or code changes across files. Reply with exactly "
    "one word: simple or complex."
)
_MAX_PROMPT_CHARS = 8_000
"""The classifier sees at most this much of the prompt (its head and tail): enough to judge it."""
_WORD = re.compile(r"\b(simple|complex)\b", re.IGNORECASE)
_SHOWN = 80

Tier = Literal["fast", "complex"]


@dataclass(frozen=True, slots=True)
class Route:
    """The two models of `[agent]` that routing chooses between."""

    fast: str
    complex: str


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """What the classification decided: the `tier`, its `model`, and what it cost.

    `fallback` is True when the classifier's `answer` said neither "simple" nor "complex" (or both):
    the complex model runs then.
    """

    tier: Tier
    model: str
    usage: Usage
    answer: str
    fallback: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "fallback": self.fallback}

    def describe(self) -> str:
        """One line for stderr saying which model runs and why."""
        if self.fallback:
            shown = " ".join(self.answer.split())
            shown = shown if len(shown) <= _SHOWN else f"{shown[:_SHOWN]}..."
            return (
                f"routing: the classification answer {shown!r} is neither 'simple' nor 'complex'; "
                f"using model_complex ({self.model})"
            )
        looks = "simple" if self.tier == "fast" else "complex"
        return f"routed to model_{self.tier} ({self.model}): the request looks {looks}"


def parse_classification(text: str) -> Literal["simple", "complex"] | None:
    """ "simple" or "complex" when the answer names exactly one of them (any case), else None."""
    found = {match.lower() for match in _WORD.findall(text)}
    if len(found) != 1:
        return None
    return "simple" if "simple" in found else "complex"


async def choose_model(provider: Provider, route: Route, prompt: str) -> RouteChoice:
    """Classify `prompt` on `route.fast` (no tools, not streamed) and pick the model to run on.

    Raises:
        ProviderError: the classification request failed.
    """
    response = await provider.request(
        model=route.fast, system=CLASSIFIER_SYSTEM, messages=[UserMessage(_clip(prompt))], tools=()
    )
    answer = response.message.text
    verdict = parse_classification(answer)
    if verdict == "simple":
        return RouteChoice("fast", route.fast, response.usage, answer)
    return RouteChoice("complex", route.complex, response.usage, answer, fallback=verdict is None)


def _clip(prompt: str) -> str:
    if len(prompt) <= _MAX_PROMPT_CHARS:
        return prompt
    half = _MAX_PROMPT_CHARS // 2
    return f"{prompt[:half]}\n[... {len(prompt) - 2 * half:,} characters left out ...]\n{prompt[-half:]}"
