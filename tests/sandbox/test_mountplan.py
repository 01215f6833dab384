"""`sandbox/mountplan.py`'s `hiding`: what bash's world covers and pins, planned again for every command.

Where a hidden path lies against the write roots is kept per set of roots once the path exists (the
plan is made for every bash command); these check that what changes between two plans still shows.
"""

from __future__ import annotations

from pathlib import Path

from omega_mcp.sandbox.mountplan import hiding
from omega_mcp.sandbox.policy import SandboxPolicy


def _policy(tmp_path: Path, hidden: tuple[Path, ...]) -> SandboxPolicy:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=ws, tmp_dir=tmp_path / "tmp", hidden=hidden)


def test_a_secret_that_appears_inside_a_write_root_after_a_plan_is_covered_and_pinned_by_the_next(tmp_path: Path):
    secret = tmp_path / "ws" / "deep" / "er" / ".env.secret"
    policy = _policy(tmp_path, (secret,))
    roots = (policy.workspace,)
    first, first_pins = hiding(policy, roots, [])
    assert secret not in first and not first_pins
    secret.parent.mkdir(parents=True)
    secret.write_text("TOKEN=1\n")
    covered, pins = hiding(policy, roots, [])
    assert secret in covered
    assert {p for _, p in pins} == {secret.parent.parent, secret.parent}  # the directories between root and secret
    secret.unlink()
    assert secret not in hiding(policy, roots, [])[0]  # gone again: nothing to cover


def test_a_secret_that_holds_a_write_root_is_not_covered_and_says_so_every_time(tmp_path: Path):
    policy = _policy(tmp_path, (tmp_path,))
    for _ in range(2):
        warnings: list[str] = []
        covered, _ = hiding(policy, (policy.workspace,), warnings)
        assert tmp_path not in covered
        assert any(f"{tmp_path} is not hidden from bash: it holds a write root" in w for w in warnings)


def test_the_same_secret_is_placed_against_each_set_of_roots_on_its_own(tmp_path: Path):
    secret = tmp_path / "other" / "key"
    secret.parent.mkdir()
    secret.write_text("k")
    policy = _policy(tmp_path, (secret,))
    outside, no_pins = hiding(policy, (policy.workspace,), [])
    assert secret in outside and not no_pins
    inside, pins = hiding(policy, (policy.workspace, tmp_path / "other"), [])
    assert secret in inside and not pins  # directly in a root: no directory between to pin
    warnings: list[str] = []
    held, _ = hiding(policy, (secret,), warnings)
    assert secret not in held and warnings
