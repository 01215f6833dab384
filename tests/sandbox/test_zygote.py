"""The bash zygote: one launcher per omega, a session per private world, fail closed when it dies.

Commands run through the Toolbox (as a client's calls do) or `launch_support`. The zygote, its
keepers and session processes are found from `zygote_client.launcher_pid()` through /proc (their
parent pids); survivors of a command by a unique `sleep` argument (`bash_processes.py`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

import launch_support
from bash_processes import Markers, assert_gone, wait_running
from omega_mcp.calling import CallContext
from omega_mcp.errors import ToolError
from omega_mcp.sandbox import probe, zygote_client
from omega_mcp.sandbox.launch import bash_launch
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox
from unprivileged_support import scenario
from waits import deadline

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not probe.support().pid_namespace,
    reason="the zygote runs bash where it gets namespaces (Linux with user namespaces)",
)


@pytest.fixture
def markers() -> Iterator[Markers]:
    made = Markers()
    yield made
    made.kill_leftovers()


@pytest.fixture
def policy(tmp_path: Path) -> SandboxPolicy:
    for name in ("home", "ws", "outside"):
        (tmp_path / name).mkdir()
    return SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=tmp_path / "ws", tmp_dir=Path("/tmp"))


@pytest.fixture
async def box(policy: SandboxPolicy) -> AsyncIterator[Toolbox]:
    async with Toolbox(policy) as toolbox:
        yield toolbox


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def _bash(box: Toolbox, command: str, **more: Any) -> types.CallToolResult:
    with deadline(30):
        return await box.call_tool("bash", {"command": command, **more})


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def _launcher() -> int:
    pid = zygote_client.launcher_pid()
    assert pid is not None, "no zygote runs"
    return pid


def _session_processes() -> list[int]:
    """Each session process (a keeper's child; keepers are the zygote's children)."""
    return [session for keeper in _children(_launcher()) for session in _children(keeper)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


async def _gone(*pids: int) -> None:
    with anyio.move_on_after(5):
        while any(_alive(pid) for pid in pids):  # noqa: ASYNC110 - nothing signals another process's death
            await anyio.sleep(0.02)
    assert not [pid for pid in pids if _alive(pid)], f"still running: {pids}"


# -- what a command sees ---------------------------------------------------------------------------


async def test_bash_runs_through_the_zygote_with_every_layer(box: Toolbox, policy: SandboxPolicy) -> None:
    result = await _bash(box, "echo $$; id -u; ls -A /dev/shm | wc -l; touch /etc/omega-zygote; echo rc=$?")
    lines = _text(result).splitlines()
    assert lines[0] == "2"  # PID 2 of a PID namespace of its own
    assert lines[1] == (str(os.getuid()) if os.getuid() else "1000")  # root is an unprivileged uid inside
    assert lines[2] == "0"  # a /dev/shm of its own
    assert "rc=1" in lines[-1]  # Landlock: /etc is read-only
    assert zygote_client.launcher_pid() is not None


async def test_the_commands_of_one_session_share_its_tmp_and_loopback(box: Toolbox, markers: Markers) -> None:
    code = "import http.server as h; h.HTTPServer(('127.0.0.1', 8765), h.SimpleHTTPRequestHandler).serve_forever()"
    started = await _bash(
        box, f"echo kept > /tmp/omega-zygote-note; {sys.executable} -c {code!r}", run_in_background=True
    )
    assert not started.is_error, _text(started)
    fetch = (
        f'{sys.executable} -c "import time, urllib.request as u\n'
        "for _ in range(100):\n"
        "    try: print(u.urlopen('http://127.0.0.1:8765/', timeout=1).status); break\n"
        '    except OSError: time.sleep(0.05)"; cat /tmp/omega-zygote-note'
    )
    assert _text(await _bash(box, fetch)).split() == ["200", "kept"]


async def test_another_session_sees_neither_the_tmp_nor_the_loopback_of_one(box: Toolbox) -> None:
    await _bash(box, "echo mine > /tmp/omega-zygote-private", owner=None)
    other = object()
    result = await box.call_tool(
        "bash", {"command": "cat /tmp/omega-zygote-private; echo rc=$?"}, CallContext(owner=other)
    )
    assert "mine" not in _text(result)
    assert "rc=1" in _text(result)
    await box.end_session(other)


# -- one launcher, sessions prepared once ----------------------------------------------------------


async def test_a_session_is_prepared_once_and_ends_with_its_client(box: Toolbox) -> None:
    owner = object()
    await _bash(box, "true")  # the launcher runs (started in the background, or by this call)
    before = set(_session_processes())
    await box.call_tool("bash", {"command": "true"}, CallContext(owner=owner))
    mine = set(_session_processes()) - before
    assert len(mine) == 1, mine
    await box.call_tool("bash", {"command": "true"}, CallContext(owner=owner))
    assert set(_session_processes()) - before == mine  # the second call reused the session
    await box.end_session(owner)
    await _gone(*mine)


async def test_a_secret_that_appears_after_the_sessions_first_call_is_hidden_from_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    home = Path(tempfile.mkdtemp(prefix="omega-zygote-home-", dir="/var/tmp"))  # not under bash's private /tmp
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    monkeypatch.setenv("HOME", str(home))
    for name in ("home", "ws"):
        (tmp_path / name).mkdir()
    policy = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=tmp_path / "ws", tmp_dir=Path("/tmp"))
    assert home / ".ssh" in policy.hidden
    async with Toolbox(policy) as box:
        assert "No such file" in _text(await _bash(box, f"cat {home}/.ssh/id_rsa 2>&1"))
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_rsa").write_text("SECRET\n")
        assert "SECRET" not in _text(await _bash(box, f"cat {home}/.ssh/id_rsa 2>&1"))
        # Renamed away and made again: the new directory is covered too, not only the one the session saw.
        (home / ".ssh").rename(home / ".ssh-old")
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_rsa").write_text("NEW-SECRET\n")
        out = _text(await _bash(box, f"cat {home}/.ssh/id_rsa {home}/.ssh-old/id_rsa 2>&1"))
        assert "NEW-SECRET" not in out, out
        assert "SECRET" in out  # ~/.ssh-old is no hidden path: the session's cover did not follow it there


async def test_a_workspace_made_again_is_writable_in_the_next_call(box: Toolbox, policy: SandboxPolicy) -> None:
    assert _text(await _bash(box, "echo one > f && cat f")) == "one\n"
    os.rename(policy.workspace, policy.workspace.with_name("ws-old"))
    policy.workspace.mkdir()
    assert _text(await _bash(box, "echo two > f && cat f")) == "two\n"
    assert (policy.workspace / "f").read_text() == "two\n"


async def test_sessions_beyond_the_cap_are_closed_oldest_first(box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote_client, "MAX_SESSIONS", 2)
    owners = [object() for _ in range(3)]
    await _bash(box, "true")  # the launcher runs
    before = set(_session_processes())
    await box.call_tool("bash", {"command": "true"}, CallContext(owner=owners[0]))
    oldest = set(_session_processes()) - before
    for owner in owners[1:]:
        await box.call_tool("bash", {"command": "true"}, CallContext(owner=owner))
    await _gone(*oldest)
    result = await box.call_tool("bash", {"command": "echo again"}, CallContext(owner=owners[0]))
    assert _text(result) == "again\n"  # a closed session is simply prepared again
    for owner in owners:
        await box.end_session(owner)


# -- fail closed -----------------------------------------------------------------------------------


async def test_a_killed_zygote_is_replaced_and_the_next_call_is_confined_as_before(box: Toolbox) -> None:
    assert _text(await _bash(box, "echo before > /tmp/omega-zygote-kept; echo $$")) == "2\n"
    old = _launcher()
    sessions = _session_processes()
    os.kill(old, signal.SIGKILL)
    await _gone(old, *sessions)  # its keepers and sessions die with it
    result = await _bash(box, "cat /tmp/omega-zygote-kept; echo $$; touch /etc/omega-zygote; echo rc=$?")
    assert not result.is_error, _text(result)
    lines = _text(result).splitlines()
    assert lines[:2] == ["before", "2"]  # the same private /tmp (on disk), a PID namespace of its own
    assert "rc=1" in lines[-1]  # still confined
    assert _launcher() != old


async def test_a_command_running_when_the_zygote_dies_is_killed_with_all_it_started(
    box: Toolbox, markers: Markers
) -> None:
    marker, child = markers(), markers()
    results: list[types.CallToolResult] = []
    async with anyio.create_task_group() as tasks:

        async def run() -> None:
            results.append(await _bash(box, f"setsid sleep {child} & sleep {marker}"))

        tasks.start_soon(run)
        await wait_running(marker)
        await wait_running(child)
        os.kill(_launcher(), signal.SIGKILL)
    await assert_gone(marker, child)
    text = _text(results[0])
    assert results[0].is_error
    assert "killed by signal 9" in text and "sandbox launcher died" in text, text
    assert _text(await _bash(box, "echo next")) == "next\n"


async def test_a_killed_session_process_is_replaced_on_the_next_call(box: Toolbox) -> None:
    owner = object()
    await box.call_tool("bash", {"command": "true"}, CallContext(owner=owner))
    for session in _session_processes():
        os.kill(session, signal.SIGKILL)
    result = await box.call_tool("bash", {"command": "echo $$"}, CallContext(owner=owner))
    assert (result.is_error, _text(result)) == (False, "2\n")
    await box.end_session(owner)


async def test_a_session_that_does_not_answer_fails_the_call_runs_nothing_and_is_replaced(
    box: Toolbox, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = object()
    before = set(_session_processes()) if zygote_client.launcher_pid() else set[int]()
    await box.call_tool("bash", {"command": "true"}, CallContext(owner=owner))
    (stuck,) = set(_session_processes()) - before
    monkeypatch.setattr(zygote_client, "START_SECONDS", 0.5)
    proof = policy.workspace / "ran"
    os.kill(stuck, signal.SIGSTOP)
    try:
        with deadline(10):
            result = await box.call_tool("bash", {"command": f"touch {proof}"}, CallContext(owner=owner))
    finally:
        os.kill(stuck, signal.SIGCONT)
    assert result.is_error
    assert "did not start the command within 0.5 s" in _text(result) and "did not run" in _text(result), _text(result)
    await _gone(stuck)  # resumed, it finds the request abandoned and its socket closed: it ends
    assert not proof.exists()
    monkeypatch.undo()
    again = await box.call_tool("bash", {"command": "echo $$"}, CallContext(owner=owner))
    assert (again.is_error, _text(again)) == (False, "2\n")  # a new session
    await box.end_session(owner)


async def test_no_launcher_means_no_bash_never_bash_without_it(
    box: Toolbox, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _bash(box, "true")
    monkeypatch.setattr(zygote_client, "_BOOTSTRAP", "raise SystemExit(3)")  # a launcher that cannot start
    launcher = _launcher()
    tree = [launcher, *_children(launcher), *_session_processes()]
    os.kill(launcher, signal.SIGKILL)
    # No launcher at all from here on (a call racing the kill may still reach a dying session, start
    # there and die with it: that command is reported killed, never run unconfined; another test).
    await _gone(*tree)
    proof = policy.workspace / "ran"
    result = await _bash(box, f"touch {proof}")
    assert result.is_error
    assert "sandbox launcher" in _text(result) and "did not run" in _text(result), _text(result)
    assert not proof.exists()
    monkeypatch.undo()
    assert _text(await _bash(box, "echo back")) == "back\n"


async def test_a_session_that_cannot_be_set_up_runs_nothing(policy: SandboxPolicy, tmp_path: Path) -> None:
    launch = bash_launch(policy, f"touch {tmp_path / 'ran'}")
    broken = replace(launch, options=(*launch.options, "--pin", "/nonexistent/../etc", "--bogus", "x"))
    with deadline(30), pytest.raises(ToolError, match="omega-mcp sandbox: unknown option '--bogus'"):
        await zygote_client.start(broken)
    assert not (tmp_path / "ran").exists()


async def test_the_zygote_refuses_a_session_without_namespaces(policy: SandboxPolicy, tmp_path: Path) -> None:
    launch = bash_launch(policy, f"touch {tmp_path / 'ran'}")
    options = list(launch.options)
    options.remove("--pidns")
    with deadline(30), pytest.raises(ToolError, match="--pidns"):
        await zygote_client.start(replace(launch, options=tuple(options)))
    assert not (tmp_path / "ran").exists()


async def test_a_write_root_that_is_a_symbolic_link_is_not_granted_by_the_zygote(
    policy: SandboxPolicy, tmp_path: Path
) -> None:
    real = tmp_path / "outside" / "real"
    real.mkdir()
    link = tmp_path / "ws" / "link"
    link.symlink_to(real)
    policy = replace(policy, tmp_dir=tmp_path / "tmp")  # the link lies in no root bound under /tmp
    launch = bash_launch(policy, f"echo pwned > {link}/f; echo rc=$?")
    options = list(launch.options)
    options[options.index("--landlock") :] = [*options[options.index("--landlock") :], "--rw", str(link)]
    process = await zygote_client.start(replace(launch, options=tuple(options)))
    try:
        with deadline(30):
            out = b"".join([chunk async for chunk in process.stdout])
            await process.wait()
    finally:
        await process.aclose()
    assert not (real / "f").exists(), out
    assert b"no longer the directory omega started with" in out


async def test_a_cancelled_launch_leaves_nothing_running(
    policy: SandboxPolicy, markers: Markers, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = markers()
    started = zygote_client.started

    async def late(channel: Any) -> tuple[int, int]:
        await wait_running(marker)  # the command runs, its pid waits unread on the channel
        scope.cancel()
        await anyio.sleep(5)
        return await started(channel)

    monkeypatch.setattr(zygote_client, "started", late)
    with anyio.CancelScope() as scope:
        await zygote_client.start(bash_launch(policy, f"sleep {marker}"))
    assert scope.cancelled_caught
    await assert_gone(marker)


# -- lifetime ----------------------------------------------------------------------------------------

_OMEGA = """
import sys, anyio
from pathlib import Path
from omega_mcp.sandbox import zygote_client
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox

async def main():
    place = Path(sys.argv[1])
    policy = SandboxPolicy(mode="sandbox", home=place / "home", workspace=place / "ws", tmp_dir=Path("/tmp"))
    async with Toolbox(policy) as box:
        result = await box.call_tool("bash", {"command": sys.argv[2], "run_in_background": True})
        assert not result.is_error, result
        print(zygote_client.launcher_pid(), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)

anyio.run(main)
"""


async def test_the_zygote_and_every_command_die_with_a_killed_omega(tmp_path: Path, markers: Markers) -> None:
    marker = markers()
    for name in ("home", "ws"):
        (tmp_path / name).mkdir()
    argv = [sys.executable, "-c", _OMEGA, str(tmp_path), f"setsid sleep {marker} & sleep {markers()}"]
    async with await anyio.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as omega:
        assert omega.stdout is not None
        with deadline(30):
            line = b""
            while not line.endswith(b"\n"):
                line += await omega.stdout.receive(1)
        launcher = int(line)
        await wait_running(marker)
        keepers = _children(launcher)
        omega.kill()
        await omega.wait()
    await _gone(launcher, *keepers)
    await assert_gone(marker)


def test_an_unprivileged_user_gets_a_new_zygote_after_killing_one() -> None:
    program = textwrap.dedent(
        """
        import signal
        from omega_mcp.sandbox import zygote_client

        async def main():
            async with Toolbox(policy()) as box:
                first = await call(box, "bash", {"command": "echo $$; id -u"})
                old = zygote_client.launcher_pid()
                os.kill(old, signal.SIGKILL)
                # Once it is gone: a call racing the kill may start in the dying one and fail closed (the
                # test_a_command_running_when_the_zygote_dies_... case), which is not this test.
                with anyio.fail_after(10):
                    while zygote_client.launcher_pid() == old:
                        await anyio.sleep(0.01)
                second = await call(box, "bash", {"command": "echo $$; touch /etc/omega-x; echo rc=$?"})
                print(json.dumps({"first": first, "second": second, "old": old, "new": zygote_client.launcher_pid()}))

        anyio.run(main)
        """
    )
    with scenario() as attack:
        found = attack.run(program)
    assert found["first"]["text"].split() == ["2", str(attack.uid)]
    assert not found["second"]["error"], found
    assert found["second"]["text"].splitlines()[0] == "2"
    assert "rc=1" in found["second"]["text"]
    assert found["new"] != found["old"]


async def test_launch_support_runs_through_the_zygote(policy: SandboxPolicy) -> None:
    before = zygote_client.launcher_pid()
    code, out = await launch_support.run_async(policy, "echo $$; exit 3")
    assert (code, out) == (3, "2\n")
    assert zygote_client.launcher_pid() is not None
    assert before in (None, zygote_client.launcher_pid())
