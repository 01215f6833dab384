"""The path checks' quick answer (`paths._guard`: no refused place above the target) is the full checks' answer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import pytest

from omega_mcp.sandbox import paths
from omega_mcp.sandbox.policy import SYSTEM_DIRS, SandboxPolicy


def _places(policy: SandboxPolicy, tmp_path: Path) -> list[Path]:
    """Each refused place, what lies below it, beside it with a longer name, above it, and elsewhere."""
    refused = [policy.token_file, policy.state_dir, policy.clients_dir, *policy.foreign, *policy.hidden]
    refused += [*policy.own_hidden, *policy.protected_paths, *SYSTEM_DIRS, policy.private_tmp_root]
    refused += [policy.client_dir / "tmp" / "other-session", policy.client_dir / "scratch"]
    found = [Path("/"), Path("/proc/1/environ"), Path("/proc/self/status"), Path("/dev/null")]
    found += [tmp_path / "ws" / "f.txt", tmp_path / "ws" / ".git" / "hooks" / "x", tmp_path / "ws" / ".mcp.json"]
    found += [tmp_path / "real-ssh" / "id", tmp_path / "real-sshx"]
    for place in refused:
        found += [place, place / "inner" / "file", place.with_name(place.name + "x"), place.parent]
    return found


@pytest.mark.parametrize("mode", ["sandbox", "rx", "rwx"])
def test_the_path_checks_say_what_they_would_say_after_comparing_every_place(
    tmp_path: Path, mode: Literal["sandbox", "rx", "rwx"], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (tmp_path / "real-ssh").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real-ssh")  # a hidden place named through a link
    base = SandboxPolicy(mode=mode, home=home, workspace=tmp_path / "ws", tmp_dir=Path("/tmp"))
    policy = dataclasses.replace(
        base, hidden=(*base.hidden, tmp_path / "linked"), foreign=(tmp_path / "other-ws",)
    ).with_private_tmp(home / "clients" / "@hub" / "tmp" / "mine")
    places = _places(policy, tmp_path)
    checks = (
        paths._read_block_reason,  # pyright: ignore[reportPrivateUsage]
        paths._write_block_reason,  # pyright: ignore[reportPrivateUsage]
        paths._hidden_write_reason,  # pyright: ignore[reportPrivateUsage]
    )
    quick = [[check(policy, place) for place in places] for check in checks]
    monkeypatch.setattr(paths, "_below_any", lambda target, prefixes: True)  # every comparison made
    full = [[check(policy, place) for place in places] for check in checks]
    for check, fast, slow in zip(checks, quick, full, strict=True):
        assert fast == slow, check.__name__
    refused = [sum(reason is not None for reason in answers) for answers in full]
    assert refused[0] >= 10 and refused[1] > 50 and (refused[2] > 0) == (mode != "rwx"), refused  # each check refuses
