"""Background shells with real subprocesses: start, incremental output, kill, shutdown, errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from mcp import types

from bash_processes import Markers, assert_gone, pids_with_arg, wait_running
from omega_mcp.builtin.bash import run_bash
from omega_mcp.builtin.schemas import BashArgs, BashOutputArgs, KillShellArgs
from omega_mcp.builtin.shells import NO_SESSION, ShellRegistry, bash_output, kill_shell
from omega_mcp.errors import ToolError
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline


@pytest.fixture(params=["sandbox", "rwx"])
def policy(request: pytest.FixtureRequest, tmp_path: Path) -> SandboxPolicy:
    """The default mode (Landlock) and rwx: bash runs through the sandbox trampoline in both."""
    return SandboxPolicy(mode=request.param, home=tmp_path / "home", workspace=tmp_path / "ws")


@pytest.fixture
def markers() -> Iterator[Markers]:
    made = Markers()
    yield made
    made.kill_leftovers()


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def _start(shells: ShellRegistry, policy: SandboxPolicy, command: str) -> str:
    with deadline(10):
        result = await run_bash(policy, BashArgs(command=command, run_in_background=True), shells)
    text = _text(result)
    assert not result.is_error
    shell_id = text.split()[3].rstrip(".")
    assert "bash_output" in text and "kill_shell" in text
    return shell_id


async def _poll_until_finished(shells: ShellRegistry, shell_id: str) -> list[str]:
    texts: list[str] = []
    with deadline(10):
        while True:
            text = _text(await bash_output(shells, BashOutputArgs(shell_id=shell_id)))
            texts.append(text)
            if not text.endswith("[running]"):
                return texts
            await anyio.sleep(0.05)


async def test_background_shell_returns_an_id_at_once_and_streams_new_output(policy: SandboxPolicy) -> None:
    async with ShellRegistry() as shells:
        shell_id = await _start(shells, policy, "for i in 1 2 3; do echo $i; sleep 0.2; done")
        assert re.fullmatch(r"shell_[0-9a-f]{12}", shell_id), shell_id  # not a counter: ids cannot be guessed
        texts = await _poll_until_finished(shells, shell_id)
        assert texts[0].endswith("[running]")
        assert texts[-1].endswith("[exited with code 0]")
        output = "".join(t.rsplit("[", 1)[0].replace("(no new output)\n", "") for t in texts)
        assert output == "1\n2\n3\n"
        again = await bash_output(shells, BashOutputArgs(shell_id=shell_id))
        assert _text(again) == "(no new output)\n[exited with code 0]"
        assert not again.is_error


async def test_failed_background_shell_reports_its_exit_code_as_error(policy: SandboxPolicy) -> None:
    async with ShellRegistry() as shells:
        shell_id = await _start(shells, policy, "echo bad; exit 5")
        texts = await _poll_until_finished(shells, shell_id)
        assert texts[-1].endswith("[exited with code 5]")
        result = await bash_output(shells, BashOutputArgs(shell_id=shell_id))
        assert result.is_error


async def test_kill_shell_kills_the_process_group(policy: SandboxPolicy, markers: Markers) -> None:
    marker = markers()
    command = f"sleep {marker} & wait"
    async with ShellRegistry() as shells:
        shell_id = await _start(shells, policy, command)
        await wait_running(marker)
        assert pids_with_arg(command), "bash (and the trampoline) hold the command as an argument"
        with deadline(10):
            result = await kill_shell(shells, KillShellArgs(shell_id=shell_id))
        assert not result.is_error
        assert "killed" in _text(result)
        await assert_gone(marker, command)
        status = await bash_output(shells, BashOutputArgs(shell_id=shell_id))
        assert _text(status).endswith("[killed by kill_shell]")


async def test_registry_exit_kills_every_shell(policy: SandboxPolicy, markers: Markers) -> None:
    commands: list[str] = []
    with deadline(20):
        async with ShellRegistry() as shells:
            for _ in range(3):
                marker = markers()
                commands += [marker, f"sleep {marker} & wait"]
                await _start(shells, policy, commands[-1])
                await wait_running(marker)
    await assert_gone(*commands)


async def test_background_shell_timeout_kills_it(policy: SandboxPolicy, markers: Markers) -> None:
    marker = markers()
    command = f"sleep {marker} & wait"
    async with ShellRegistry() as shells:
        with deadline(10):
            result = await run_bash(policy, BashArgs(command=command, run_in_background=True, timeout=2), shells)
        shell_id = _text(result).split()[3].rstrip(".")
        await wait_running(marker)
        texts = await _poll_until_finished(shells, shell_id)
        assert "timed out after 2 s" in texts[-1]
        await assert_gone(marker, command)


async def test_unknown_shell_id_lists_the_known_ones(policy: SandboxPolicy) -> None:
    async with ShellRegistry() as shells:
        with pytest.raises(ToolError, match="no background shells"):
            await bash_output(shells, BashOutputArgs(shell_id="shell_9"))
        shell_id = await _start(shells, policy, "true")
        with pytest.raises(ToolError, match=f"Known shells: {shell_id}"):
            await kill_shell(shells, KillShellArgs(shell_id="nope"))


async def test_an_owner_sees_only_its_own_shells_and_ending_it_kills_them(
    policy: SandboxPolicy, markers: Markers
) -> None:
    alice, bob = object(), object()
    marker = markers()
    async with ShellRegistry() as shells:
        with deadline(10):
            result = await run_bash(
                policy,
                BashArgs(command=f"echo alice-secret; sleep {marker}", run_in_background=True),
                shells,
                owner=alice,
            )
        shell_id = _text(result).split()[3].rstrip(".")
        await wait_running(marker)
        mine = await run_bash(policy, BashArgs(command="true", run_in_background=True), shells, owner=bob)
        bobs_id = _text(mine).split()[3].rstrip(".")
        for peek in (
            bash_output(shells, BashOutputArgs(shell_id=shell_id), owner=bob),
            kill_shell(shells, KillShellArgs(shell_id=shell_id), owner=bob),
        ):
            with pytest.raises(ToolError, match=f"Unknown shell id '{shell_id}'. Known shells: {bobs_id} ") as error:
                await peek
            assert "alice" not in str(error.value)
        with pytest.raises(ToolError, match="no background shells"):  # nor does the process itself see it
            await shells.output(shell_id)
        assert "alice-secret" in _text(await shells.output(shell_id, owner=alice))  # untouched by bob's kill
        await shells.close_owner(alice)
        await assert_gone(marker)
        with pytest.raises(ToolError, match="Unknown shell id"):
            await shells.output(shell_id, owner=alice)
        assert not (await shells.output(bobs_id, owner=bob)).is_error  # bob's shells live on


async def test_a_call_without_a_session_cannot_start_a_background_shell(policy: SandboxPolicy) -> None:
    async with ShellRegistry() as shells:
        with pytest.raises(ToolError, match="need a session"):
            await shells.start(policy, "sleep 1000", owner=NO_SESSION)


async def test_the_cap_is_per_session_and_its_message_names_only_the_callers_shells(policy: SandboxPolicy) -> None:
    async with ShellRegistry(max_running=1) as shells:
        started = await run_bash(policy, BashArgs(command="sleep 1000", run_in_background=True), shells, owner="a")
        a_id = _text(started).split()[3].rstrip(".")
        b_id, _ = await shells.start(policy, "sleep 1000", owner="b")  # a's full slots are not b's
        with pytest.raises(ToolError, match="Too many background shells") as error:
            await shells.start(policy, "sleep 1000", owner="b")
        assert b_id in str(error.value) and a_id not in str(error.value)


async def test_a_shell_is_killed_after_its_lifetime(policy: SandboxPolicy, markers: Markers) -> None:
    marker = markers()
    short = replace(policy, shell_lifetime_seconds=0.5)
    async with ShellRegistry() as shells:
        shell_id = await _start(shells, short, f"sleep {marker}")
        texts = await _poll_until_finished(shells, shell_id)
        assert texts[-1].endswith("[killed after 0.5 s, its [sandbox] shell_lifetime; the process tree was killed]")
        assert (await shells.output(shell_id)).is_error
        await assert_gone(marker)


async def test_running_shells_are_capped(policy: SandboxPolicy) -> None:
    async with ShellRegistry(max_running=2) as shells:
        await _start(shells, policy, "sleep 1000")
        await _start(shells, policy, "sleep 1000")
        with pytest.raises(ToolError, match="Too many background shells"):
            await _start(shells, policy, "sleep 1000")


async def test_failed_start_is_a_clear_error_and_not_registered(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    policy = SandboxPolicy(mode="rwx", home=tmp_path / "home", workspace=tmp_path / "file" / "ws")
    async with ShellRegistry() as shells:
        with pytest.raises(ToolError, match="workspace"):
            await shells.start(policy, "true")
        with pytest.raises(ToolError, match="no background shells"):
            await shells.output("shell_1")


async def test_start_outside_the_registry_is_an_error(policy: SandboxPolicy) -> None:
    with pytest.raises(ToolError, match="not running"):
        await ShellRegistry().start(policy, "true")
