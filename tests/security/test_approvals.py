"""`on_denied = "ask"`: a write outside the roots asks the user (MCP elicitation) and is allowed once.

Driven through the MCP server with the SDK's in-process client. A denied case asserts `denied` and
that nothing changed on disk; the blocklist and symlink tricks must never be approvable. The grant
store and the question text (`sandbox/approvals.py`) are checked on their own at the end.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Literal

import anyio
import mcp
import pytest
from mcp import types
from mcp.client.session import ClientRequestContext

from omega_mcp.sandbox import beneath, paths
from omega_mcp.sandbox.approvals import GRANT_SECONDS, Grants, approval_question
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server import approver
from omega_mcp.server.server import build_server
from omega_mcp.toolbox import Toolbox
from waits import deadline

Answer = Literal["accept", "decline", "cancel"]


class Asker:
    """An elicitation callback: records each question, runs `before` (a race), then answers."""

    def __init__(self, answer: Answer = "accept", before: Callable[[], None] | None = None) -> None:
        self.answer: Answer = answer
        self.before = before
        self.questions: list[str] = []

    async def __call__(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        if self.before is not None:
            self.before()
        return types.ElicitResult(action=self.answer)


@pytest.fixture
def ask_policy(policy: SandboxPolicy) -> SandboxPolicy:
    return replace(policy, on_denied="ask")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    return d


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2":
        if not beneath.have_openat2():
            pytest.skip("openat2 is not available here")
        monkeypatch.setattr(beneath, "_openat2_usable", True)
    else:
        monkeypatch.setattr(beneath, "_openat2_usable", False)
    return str(request.param)


@asynccontextmanager
async def _session(
    policy: SandboxPolicy,
    asker: Asker | None,
    *,
    mode: str = "legacy",
    fast_path: bool = True,
    grants: Grants | None = None,
) -> AsyncGenerator[mcp.Client]:
    async with Toolbox(policy) as box:
        if grants is not None:
            box.grants = grants
        server = build_server(box)
        if not fast_path:
            server.middleware = []  # handshake-era tools/call then reaches the SDK handler
        async with mcp.Client(server, mode=mode, elicitation_callback=asker) as client:
            yield client


def _tree(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return out


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def _denied(client: mcp.Client, file_path: Path | str, *, watch: Path, content: str = "pwned") -> str:
    before = _tree(watch)
    result = await client.call_tool("write", {"file_path": str(file_path), "content": content})
    assert result.is_error
    text = _text(result)
    assert text.startswith("denied:")
    assert _tree(watch) == before
    return text


# ---------------------------------------------------------------- the question and its answers


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-handler"])
async def test_an_approved_write_outside_the_roots_is_written_and_says_so(
    ask_policy: SandboxPolicy, outside: Path, fast_path: bool
) -> None:
    asker = Asker("accept")
    async with _session(ask_policy, asker, fast_path=fast_path) as client:
        result = await client.call_tool("write", {"file_path": str(outside / "new" / "a.txt"), "content": "hello"})
    assert not result.is_error, _text(result)
    assert "approved by the user" in _text(result)
    assert asker.questions == [f"omega wants to write {outside / 'new' / 'a.txt'} — allow once?"]
    assert (outside / "new" / "a.txt").read_text() == "hello"


async def test_an_approved_edit_outside_the_roots_is_applied(ask_policy: SandboxPolicy, outside: Path) -> None:
    (outside / "a.txt").write_text("alpha beta\n")
    asker = Asker("accept")
    async with _session(ask_policy, asker) as client:
        result = await client.call_tool(
            "edit", {"file_path": str(outside / "a.txt"), "old_string": "beta", "new_string": "gamma"}
        )
    assert not result.is_error, _text(result)
    assert "approved by the user" in _text(result)
    assert len(asker.questions) == 1
    assert (outside / "a.txt").read_text() == "alpha gamma\n"


@pytest.mark.parametrize("answer", ["decline", "cancel"])
async def test_a_declined_write_is_denied_and_nothing_is_written(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path, answer: Answer
) -> None:
    asker = Asker(answer)
    async with _session(ask_policy, asker) as client:
        text = await _denied(client, outside / "a.txt", watch=tmp_path)
        edit = await client.call_tool(
            "edit", {"file_path": str(outside / "a.txt"), "old_string": "x", "new_string": "y"}
        )
    assert "did not approve" in text
    assert edit.is_error and _text(edit).startswith("denied:")
    assert len(asker.questions) == 2


async def test_a_client_without_elicitation_is_denied(ask_policy: SandboxPolicy, tmp_path: Path, outside: Path) -> None:
    async with _session(ask_policy, None) as client:
        await _denied(client, outside / "a.txt", watch=tmp_path)


async def test_a_2026_era_client_is_denied_without_being_asked(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    asker = Asker("accept")
    async with _session(ask_policy, asker, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        await _denied(client, outside / "a.txt", watch=tmp_path)
    assert asker.questions == []


async def test_on_denied_deny_never_asks(policy: SandboxPolicy, tmp_path: Path, outside: Path) -> None:
    assert policy.on_denied == "deny"
    asker = Asker("accept")
    async with _session(policy, asker) as client:
        await _denied(client, outside / "a.txt", watch=tmp_path)
    assert asker.questions == []


async def test_writes_inside_the_roots_never_ask(ask_policy: SandboxPolicy) -> None:
    asker = Asker("decline")
    async with _session(ask_policy, asker) as client:
        result = await client.call_tool("write", {"file_path": "a.txt", "content": "x"})
    assert not result.is_error
    assert asker.questions == []
    assert (ask_policy.workspace / "a.txt").read_text() == "x"


async def test_an_unanswered_question_times_out_as_a_denial(
    ask_policy: SandboxPolicy,
    tmp_path: Path,
    outside: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=approver.__name__)
    monkeypatch.setattr(approver, "ASK_SECONDS", 0.2)
    never = anyio.Event()

    async def silent(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        await never.wait()
        return types.ElicitResult(action="accept")

    async with (
        Toolbox(ask_policy) as box,
        mcp.Client(build_server(box), mode="legacy", elicitation_callback=silent) as c,
    ):
        with deadline(10):
            text = await _denied(c, outside / "a.txt", watch=tmp_path)
        never.set()  # let the client's callback finish; its late answer must change nothing
    assert "did not approve" in text
    assert "timed out" in caplog.text
    assert not (outside / "a.txt").exists()


# ---------------------------------------------------------------- the blocklist is never askable


async def test_blocklisted_paths_are_never_asked_and_stay_denied(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    config = tmp_path / "cfg" / "servers.toml"
    config.parent.mkdir()
    config.write_text("# config\n")
    policy = replace(ask_policy, config_path=config)
    asker = Asker("accept")
    async with _session(policy, asker) as client:
        await _denied(client, config, watch=tmp_path)
        await _denied(client, policy.home / "servers.toml", watch=tmp_path)
        await _denied(client, policy.token_file, watch=tmp_path)
        await _denied(client, policy.state_dir / "x.json", watch=tmp_path)
        await _denied(client, "/etc/omega-approval-test.conf", watch=tmp_path)
        await _denied(client, "/usr/local/omega-approval-test", watch=tmp_path)
    assert asker.questions == []
    assert config.read_text() == "# config\n"
    assert not _exists("/etc/omega-approval-test.conf")


async def test_a_grant_for_a_blocklisted_path_does_not_let_a_write_through(
    ask_policy: SandboxPolicy, tmp_path: Path
) -> None:
    config = tmp_path / "cfg" / "servers.toml"
    config.parent.mkdir()
    policy = replace(ask_policy, config_path=config)
    grants = Grants()
    for path in (config, Path("/etc/omega-approval-test.conf")):
        grants.grant(path)
    async with _session(policy, Asker("accept"), grants=grants) as client:
        await _denied(client, config, watch=tmp_path)
        await _denied(client, "/etc/omega-approval-test.conf", watch=tmp_path)
    assert not config.exists()


@pytest.mark.usefixtures("resolver")
async def test_an_approval_never_reaches_a_protected_directory_through_a_symlink(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    state = ask_policy.state_dir
    state.mkdir()
    (outside / "link").symlink_to(state)
    asker = Asker("accept")
    async with _session(ask_policy, asker) as client:
        text = await _denied(client, outside / "link" / "x.json", watch=tmp_path)
    assert "symbolic link" in text
    assert asker.questions == []
    assert list(state.iterdir()) == []


# ---------------------------------------------------------------- one-time, expiry


async def test_each_approval_allows_one_write_only(ask_policy: SandboxPolicy, outside: Path) -> None:
    asker = Asker("accept")
    target = outside / "a.txt"
    async with _session(ask_policy, asker) as client:
        for content in ("one", "two"):
            result = await client.call_tool("write", {"file_path": str(target), "content": content})
            assert not result.is_error, _text(result)
        asker.answer = "decline"
        await _denied(client, target, watch=outside)
    assert len(asker.questions) == 3  # every write asked: an approval is used up by its write
    assert target.read_text() == "two"


async def test_an_approval_that_expires_before_the_write_is_denied(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    now = [0.0]

    class SlowUser(Grants):
        def grant(self, path: Path) -> None:
            super().grant(path)
            now[0] += 301.0  # granted at answer time; the write then comes 301 s later

    asker = Asker("accept")
    async with _session(ask_policy, asker, grants=SlowUser(clock=lambda: now[0])) as client:
        await _denied(client, outside / "a.txt", watch=tmp_path)
    assert len(asker.questions) == 1


# ---------------------------------------------------------------- symlink races between ask and write


@pytest.mark.usefixtures("resolver")
async def test_a_parent_that_becomes_a_symlink_while_the_user_is_asked_is_not_written_through(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    (outside / "sub").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def swap() -> None:
        (outside / "sub").rename(outside / "sub-moved")
        (outside / "sub").symlink_to(elsewhere)

    asker = Asker("accept", before=swap)
    async with _session(ask_policy, asker) as client:
        result = await client.call_tool("write", {"file_path": str(outside / "sub" / "a.txt"), "content": "pwned"})
    assert result.is_error and _text(result).startswith("denied:")
    assert "symbolic link" in _text(result)
    assert len(asker.questions) == 1
    assert list(elsewhere.iterdir()) == []
    assert list((outside / "sub-moved").iterdir()) == []


def _swap_after_the_check(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> None:
    """Run `swap` on the approved attempt right after its path check, before the directory is opened."""
    original = paths._pick_root  # pyright: ignore[reportPrivateUsage] - the race needs a hook in the write path
    calls = [0]

    def pick_root(policy: SandboxPolicy, path: Path) -> tuple[Path, Path]:
        calls[0] += 1
        try:
            return original(policy, path)
        finally:
            if calls[0] == 2:  # 1: the refused attempt before the question; 2: the approved one
                swap()

    monkeypatch.setattr(paths, "_pick_root", pick_root)


def _link(link: Path, target: Path, kind: str) -> None:
    link.symlink_to(target if kind == "absolute" else os.path.relpath(target, link.parent))


@pytest.mark.parametrize("kind", ["absolute", "relative"])
@pytest.mark.usefixtures("resolver")
async def test_a_parent_swapped_for_a_symlink_after_the_check_is_not_written_through(
    ask_policy: SandboxPolicy,
    tmp_path: Path,
    outside: Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (outside / "sub").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def swap() -> None:
        (outside / "sub").rename(outside / "sub-moved")
        _link(outside / "sub", elsewhere, kind)

    _swap_after_the_check(monkeypatch, swap)
    async with _session(ask_policy, Asker("accept")) as client:
        result = await client.call_tool("write", {"file_path": str(outside / "sub" / "a.txt"), "content": "pwned"})
    assert result.is_error and _text(result).startswith("denied:")
    assert "symbolic link" in _text(result)
    assert list(elsewhere.iterdir()) == []
    assert list((outside / "sub-moved").iterdir()) == []


@pytest.mark.parametrize("kind", ["absolute", "relative"])
@pytest.mark.usefixtures("resolver")
async def test_an_ancestor_swapped_for_a_symlink_after_the_check_is_not_written_through(
    ask_policy: SandboxPolicy,
    tmp_path: Path,
    outside: Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (outside / "a" / "b").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "b").mkdir(parents=True)
    (elsewhere / "b" / "x.txt").write_text("original")

    def swap() -> None:
        (outside / "a").rename(outside / "a-moved")
        _link(outside / "a", elsewhere, kind)

    _swap_after_the_check(monkeypatch, swap)
    async with _session(ask_policy, Asker("accept")) as client:
        result = await client.call_tool(
            "edit", {"file_path": str(outside / "a" / "b" / "x.txt"), "old_string": "original", "new_string": "pwned"}
        )
    assert result.is_error and _text(result).startswith("denied:")
    assert (elsewhere / "b" / "x.txt").read_text() == "original"


@pytest.mark.parametrize("kind", ["absolute", "relative"])
@pytest.mark.usefixtures("resolver")
async def test_a_missing_parent_created_as_a_symlink_after_the_check_is_not_written_through(
    ask_policy: SandboxPolicy,
    tmp_path: Path,
    outside: Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _swap_after_the_check(monkeypatch, lambda: _link(outside / "a", elsewhere, kind))
    async with _session(ask_policy, Asker("accept")) as client:
        result = await client.call_tool("write", {"file_path": str(outside / "a" / "b" / "x.txt"), "content": "pwned"})
    assert result.is_error and _text(result).startswith("denied:")
    assert list(elsewhere.iterdir()) == []


async def test_a_path_through_a_symlink_is_never_asked(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (outside / "link").symlink_to(elsewhere)
    asker = Asker("accept")
    async with _session(ask_policy, asker) as client:
        text = await _denied(client, outside / "link" / "a.txt", watch=tmp_path)
    assert f"really {elsewhere / 'a.txt'}" in text
    assert asker.questions == []


async def test_an_approved_write_replaces_a_symlink_leaf_and_leaves_its_target_alone(
    ask_policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("original")
    (outside / "a.txt").symlink_to(target)
    async with _session(ask_policy, Asker("accept")) as client:
        result = await client.call_tool("write", {"file_path": str(outside / "a.txt"), "content": "new"})
    assert not result.is_error, _text(result)
    assert target.read_text() == "original"
    assert not (outside / "a.txt").is_symlink() and (outside / "a.txt").read_text() == "new"


# -- the grant store and the question ---------------------------------------------------------


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
