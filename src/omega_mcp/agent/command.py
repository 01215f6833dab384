"""`omega-mcp agent`: resolve settings, run the loop, print, and return the exit code.

Settings come from `omega_mcp.agent.settings` (flags, then `[agent]`, then the environment, then
defaults); `--model auto` routes each prompt (`omega_mcp.agent.routing`). What goes where,
streamed or not, is described in `omega_mcp.agent.output`; `--json` prints one JSON object on
stdout instead of any text. stderr ends with one usage line (turns, tokens, cache, wall time), with
`--json` too: stderr is for people. Exit codes: 0 ok, 1 agent or provider failure (turn limit included), 2 configuration
error; never a traceback.

`run_agent_command` is the one-shot command: settings, provider, system prompt (`RunOptions`,
computed once) and one `run_prompt`. An interactive session calls `run_prompt` once per prompt
with the same provider, options and the conversation so far.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import httpx2

from omega_mcp.agent.loop import AgentResult, AgentToolSearch, ToolHost, partial_result, run_agent
from omega_mcp.agent.output import Printer, StreamedTurns, json_line, streams_live, usage_line
from omega_mcp.agent.prompt import system_prompt
from omega_mcp.agent.routing import RouteChoice, choose_model
from omega_mcp.agent.settings import AUTO_MODEL, AgentSettings, resolve_model, resolve_settings
from omega_mcp.config import Config
from omega_mcp.errors import ConfigError, MaxTurnsExceededError, ProviderAuthError, ProviderError
from omega_mcp.messages import Message, Usage
from omega_mcp.providers import Provider, create_provider

if TYPE_CHECKING:
    from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = [
    "AUTO_MODEL",
    "AgentSettings",
    "PromptOutcome",
    "PromptRunner",
    "RunOptions",
    "SessionHook",
    "resolve_model",
    "resolve_settings",
    "run_agent_command",
    "run_options",
    "run_prompt",
]

_LISTED = 12
# Stop reasons meaning "the output token limit cut the answer off" (OpenAI/Ollama, Anthropic, Gemini).
_CUT_OFF = frozenset({"length", "max_tokens", "MAX_TOKENS"})
_NORMAL_STOP = frozenset(
    {None, "stop", "STOP", "end_turn", "stop_sequence", "tool_calls", "tool_use", "FINISH_REASON_UNSPECIFIED"}
)


PromptRunner = Callable[[str, Sequence[Message]], Awaitable["PromptOutcome"]]
"""Runs one prompt after a history (`run_prompt` with the run's provider, tools, settings and options)."""
SessionHook = Callable[[PromptRunner, AgentSettings], Awaitable[int]]
"""Runs a session's prompts with a `PromptRunner` and returns the exit code (`run_agent_command(session=)`)."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How each prompt of a run is sent and shown; computed once per run (`run_options`).

    `system` is byte-identical for every request of the run (prompt caching). `allowed_tools`:
    None offers every tool, empty none. `stream`: answer text to stdout as it arrives.
    """

    system: str | None
    allowed_tools: tuple[str, ...] | None
    stream: bool
    json_output: bool
    tool_search: AgentToolSearch | None = None
    """`[agent] tool_search` with `[hub] always_visible` (None: every tool is sent)."""


@dataclass(frozen=True, slots=True)
class PromptOutcome:
    """One prompt's end: exit code (0 or 1), the run (partial on failure, None when nothing ran),
    the failure line, the model the loop ran on and the routing decision (None when not routed)."""

    code: int
    result: AgentResult | None
    failure: str | None
    model: str
    route: RouteChoice | None


def run_options(
    config: Config,
    *,
    system: str | None,
    no_tools: bool,
    allow_tools: Sequence[str] | None,
    json_output: bool,
    stream: bool | None,
    stdout: TextIO,
    sandbox: SandboxPolicy | None = None,
    today: datetime.date | None = None,
    server_of: Callable[[str], str | None] | None = None,
) -> RunOptions:
    """The options of a run: the system prompt (`--system`, else the default one for `sandbox`,
    by default the policy of `config` alone, plus `[agent] system_append`), the tools, and whether
    to stream (`stream` None: when stdout is read live; never with `--json`). `server_of` names the
    server of a tool (for the tool search's ranking)."""
    if sandbox is None:
        from omega_mcp.sandbox.policy import SandboxPolicy

        sandbox = SandboxPolicy.from_settings(config.sandbox, config.place)
    prompt = system_prompt(system, append=config.agent.system_append, policy=sandbox, tools=not no_tools, today=today)
    allowed = () if no_tools else (tuple(allow_tools) if allow_tools is not None else None)
    streaming = not json_output and (streams_live(stdout) if stream is None else stream)
    search = None
    if not no_tools and config.agent.tool_search != "off":
        search = AgentToolSearch(config.agent.tool_search, config.hub.always_visible, server_of)
    return RunOptions(
        system=prompt, allowed_tools=allowed, stream=streaming, json_output=json_output, tool_search=search
    )


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
    stream: bool | None = None,
    sandbox: SandboxPolicy | None = None,
    session: SessionHook | None = None,
    server_of: Callable[[str], str | None] | None = None,
) -> int:
    """Run `omega-mcp agent` and return its exit code (0 ok, 1 failure, 2 configuration error).

    `stream` None streams when stdout is read live (`output.streams_live`); `sandbox` is the
    policy the tools run under, for the default system prompt. `session`, when given, runs the
    prompts instead of the one `prompt` (a saved or resumed session, an interactive conversation:
    `omega_mcp.agent.terminal`) with a runner for one prompt after a history, and returns the code.
    """
    printer = Printer(stdout, stderr, stream=False)
    try:
        settings = resolve_settings(
            config, provider=provider, model=model, base_url=base_url, max_turns=max_turns, environ=environ
        )
    except ConfigError as exc:
        printer.note(str(exc))
        return 2
    options = run_options(
        config,
        system=system,
        no_tools=no_tools,
        allow_tools=allow_tools,
        json_output=json_output,
        stream=stream,
        stdout=stdout,
        sandbox=sandbox,
        server_of=server_of,
    )
    llm = create_provider(
        settings.provider,
        api_key=settings.api_key,
        base_url=settings.base_url,
        client=http_client,
        anthropic_version=settings.anthropic_version,
        max_tokens=settings.max_tokens,
    )
    try:
        if options.allowed_tools:
            await _warn_unmatched(options.allowed_tools, tools, printer)

        async def run_one(text: str, history: Sequence[Message] = ()) -> PromptOutcome:
            return await run_prompt(
                text,
                provider=llm,
                tools=tools,
                settings=settings,
                options=options,
                stdout=stdout,
                stderr=stderr,
                history=history,
            )

        if session is not None:
            return await session(run_one, settings)
        outcome = await run_one(prompt)
    finally:
        with anyio.CancelScope(shield=True):
            await llm.aclose()
    return outcome.code


async def run_prompt(
    prompt: str,
    *,
    provider: Provider,
    tools: ToolHost,
    settings: AgentSettings,
    options: RunOptions,
    stdout: TextIO,
    stderr: TextIO,
    history: Sequence[Message] = (),
) -> PromptOutcome:
    """Run one prompt (after `history`): route, loop, print the answer or the JSON, the warnings,
    the usage line and the failure line. Never raises for a provider or loop failure: that is
    `code` 1 with `failure` set."""
    started = time.monotonic()
    printer = Printer(stdout, stderr, stream=options.stream)
    route: RouteChoice | None = None
    model = settings.model
    result: AgentResult | None = None
    try:
        if settings.route is not None:
            route = await choose_model(provider, settings.route, prompt)
            model = route.model
            printer.note(route.describe())
        result = await run_agent(
            prompt,
            provider=StreamedTurns(provider, printer) if options.stream else provider,
            tools=tools,
            model=model,
            max_turns=settings.max_turns,
            allowed_tools=options.allowed_tools,
            system=options.system,
            on_event=printer.event,
            history=history,
            on_text=printer.text if options.stream else None,
            tool_search=options.tool_search,
        )
    except MaxTurnsExceededError as exc:
        failure = str(exc)
        result = exc.result if isinstance(exc.result, AgentResult) else None
    except ProviderAuthError as exc:
        hint = f" (check {settings.api_key_env})" if settings.api_key_env else ""
        failure = f"{exc}{hint}"
        result = partial_result(exc)
    except ProviderError as exc:
        failure = str(exc)
        result = partial_result(exc)
    except Exception as exc:  # the CLI boundary: one line, never a traceback
        failure = f"internal error: {type(exc).__name__}: {exc}"
    else:
        result = _with_usage(result, route.usage if route else Usage())
        _warn_about_answer(result, printer)
        if options.json_output:
            json_line(stdout, _json(result, model, route))
        else:
            printer.answer(result.output)
        printer.note(_usage_line(result, time.monotonic() - started))
        return PromptOutcome(0, result, None, model, route)
    extra = route.usage if route else Usage()
    result = _with_usage(result, extra) if result is not None else None
    if result is not None and (result.turns or result.usage != Usage()):
        printer.note(_usage_line(result, time.monotonic() - started))
    elif result is None and extra != Usage():
        printer.note(usage_line(0, extra, time.monotonic() - started))
    printer.note(failure)
    if options.json_output:
        data: dict[str, Any] = (
            _json(result, model, route)
            if result
            else {"output": None, "model": model, "route": route.to_json() if route else None}
        )
        if not data["output"]:
            data["output"] = None
        data["error"] = failure
        json_line(stdout, data)
    return PromptOutcome(1, result, failure, model, route)


def _usage_line(result: AgentResult, seconds: float) -> str:
    return usage_line(result.turns, result.usage, seconds, per_turn=result.turn_usage, tools=result.tools)


def _with_usage(result: AgentResult, extra: Usage) -> AgentResult:
    """`result` with the classification request's tokens counted in (it is not a turn)."""
    return result if extra == Usage() else dataclasses.replace(result, usage=extra + result.usage)


def _json(result: AgentResult, model: str, route: RouteChoice | None) -> dict[str, Any]:
    return {**result.to_json(), "model": model, "route": route.to_json() if route else None}


def _warn_about_answer(result: AgentResult, printer: Printer) -> None:
    if result.finish_reason in _CUT_OFF:
        printer.note(f"warning: the answer was cut off at the output token limit{_why(result)}")
    elif not result.output.strip():
        printer.note(f"warning: the model returned an empty answer{_why(result)}")
    elif result.finish_reason not in _NORMAL_STOP:  # a safety filter or refusal cut the answer short
        printer.note(f"warning: the model stopped early{_why(result)}")


def _why(result: AgentResult) -> str:
    return f" (finish reason: {result.finish_reason})" if result.finish_reason else ""


async def _warn_unmatched(globs: Sequence[str], tools: ToolHost, printer: Printer) -> None:
    """A typo in --allow-tool would silently leave the model without the tool it needs."""
    names = [tool.name for tool in await tools.list_tools()]
    for glob in globs:
        if not any(fnmatch.fnmatchcase(name, glob) for name in names):
            shown = ", ".join(names[:_LISTED]) + (", ..." if len(names) > _LISTED else "")
            printer.note(f"warning: --allow-tool {glob!r} matches no tool (available: {shown})")
