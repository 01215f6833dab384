"""The file tools' worker: one per session with a sandbox world, restarted when it dies, gone with the session."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import anyio
import pytest

from omega_mcp.builtin.read import read_file
from omega_mcp.builtin.schemas import ReadArgs
from omega_mcp.errors import ToolError
from omega_mcp.sandbox import fileworker_client, probe
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.world import Worlds
from waits import deadline

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or not probe.support().pid_namespace, reason="needs user namespaces"
    ),
]


def _text(result: object) -> str:
    return "".join(getattr(block, "text", "") for block in getattr(result, "content", []))


async def _gone(pid: int) -> None:
    with deadline(10):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await anyio.sleep(0.01)  # bounded polling: the zygote's session process reaps it


async def test_a_worker_that_dies_is_replaced_and_the_worker_ends_with_its_session(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "f.txt").write_text("in the world\n")
    worlds = Worlds(SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=workspace, tmp_dir=Path("/tmp")))
    owner = object()
    policy = worlds.policy_for(owner)
    assert policy.private_tmp is not None
    try:
        first = await read_file(policy, ReadArgs(file_path="f.txt"))
        assert "in the world" in _text(first) and not first.is_error
        worker = fileworker_client.running(policy.private_tmp)
        assert worker is not None
        worker.process.kill()
        with deadline(10):
            await worker.process.wait()
        again = await read_file(policy, ReadArgs(file_path="f.txt"))
        assert "in the world" in _text(again) and not again.is_error
        replaced = fileworker_client.running(policy.private_tmp)
        assert replaced is not None and replaced is not worker
        pid = replaced.process.pid
    finally:
        await anyio.to_thread.run_sync(worlds.close, owner)
    assert fileworker_client.running(policy.private_tmp) is None
    await _gone(pid)


async def test_without_a_sandbox_world_there_is_no_worker(tmp_path: Path) -> None:
    for policy in (
        SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=tmp_path, tmp_dir=Path("/tmp")),
        SandboxPolicy(mode="rwx", home=tmp_path / "home", workspace=tmp_path, tmp_dir=Path("/tmp")).with_private_tmp(
            tmp_path / "t"
        ),
    ):
        assert await fileworker_client.worker_for(policy) is None


async def _outcome(policy: SandboxPolicy, name: str) -> tuple[bool, str]:
    """(is an error, its text): read_file raises a tool failure, which the Toolbox turns into a result."""
    try:
        result = await read_file(policy, ReadArgs(file_path=name))
    except ToolError as exc:
        return True, str(exc)
    return bool(result.is_error), _text(result)


async def test_in_a_world_read_names_what_is_not_a_regular_file_and_what_is_missing_or_hidden(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.mkfifo(workspace / "pipe")
    (workspace / "empty.txt").write_text("")
    secret = tmp_path / "secret"
    secret.write_text("TOP-SECRET\n")
    base = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=workspace, tmp_dir=Path("/tmp"))
    worlds = Worlds(dataclasses.replace(base, hidden=(secret,)))
    owner = object()
    policy = worlds.policy_for(owner)
    try:
        found = {
            name: await _outcome(policy, name)
            for name in ("pipe", str(workspace), "missing.txt", "/dev/null", "empty.txt", str(secret))
        }
        assert fileworker_client.running(policy.private_tmp or Path("/nonexistent")) is not None
    finally:
        await anyio.to_thread.run_sync(worlds.close, owner)
    assert found["pipe"][0] and "is a FIFO" in found["pipe"][1]
    assert found[str(workspace)][0] and "is a directory" in found[str(workspace)][1]
    assert found["missing.txt"][0] and "file does not exist" in found["missing.txt"][1]
    assert not found["/dev/null"][0] and "file is empty" in found["/dev/null"][1]
    assert not found["empty.txt"][0] and "file is empty" in found["empty.txt"][1]
    assert found[str(secret)][0] and "hidden" in found[str(secret)][1]
    assert "TOP-SECRET" not in found[str(secret)][1]


async def test_workers_beyond_the_limit_are_stopped_and_started_again_on_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fileworker_client, "MAX_WORKERS", 1)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "f.txt").write_text("shared\n")
    worlds = Worlds(SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=workspace, tmp_dir=Path("/tmp")))
    first, second = object(), object()
    one, two = worlds.policy_for(first), worlds.policy_for(second)
    assert one.private_tmp is not None and two.private_tmp is not None
    try:
        assert "shared" in (await _outcome(one, "f.txt"))[1]
        evicted = fileworker_client.running(one.private_tmp)
        assert evicted is not None
        assert "shared" in (await _outcome(two, "f.txt"))[1]
        assert fileworker_client.running(one.private_tmp) is None  # stopped: one worker at most
        await _gone(evicted.process.pid)
        assert "shared" in (await _outcome(one, "f.txt"))[1]
        assert fileworker_client.running(two.private_tmp) is None
    finally:
        await anyio.to_thread.run_sync(worlds.close, first)
        await anyio.to_thread.run_sync(worlds.close, second)


def _parent(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


def _mine(pid: int) -> bool:
    """Whether `pid` descends from this test process (other tests of the run start workers too)."""
    while pid > 1:
        if pid == os.getpid():
            return True
        pid = _parent(pid)
    return False


def _workers_running() -> set[int]:
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"fileworker" in (entry / "cmdline").read_bytes() and _mine(int(entry.name)):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


async def test_session_less_reads_share_one_world_instead_of_starting_a_worker_each(tmp_path: Path) -> None:
    from omega_mcp.builtin.shells import NO_SESSION
    from omega_mcp.calling import CallContext
    from omega_mcp.toolbox import Toolbox

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "f.txt").write_text("stateless\n")
    policy = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=workspace, tmp_dir=Path("/tmp"))
    before = _workers_running()
    async with Toolbox(policy) as box:
        for _ in range(3):  # as three 2026-era HTTP requests, which have no session
            result = await box.call_tool("read", {"file_path": "f.txt"}, CallContext(owner=NO_SESSION))
            assert "stateless" in _text(result) and not result.is_error
            listed = await box.call_tool("read", {"file_path": "/tmp"}, CallContext(owner=NO_SESSION))
            assert listed.is_error  # /tmp is a directory here, and an empty world's at that
        started = _workers_running() - before
    # One live worker: the reads share one world (a world per read discards each worker after its call).
    assert len(started) == 1, f"{len(started)} file workers for three session-less reads"


async def test_the_worker_gets_the_protected_names_read_only_also_one_made_after_it_started(tmp_path: Path) -> None:
    """As each bash command does (`tracker.py`): omega's own checks refuse protected names before the
    worker is asked; the kernel must refuse them to the worker as well, whenever the name appeared."""
    from omega_mcp.builtin.schemas import WriteArgs
    from omega_mcp.builtin.write import write_file
    from omega_mcp.sandbox.tracker import ProtectedTree

    workspace = tmp_path / "ws"
    workspace.mkdir()
    worlds = Worlds(SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=workspace, tmp_dir=Path("/tmp")))
    owner = object()
    policy = worlds.policy_for(owner)
    assert policy.private_tmp is not None
    tree = ProtectedTree([workspace], policy.protected_names, policy.quarantine_dir)
    try:
        first = await write_file(policy, WriteArgs(file_path="ok.txt", content="one"), tree=tree)
        assert not first.is_error, _text(first)
        assert fileworker_client.running(policy.private_tmp) is not None
        (workspace / ".mcp.json").write_text("{}")  # the user's, made after the worker started
        again = await write_file(policy, WriteArgs(file_path="ok.txt", content="two"), tree=tree)
        assert not again.is_error and (workspace / "ok.txt").read_text() == "two", _text(again)
        worker = fileworker_client.running(policy.private_tmp)
        assert worker is not None

        def plant() -> None:
            worker.replace(workspace / ".mcp.json", workspace, b'{"mcpServers": {}}', create=False, expect=None)

        with pytest.raises(OSError):  # past omega's checks: the world itself refuses (a read-only bind)
            await anyio.to_thread.run_sync(plant)
        assert (workspace / ".mcp.json").read_text() == "{}"
        assert sorted(p.name for p in workspace.iterdir()) == [".mcp.json", "ok.txt"]  # no temp file left
    finally:
        tree.close()
        await anyio.to_thread.run_sync(worlds.close, owner)


def test_the_worker_runs_on_the_base_interpreter_where_omegas_own_is_below_the_sessions_tmp(tmp_path: Path) -> None:
    """A venv made with copies under /tmp has its own binary there, which the world's private /tmp
    covers (tests/test_install.py runs the real layout); a venv's link elsewhere resolves as before."""
    own = os.path.realpath(sys.executable)
    base = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    home, ws = tmp_path / "home", tmp_path / "ws"
    covered = SandboxPolicy(mode="sandbox", home=home, workspace=ws, tmp_dir=Path(own).parent)
    assert fileworker_client.interpreter(covered) == base
    elsewhere = SandboxPolicy(mode="sandbox", home=home, workspace=ws, tmp_dir=tmp_path / "tmp")
    assert fileworker_client.interpreter(elsewhere) == own
