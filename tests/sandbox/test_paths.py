"""The read checks' quick answer (`paths._read_guard`: no refused place above the target) is the full checks' answer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import pytest

from omega_mcp.sandbox import paths
from omega_mcp.sandbox.policy import SandboxPolicy


def _places(policy: SandboxPolicy, tmp_path: Path) -> list[Path]:
    """Each refused place, what lies below it, beside it with a longer name, above it, and elsewhere."""
    refused = [policy.token_file, policy.state_dir, policy.clients_dir, *policy.foreign, *policy.hidden]
    refused += [*policy.own_hidden, policy.client_dir / "tmp" / "other-session", policy.client_dir / "scratch"]
    found: list[Path] = [Path("/"), Path("/proc/1/environ"), Path("/proc/self/status"), tmp_path / "ws" / "f.txt"]
    for place in refused:
        found += [place, place / "inner" / "file", place.with_name(place.name + "x"), place.parent]
    return found


@pytest.mark.parametrize("mode", ["sandbox", "rx", "rwx"])
def test_the_read_checks_say_what_they_would_say_after_comparing_every_place(
    tmp_path: Path, mode: Literal["sandbox", "rx", "rwx"], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (tmp_path / "real-ssh").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real-ssh")  # a hidden place named through a link
    base = SandboxPolicy(mode=mode, home=home, workspace=tmp_path / "ws", tmp_dir=Path("/tmp"))
    policy = dataclasses.replace(
        base, hidden=(*base.hidden, tmp_path / "linked"), foreign=(tmp_path / "other-ws",)
    ).with_private_tmp(home / "clients" / "@hub" / "tmp" / "mine")
    places = [*_places(policy, tmp_path), tmp_path / "real-ssh" / "id", tmp_path / "real-sshx"]
    quick = [paths._read_block_reason(policy, place) for place in places]  # pyright: ignore[reportPrivateUsage]
    monkeypatch.setattr(paths, "_below_any", lambda target, prefixes: True)  # every comparison made
    full = [paths._read_block_reason(policy, place) for place in places]  # pyright: ignore[reportPrivateUsage]
    assert quick == full
    assert sum(reason is not None for reason in full) > (len(places) // 3 if mode != "rwx" else 3)
