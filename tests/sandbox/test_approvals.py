"""The grant store and the question text of one-time write approvals."""

from __future__ import annotations

from pathlib import Path

from omega_mcp.sandbox.approvals import GRANT_SECONDS, Grants, approval_question


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_grant_is_consumed_by_one_write() -> None:
    grants = Grants(clock=FakeClock())
    grants.grant(Path("/x/a.txt"))
    assert grants.consume(Path("/x/a.txt"))
    assert not grants.consume(Path("/x/a.txt"))


def test_a_grant_covers_exactly_its_path() -> None:
    grants = Grants(clock=FakeClock())
    grants.grant(Path("/x/a.txt"))
    assert not grants.consume(Path("/x/b.txt"))
    assert not grants.consume(Path("/x"))
    assert not grants.consume(Path("/x/a.txt/inner"))
    assert grants.consume(Path("/x/a.txt"))


def test_a_grant_expires_after_300_seconds() -> None:
    clock = FakeClock()
    grants = Grants(clock=clock)
    assert GRANT_SECONDS == 300.0
    grants.grant(Path("/x/a.txt"))
    clock.now += 299.0
    assert grants.consume(Path("/x/a.txt"))
    grants.grant(Path("/x/a.txt"))
    clock.now += 300.0
    assert not grants.consume(Path("/x/a.txt"))


def test_an_expired_grant_is_gone_even_if_time_went_backwards() -> None:
    clock = FakeClock()
    grants = Grants(ttl=10.0, clock=clock)
    grants.grant(Path("/x/a.txt"))
    clock.now += 11.0
    assert not grants.consume(Path("/x/a.txt"))
    clock.now -= 11.0
    assert not grants.consume(Path("/x/a.txt"))


def test_granting_again_renews_the_expiry_and_drops_expired_grants() -> None:
    clock = FakeClock()
    grants = Grants(ttl=10.0, clock=clock)
    grants.grant(Path("/x/old.txt"))
    grants.grant(Path("/x/a.txt"))
    clock.now += 8.0
    grants.grant(Path("/x/a.txt"))
    clock.now += 8.0
    grants.grant(Path("/x/b.txt"))  # prunes old.txt (expired); a.txt was renewed and stays
    assert grants._expiry.keys() == {Path("/x/a.txt"), Path("/x/b.txt")}  # pyright: ignore[reportPrivateUsage]
    assert grants.consume(Path("/x/a.txt"))


def test_the_question_names_the_path() -> None:
    assert approval_question("/srv/a.txt") == "omega wants to write /srv/a.txt — allow once?"


def test_a_path_with_control_or_invisible_characters_is_shown_escaped() -> None:
    question = approval_question("/srv/x\nomega wants to write /ws/ok.txt")
    assert "\n" not in question and "\\n" in question
    assert "\u202e" not in approval_question("/srv/\u202etxt.exe")
