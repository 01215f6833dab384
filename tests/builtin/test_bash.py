"""The bash tool with real subprocesses: output, exit status, timeouts, tree kill, truncation, memory."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from mcp import types

from bash_processes import Markers, assert_gone, pids_with_arg, started_sleep, wait_running
from omega_mcp.builtin import bash_process
from omega_mcp.builtin.bash import run_bash
from omega_mcp.builtin.output import OutputBuffer
from omega_mcp.builtin.schemas import BashArgs
from omega_mcp.builtin.shells import ShellRegistry
from omega_mcp.errors import ToolError
from omega_mcp.sandbox import probe
from omega_mcp.sandbox.child.exec import LINGER_SECONDS
from omega_mcp.sandbox.launch import BashLaunch
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline


@pytest.fixture(params=["sandbox", "rwx"])
def policy(request: pytest.FixtureRequest, tmp_path: Path) -> SandboxPolicy:
    """The default mode (Landlock) and rwx: bash runs through the sandbox trampoline in both."""
    return SandboxPolicy(mode=request.param, home=tmp_path / "home", workspace=tmp_path / "ws")


# Leftovers of a command that has exited die by themselves LINGER_SECONDS after it (the
# trampoline's PID 1 gives up); the call drains their output for DRAIN_SECONDS first. Checking
# sooner than that deadline after the call returns shows the call killed them, not the deadline.
_KILLED_BY_THE_CALL_SECONDS = LINGER_SECONDS - bash_process.DRAIN_SECONDS - 0.5


@pytest.fixture
async def shells() -> AsyncIterator[ShellRegistry]:
    async with ShellRegistry() as registry:
        yield registry


@pytest.fixture
def markers() -> Iterator[Markers]:
    made = Markers()
    yield made
    made.kill_leftovers()


def _text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def _bash(policy: SandboxPolicy, shells: ShellRegistry, command: str, **kw: object) -> types.CallToolResult:
    with deadline(30):
        return await run_bash(policy, BashArgs.model_validate({"command": command, **kw}), shells)


async def test_echo_returns_its_output(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "echo hello")
    assert _text(result) == "hello\n"
    assert not result.is_error


async def test_stdout_and_stderr_are_combined_in_order(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "echo a; echo b >&2; echo c")
    assert _text(result) == "a\nb\nc\n"


async def test_cwd_is_the_workspace_and_it_is_created(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    assert not policy.workspace.exists()
    result = await _bash(policy, shells, "pwd; echo data > created.txt")
    assert _text(result) == f"{policy.workspace}\n"
    assert (policy.workspace / "created.txt").read_text() == "data\n"


async def test_stdin_is_empty(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "cat; echo done")
    assert _text(result) == "done\n"


async def test_non_zero_exit_is_an_error_with_the_code(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "exit 3")
    assert result.is_error
    assert _text(result) == "exit code 3"


async def test_output_then_failure_appends_the_exit_code(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "echo oops; exit 2")
    assert result.is_error
    assert _text(result) == "oops\nexit code 2"


async def test_silent_success_says_exit_code_0(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "true")
    assert not result.is_error
    assert _text(result) == "exit code 0"


async def test_death_by_signal_is_named(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "kill -KILL $$")
    assert result.is_error
    assert "killed by signal 9" in _text(result)


async def test_timeout_keeps_partial_output_and_kills_the_group(
    policy: SandboxPolicy, shells: ShellRegistry, markers: Markers
) -> None:
    marker = markers()
    command = f"echo start; {started_sleep(marker)}; wait"
    result = await _bash(policy, shells, command, timeout=2)
    text = _text(result)
    assert result.is_error
    assert text.startswith("start\nstarted\n")
    assert "timed out after 2 s" in text
    # The command string is an argument of bash, the namespace's PID 1 and its supervisor.
    await assert_gone(marker, command)


async def test_background_child_does_not_hang_the_call_and_is_killed(
    policy: SandboxPolicy, shells: ShellRegistry, markers: Markers
) -> None:
    marker = markers()
    command = f"{started_sleep(marker)}; echo parent done"
    with deadline(6):
        result = await _bash(policy, shells, command)
    text = _text(result)
    assert not result.is_error
    assert text.startswith("started\nparent done\n")
    assert "run_in_background" in text
    await assert_gone(marker, command, bound=_KILLED_BY_THE_CALL_SECONDS)


async def test_detached_output_less_child_is_killed_too(
    policy: SandboxPolicy, shells: ShellRegistry, markers: Markers
) -> None:
    marker = markers()
    command = started_sleep(marker, redirect=" >/dev/null 2>&1")
    result = await _bash(policy, shells, command)
    text = _text(result)
    assert text.startswith("started\n")
    assert "terminated" in text
    await assert_gone(marker, command, bound=_KILLED_BY_THE_CALL_SECONDS)


async def test_a_later_call_can_neither_see_nor_kill_an_earlier_commands_process(
    policy: SandboxPolicy, shells: ShellRegistry, markers: Markers
) -> None:
    support = probe.support()
    if not (support.pid_namespace and support.mount_proc):
        pytest.skip("no PID namespace with a private /proc here: commands see each other's processes")
    marker, own = markers(), markers()
    await _bash(policy, shells, f"sleep {marker}", run_in_background=True)
    await wait_running(marker)
    [host_pid] = pids_with_arg(marker)

    def pattern(value: str) -> str:
        return value.replace(".", "[.]")  # so the calling bash's own argv does not match

    command = (
        f"sleep {own} & seen=1; for i in $(seq 200); do pgrep -f '{pattern(own)}' >/dev/null && "
        "{ seen=0; break; }; sleep 0.05; done; echo own=$seen; kill $!; "
        f"pgrep -f '{pattern(marker)}'; echo pgrep=$?; pkill -KILL -f '{pattern(marker)}'; echo pkill=$?; "
        f"kill -KILL {host_pid} 2>/dev/null; echo kill=$?"
    )
    result = await _bash(policy, shells, command)
    # pgrep works (it finds the call's own sleep) but the earlier command's sleep is out of reach.
    assert _text(result) == "own=0\npgrep=1\npkill=1\nkill=1\n"
    assert pids_with_arg(marker) == [host_pid]


async def test_long_output_is_cut_in_the_middle_with_the_total(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    total = sum(len(str(i)) + 1 for i in range(1, 20001))
    result = await _bash(policy, shells, "seq 1 20000")
    text = _text(result)
    assert not result.is_error
    assert f"output truncated: {total} characters total" in text
    assert text.startswith("1\n2\n3\n")
    assert text.endswith("19999\n20000\n")
    assert len(text) < 30_200


async def test_output_at_the_limit_is_not_truncated(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, "head -c 30000 /dev/zero | tr '\\0' x")
    assert _text(result) == "x" * 30_000


async def test_huge_output_uses_bounded_memory(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    tracemalloc.start()
    try:
        result = await _bash(policy, shells, "yes | head -c 60000000")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "output truncated: 60000000 characters total" in _text(result)
    assert peak < 20 * 1024 * 1024  # a third of the output: it was streamed, not held


async def test_invalid_utf8_is_replaced(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, r"printf 'a\377b\n'")
    assert _text(result) == "a\ufffdb\n"


async def test_ansi_escapes_and_progress_lines_are_cleaned(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    result = await _bash(policy, shells, r"printf '\033[31mred\033[0m\r\n10%%\r50%%\r100%%\nend\n'")
    assert _text(result) == "red\n100%\nend\n"


async def test_huge_command_runs_through_a_file(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    command = ":\n" * (200 * 1024 // 2) + "echo huge ok"
    result = await _bash(policy, shells, command)
    assert _text(result) == "huge ok\n"
    # The command file's directory is removed; only the cache dir of the sandbox modes stays.
    assert {p.name for p in policy.scratch_dir.iterdir()} <= {"cache"}


async def test_huge_command_keeps_its_exit_status(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    command = "# padding\n" * 20_000 + "echo last; exit 4"
    result = await _bash(policy, shells, command)
    assert result.is_error
    assert _text(result) == "last\nexit code 4"


async def test_nul_in_command_is_a_clear_error(policy: SandboxPolicy, shells: ShellRegistry) -> None:
    with pytest.raises(ToolError, match="NUL"):
        await _bash(policy, shells, "echo a\x00b")


async def test_cancellation_kills_the_tree(policy: SandboxPolicy, shells: ShellRegistry, markers: Markers) -> None:
    marker = markers()
    command = f"sleep {marker} & wait"
    async with anyio.create_task_group() as tg:
        tg.start_soon(_bash, policy, shells, command)
        await wait_running(marker)
        assert pids_with_arg(command), "bash (and the trampoline) hold the command as an argument"
        tg.cancel_scope.cancel()
    await assert_gone(marker, command)


async def test_huge_command_is_sourced_when_the_launch_argv_has_another_shape(
    policy: SandboxPolicy, shells: ShellRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    def wrapped_launch(policy: SandboxPolicy, command: str, protected: object = ()) -> BashLaunch:
        # A wrapper shape: the command is not the last argv element.
        return BashLaunch(("/bin/bash", "-c", command, "omega"), {"PATH": "/usr/bin:/bin"}, policy.workspace)

    monkeypatch.setattr(bash_process, "bash_launch", wrapped_launch)
    command = "# padding\n" * 20_000 + 'echo "sourced as $0"'
    result = await _bash(policy, shells, command)
    assert _text(result) == "sourced as omega\n"


def test_escape_split_across_reads_is_stripped_whole() -> None:
    buffer = OutputBuffer()
    for chunk in (b"\x1b[3", b"1mred\x1b", b"[0m \xe2\x82", b"\xac\n"):
        buffer.feed(chunk)
    buffer.close()
    assert buffer.take() == "red \u20ac\n"


def test_carriage_return_rewrite_spans_reads() -> None:
    buffer = OutputBuffer()
    for chunk in (b"10%\r", b"20%", b"\r100%", b"\r\n", b"done\n"):
        buffer.feed(chunk)
    buffer.close()
    assert buffer.take() == "100%\ndone\n"


@pytest.mark.parametrize(
    ("timeout", "why"),
    [
        (float("nan"), "finite number"),
        (float("inf"), "finite number"),
        ("NaN", "valid number"),
        ("inf", "valid number"),
    ],
)
def test_a_non_finite_timeout_is_refused(timeout: object, why: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=why):  # a string is no number at all (strict arguments)
        BashArgs.model_validate({"command": "true", "timeout": timeout})
