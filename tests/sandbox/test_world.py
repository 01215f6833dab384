"""Each session's private /tmp: made on first use, mapped for the file tools, removed with the session."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.world import Worlds, ensure_private_tmp, host_path


def _policy(tmp_path: Path, mode: str = "sandbox") -> SandboxPolicy:
    return SandboxPolicy(mode=mode, home=tmp_path / "home", workspace=tmp_path / "ws", tmp_dir=Path("/tmp"))  # type: ignore[arg-type]


def test_each_owner_has_its_own_tmp_made_on_first_use_and_removed_with_its_session(tmp_path: Path) -> None:
    worlds = Worlds(_policy(tmp_path))
    alice, bob = object(), object()
    a, b = worlds.policy_for(alice), worlds.policy_for(bob)
    assert a.private_tmp is not None and b.private_tmp is not None and a.private_tmp != b.private_tmp
    assert worlds.policy_for(alice) is a and worlds.known(alice) is a
    assert not a.private_tmp.exists()  # nothing written until someone uses it
    ensure_private_tmp(a)
    (a.private_tmp / "sub").mkdir()
    (a.private_tmp / "sub").chmod(0)  # what a command may leave behind
    assert a.private_tmp.stat().st_mode & 0o777 == 0o700
    worlds.close(alice)
    assert not a.private_tmp.exists() and worlds.known(alice) is None


def test_release_hands_back_only_a_tmp_that_was_made_and_forgets_the_session(tmp_path: Path) -> None:
    worlds = Worlds(_policy(tmp_path))
    if not worlds.private:
        pytest.skip("no private /tmp on this machine (bash gets no PID namespace)")
    idle, busy, stranger = object(), object(), object()
    unused, used = worlds.policy_for(idle), worlds.policy_for(busy)
    ensure_private_tmp(used)
    assert worlds.release(idle) is None  # never made: nothing to remove, so no worker thread for it
    assert worlds.release(busy) == used.private_tmp and used.private_tmp is not None
    assert used.private_tmp.exists()  # the caller removes it, off the event loop
    assert worlds.known(idle) is None and worlds.known(busy) is None
    assert worlds.release(stranger) is None and unused.private_tmp is not None and not unused.private_tmp.exists()


def test_the_file_tools_see_tmp_in_the_callers_private_tmp(tmp_path: Path) -> None:
    policy = Worlds(_policy(tmp_path)).policy_for(None)
    assert policy.private_tmp is not None
    assert host_path(policy, Path("/tmp/x/y")) == policy.private_tmp / "x" / "y"
    assert host_path(policy, Path("/etc/hosts")) == Path("/etc/hosts")
    inside = tmp_path / "ws" / "f"  # a write root below /tmp (pytest's tmp_path) stays where it is
    assert host_path(policy, inside) == inside
    assert Worlds(_policy(tmp_path, "rwx")).policy_for(None).private_tmp is None  # rwx shares the host's


def test_the_directories_of_a_dead_omega_are_removed_at_the_next_start(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    root = tmp_path / "home" / "clients" / "@hub" / "tmp"
    (root / f"{dead.stdout.strip()}-abc").mkdir(parents=True)
    (root / f"{os.getpid()}-mine").mkdir()
    Worlds(_policy(tmp_path)).fresh()
    assert sorted(p.name for p in root.iterdir()) == [f"{os.getpid()}-mine"]


def test_a_fresh_policy_is_what_replacing_its_private_tmp_gives(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    base = SandboxPolicy(
        mode="sandbox",
        home=tmp_path / "home",
        workspace=tmp_path / "ws",
        tmp_dir=Path("/tmp"),
        write_roots=(tmp_path / "link",),
    )
    directory = tmp_path / "home" / "tmp" / "1-abc"
    fresh = base.with_private_tmp(directory)
    replaced = dataclasses.replace(base, private_tmp=directory)
    assert fresh == replaced and dict(fresh.pinned_roots) == dict(replaced.pinned_roots)
    assert fresh.pinned_roots[tmp_path / "link"] == tmp_path / "real"
    assert base.private_tmp is None and base.pinned_roots[Path("/tmp")] == Path(os.path.realpath("/tmp"))
