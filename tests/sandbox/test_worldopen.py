"""omega opens a world's files for `read` and `edit` itself, from its root, where the worker's answer is the same.

A request to the worker is the wake-up of another process: a read of a plain file makes none once
the worker has given omega its world's root, an edit only the one that replaces the file. What
only the worker can answer (a FIFO, /dev/null, a link, its own /proc, a missing file) still goes to
it, with the same answers; root's omega opens only what the world's processes, which hold no
capability, may; and the world's mounts stay as they are after the worker ends.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from omega_mcp.builtin.read import read_file
from omega_mcp.builtin.schemas import EditArgs, ReadArgs
from omega_mcp.builtin.write import edit_file
from omega_mcp.errors import ToolError
from omega_mcp.sandbox import fileworker_client, probe, worldopen
from omega_mcp.sandbox.fileworker_client import FileWorker
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.world import Worlds
from waits import deadline

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or not probe.support().pid_namespace or not worldopen.usable(),
        reason="needs user namespaces and openat2",
    ),
]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """The kind of every request omega sends a file worker (the worker itself is real)."""
    kinds: list[bytes] = []
    real = FileWorker._ask  # pyright: ignore[reportPrivateUsage]

    def counting(self: FileWorker, fields: list[bytes], *rest: Any, **named: Any) -> tuple[list[bytes], list[int]]:
        kinds.append(fields[0])
        return real(self, fields, *rest, **named)

    monkeypatch.setattr(FileWorker, "_ask", counting)
    yield kinds


def _text(result: object) -> str:
    return "".join(getattr(block, "text", "") for block in getattr(result, "content", []))


async def _outcome(policy: SandboxPolicy, name: str) -> tuple[bool, str]:
    try:
        result = await read_file(policy, ReadArgs(file_path=name))
    except ToolError as exc:
        return True, str(exc)
    return bool(result.is_error), _text(result)


def _world(tmp_path: Path) -> tuple[Worlds, object, SandboxPolicy, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    worlds = Worlds(SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=workspace, tmp_dir=Path("/tmp")))
    owner = object()
    return worlds, owner, worlds.policy_for(owner), workspace


async def test_a_read_of_a_plain_file_asks_the_worker_nothing_once_omega_has_the_worlds_root(
    tmp_path: Path, asked: list[bytes]
) -> None:
    worlds, owner, policy, workspace = _world(tmp_path)
    (workspace / "f.txt").write_text("plain\n")
    (workspace / "link.txt").symlink_to(workspace / "f.txt")
    try:
        for name in ("f.txt", "f.txt", "link.txt", str(workspace / "f.txt")):
            assert await _outcome(policy, name) == (False, "     1\tplain")
    finally:
        await anyio.to_thread.run_sync(worlds.close, owner)
    assert asked == [b"root"]


async def test_an_edit_asks_the_worker_only_to_replace_the_file(tmp_path: Path, asked: list[bytes]) -> None:
    worlds, owner, policy, workspace = _world(tmp_path)
    (workspace / "e.txt").write_text("alpha beta\n")
    try:
        for old, new in (("beta", "gamma"), ("gamma", "delta")):
            result = await edit_file(policy, EditArgs(file_path="e.txt", old_string=old, new_string=new))
            assert not result.is_error, _text(result)
    finally:
        await anyio.to_thread.run_sync(worlds.close, owner)
    assert (workspace / "e.txt").read_text() == "alpha delta\n"
    assert asked == [b"root", b"replace", b"replace"]


async def test_what_only_the_worker_can_answer_still_goes_to_it_with_the_same_answers(
    tmp_path: Path, asked: list[bytes]
) -> None:
    worlds, owner, policy, workspace = _world(tmp_path)
    os.mkfifo(workspace / "pipe")
    (workspace / "target.txt").write_text("target\n")
    (workspace / "link").symlink_to("target.txt")
    try:
        names = ("pipe", "/dev/null", "missing.txt", "/proc/self/status")
        found = {name: await _outcome(policy, name) for name in names}
        opened = asked.count(b"open")
        with pytest.raises(ToolError, match=r"it is a symbolic link to target\.txt; edit does not follow links"):
            await edit_file(policy, EditArgs(file_path="link", old_string="target", new_string="x"))
    finally:
        await anyio.to_thread.run_sync(worlds.close, owner)
    assert found["pipe"][0] and "is a FIFO" in found["pipe"][1]
    assert found["/dev/null"] == (False, "(file is empty: /dev/null exists but has no content)")
    assert found["missing.txt"][0] and "file does not exist" in found["missing.txt"][1]
    status = found["/proc/self/status"]
    pid = re.search(r"\tPid:\t(\d+)", status[1])
    assert not status[0] and pid is not None and int(pid.group(1)) != os.getpid(), status  # the worker's own
    assert opened == 4 and b"leaf" in asked
    assert (workspace / "target.txt").read_text() == "target\n"


def _capabilities() -> str:
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return line.split()[1]
    return ""


@pytest.mark.skipif(os.geteuid() != 0, reason="root's omega holds capabilities the world's processes lack")
async def test_roots_omega_opens_only_what_the_worlds_processes_may_and_keeps_its_capabilities(tmp_path: Path) -> None:
    worlds, owner, policy, workspace = _world(tmp_path)
    secret = workspace / "theirs.txt"
    secret.write_text("NOT-FOR-ROOTS-BASH\n")
    os.chown(secret, 65534, 65534)
    secret.chmod(0o600)
    (workspace / "mine.txt").write_text("mine\n")

    def in_one_thread(worker: FileWorker) -> tuple[str, list[bytes | None], str]:
        before = _capabilities()
        root = worker.world_root()
        assert root is not None
        got: list[bytes | None] = []
        for path in (secret, workspace / "mine.txt"):
            fd = root.open_readable(os.fsencode(path))
            got.append(None if fd is None else os.read(fd, 100))
            if fd is not None:
                os.close(fd)
        return before, got, _capabilities()

    try:
        assert await _outcome(policy, "mine.txt") == (False, "     1\tmine")  # starts the worker
        worker = fileworker_client.started(policy)
        assert worker is not None
        before, got, after = await anyio.to_thread.run_sync(in_one_thread, worker)
        refused = await _outcome(policy, "theirs.txt")  # then asked of the worker, which refuses too
    finally:
        await anyio.to_thread.run_sync(worlds.close, owner)
    assert got == [None, b"mine\n"]
    assert refused[0] and "refused access" in refused[1] and "NOT-FOR" not in refused[1], refused
    assert before == after and int(before, 16) != 0


def _in_hosts_tmp(text: str) -> Path:
    host = Path(f"/tmp/omega-host-{os.urandom(6).hex()}")
    host.write_text(text)
    return host


async def test_the_worlds_mounts_stay_for_omega_after_its_worker_ends(tmp_path: Path) -> None:
    worlds, owner, policy, workspace = _world(tmp_path)
    (workspace / "f.txt").write_text("x\n")
    assert policy.private_tmp is not None
    host = _in_hosts_tmp("the host's /tmp\n")
    try:
        assert not (await _outcome(policy, "f.txt"))[0]
        worker = fileworker_client.running(policy.private_tmp)
        assert worker is not None
        root = await anyio.to_thread.run_sync(worker.world_root)
        assert root is not None
        assert await anyio.to_thread.run_sync(root.open_readable, os.fsencode(host)) is None  # the world's /tmp
        policy.private_tmp.joinpath(host.name).write_text("the session's /tmp\n")
        worker.process.kill()
        with deadline(10):
            await worker.process.wait()
        fd = await anyio.to_thread.run_sync(root.open_readable, os.fsencode(host))
        assert fd is not None
        try:
            assert os.read(fd, 100) == b"the session's /tmp\n"
        finally:
            os.close(fd)
    finally:
        os.unlink(host)
        await anyio.to_thread.run_sync(worlds.close, owner)
