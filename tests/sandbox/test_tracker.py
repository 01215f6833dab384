"""The protected-names tracker on its own: what it binds, what it undoes and whom it believes.

No bash here: the tests play the command themselves between `begin` and `end` (a real command
writes through the same kernel calls). Each runs with inotify and with mtime polling (a watcher that
cannot watch), the two ways a directory is known to have changed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from omega_mcp.sandbox import tracker as tracker_module
from omega_mcp.sandbox.hidden import effective_protected
from omega_mcp.sandbox.inotify import Watcher
from omega_mcp.sandbox.protect import Matcher, git_config_problem, hooks_problem
from omega_mcp.sandbox.tracker import ProtectedTree


class _NoInotify(Watcher):
    def __init__(self) -> None:
        super().__init__()
        self.close()  # as on a system without inotify: every directory is polled


@pytest.fixture(params=["inotify", "polling"])
def tree(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProtectedTree]:
    if request.param == "polling":
        monkeypatch.setattr(tracker_module, "Watcher", _NoInotify)
    (tmp_path / "ws").mkdir()
    made = ProtectedTree([tmp_path / "ws"], effective_protected(), tmp_path / "quarantine")
    yield made
    made.close()


def _ws(tree: ProtectedTree) -> Path:
    return Path(tree.roots[0])


def test_existing_protected_names_are_bound_and_a_users_own_changes_are_kept(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    (ws / ".vscode").mkdir()
    (ws / "lib" / ".git").mkdir(parents=True)
    (ws / "lib" / ".git" / "config").write_text("[core]\n")
    (ws / ".mcp.json").write_text("{}")
    run, undone = tree.begin()
    assert undone == []
    assert sorted(run.binds) == sorted(str(ws / p) for p in (".vscode", "lib/.git/config", ".mcp.json"))
    assert tree.end(run) == []
    (ws / ".envrc").write_text("mine")  # no bash runs: the user's
    run, undone = tree.begin()
    assert undone == [] and str(ws / ".envrc") in run.binds
    (ws / ".mcp.json").unlink()  # replaced from outside while bash had it bound, nothing above it moved
    (ws / ".mcp.json").write_text('{"mine": 1}')
    assert tree.end(run) == []
    assert (ws / ".mcp.json").read_text() == '{"mine": 1}'


def test_what_a_run_creates_is_undone_and_kept_in_the_quarantine(tree: ProtectedTree, tmp_path: Path) -> None:
    ws = _ws(tree)
    run, _ = tree.begin()
    (ws / "deep" / "er").mkdir(parents=True)
    (ws / "deep" / "er" / ".mcp.json").write_text("evil")
    (ws / ".claude").mkdir()
    (ws / ".claude" / "settings.json").write_text("{}")
    undone = tree.end(run)
    assert sorted(u.path for u in undone) == [str(ws / ".claude"), str(ws / "deep" / "er" / ".mcp.json")]
    assert not (ws / ".claude").exists() and not (ws / "deep" / "er" / ".mcp.json").exists()
    kept = [Path(u.kept or "") for u in undone]
    assert all(p.is_relative_to(tmp_path / "quarantine") for p in kept)
    assert any((p / "settings.json").is_file() for p in kept)


def test_a_parent_renamed_under_a_bound_name_is_not_the_users_change(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    (ws / "pkg" / ".vscode").mkdir(parents=True)
    run, _ = tree.begin()
    (ws / "pkg").rename(ws / "old")  # the binding moves with it; the name is free again
    (ws / "pkg" / ".vscode").mkdir(parents=True)
    (ws / "pkg" / ".vscode" / "tasks.json").write_text("evil")
    undone = tree.end(run)
    assert [u.path for u in undone] == [str(ws / "pkg" / ".vscode")]
    assert (ws / "old" / ".vscode").is_dir()


def test_a_new_repository_keeps_gits_own_config_and_sample_hooks(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    run, _ = tree.begin()
    subprocess.run(["git", "init", "-q", str(ws / "repo")], check=True)
    (ws / "repo" / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    subprocess.run(["git", "init", "-q", str(ws / "evil")], check=True)
    subprocess.run(["git", "-C", str(ws / "evil"), "config", "core.fsmonitor", "x"], check=True)
    undone = tree.end(run)
    assert sorted(u.path for u in undone) == [
        str(ws / "evil" / ".git" / "config"),
        str(ws / "repo" / ".git" / "hooks" / "pre-commit"),
    ]
    assert "core.fsmonitor" in next(u.what for u in undone if u.path.endswith("config"))
    assert (ws / "repo" / ".git" / "config").exists()
    assert (ws / "repo" / ".git" / "hooks" / "pre-push.sample").exists()


def test_a_replaced_link_is_put_back(tree: ProtectedTree, tmp_path: Path) -> None:
    ws = _ws(tree)
    (tmp_path / "shared.json").write_text("{}")
    os.symlink(tmp_path / "shared.json", ws / ".mcp.json")  # leads out of the roots: Landlock's business
    (ws / "cfg.json").write_text("{}")
    (ws / ".vscode").mkdir()
    os.symlink("cfg.json", ws / ".envrc")  # leads to a writable file: that file is bound
    run, _ = tree.begin()
    assert sorted(run.binds) == [str(ws / ".vscode"), str(ws / "cfg.json")]
    (ws / ".mcp.json").unlink()
    (ws / ".mcp.json").write_text("evil")
    undone = tree.end(run)
    assert [u.what for u in undone] == ["replaced"]
    assert os.readlink(ws / ".mcp.json") == str(tmp_path / "shared.json")


def test_an_unreadable_directory_does_not_hide_a_protected_name(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    run, _ = tree.begin()
    (ws / "d").mkdir()
    (ws / "d" / ".envrc").write_text("evil")
    (ws / "d").chmod(0o300)
    undone = tree.end(run)
    assert [u.path for u in undone] == [str(ws / "d" / ".envrc")]


def test_changes_while_another_run_is_active_are_undone_at_the_next_look(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    background, _ = tree.begin()
    (ws / ".envrc").write_text("evil")  # the background shell's doing, seen by anyone's next look
    run, undone = tree.begin()
    assert [u.path for u in undone] == [str(ws / ".envrc")]
    assert tree.end(run) == [] and tree.end(background) == []


def test_names_match_at_any_depth_and_by_their_last_components() -> None:
    names = Matcher(effective_protected(["*.code-workspace"], [".idea/"]))
    assert names.match(("a", "b", ".git", "config")) == (4, ".git/config")
    assert names.match(("x", ".claude", "settings.json")) == (2, ".claude")
    assert names.match(("p.code-workspace",)) == (1, "*.code-workspace")
    assert names.match((".idea", "workspace.xml")) is None  # unprotected
    assert names.match(("config",)) is None and names.match((".git", "HEAD")) is None


def test_git_config_and_hooks_checks(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text('[core]\n\tbare = false\n[remote "origin"]\n\turl = x\n[user]\n\tname = me\n')
    assert git_config_problem(config) is None
    config.write_text("[alias]\n\tst = !sh -c evil\n")
    assert git_config_problem(config) == "sets alias.st, which git itself never writes there"
    config.write_text("[include]\n\tpath = /etc/elsewhere\n")
    assert "include.path" in (git_config_problem(config) or "")
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "pre-commit.sample").write_text("")
    (tmp_path / "hooks" / "post-checkout").write_text("")
    assert hooks_problem(tmp_path / "hooks") == ["post-checkout"]


def test_a_root_made_after_the_start_is_followed(tmp_path: Path) -> None:
    tree = ProtectedTree([tmp_path / "later"], effective_protected(), tmp_path / "quarantine")
    try:
        tree.prime()  # the root does not exist yet
        (tmp_path / "later").mkdir()
        run, _ = tree.begin()
        (tmp_path / "later" / ".mcp.json").write_text("evil")
        assert [u.path for u in tree.end(run)] == [str(tmp_path / "later" / ".mcp.json")]
    finally:
        tree.close()


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.mark.skipif(subprocess.run(["which", "git"], capture_output=True).returncode != 0, reason="needs git")
def test_git_directories_are_found_by_what_they_are_and_their_hookspath_too(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    _git("init", "-q", "repo", cwd=ws)
    (ws / "repo" / ".git").rename(ws / "repo" / ".gitreal")  # renamed away, a gitdir: file in its place
    (ws / "repo" / ".git").write_text("gitdir: .gitreal\n")
    _git("init", "-q", "--bare", "bare.git", cwd=ws)
    _git("config", "core.hooksPath", ".husky", cwd=ws / "repo")
    (ws / "repo" / ".husky").mkdir()
    run, undone = tree.begin()
    assert undone == []
    for path in ("repo/.gitreal/config", "repo/.gitreal/hooks", "bare.git/config", "bare.git/hooks", "repo/.husky"):
        assert str(ws / path) in run.binds, (path, run.binds)
    assert tree.end(run) == []


@pytest.mark.skipif(subprocess.run(["which", "git"], capture_output=True).returncode != 0, reason="needs git")
def test_a_hookspath_directory_a_run_creates_is_undone(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    _git("init", "-q", "repo", cwd=ws)
    _git("config", "core.hooksPath", "tools/hooks", cwd=ws / "repo")
    (ws / "repo" / "tools").mkdir()
    run, undone = tree.begin()
    assert undone == []
    (ws / "repo" / "tools" / "hooks").mkdir()  # the run plants the hooks directory git would use
    (ws / "repo" / "tools" / "hooks" / "pre-commit").write_text("#!/bin/sh\ntouch /tmp/pwned\n")
    undone = tree.end(run)
    assert [u.path for u in undone] == [str(ws / "repo" / "tools" / "hooks")], undone
    assert not (ws / "repo" / "tools" / "hooks").exists()


@pytest.mark.skipif(subprocess.run(["which", "git"], capture_output=True).returncode != 0, reason="needs git")
def test_a_linked_worktree_keeps_its_git_directory_and_the_hookspath_of_its_repository(tree: ProtectedTree) -> None:
    ws = _ws(tree)
    _git("init", "-q", "repo", cwd=ws)
    (ws / "repo" / "f").write_text("1")
    _git("add", "f", cwd=ws / "repo")
    _git("-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-qm", "one", cwd=ws / "repo")
    _git("config", "core.hooksPath", ".husky", cwd=ws / "repo")
    _git("worktree", "add", "-q", "../wt", cwd=ws / "repo")
    (ws / "wt" / ".husky").mkdir()
    run, undone = tree.begin()
    assert undone == []
    assert str(ws / "wt" / ".husky") in run.binds, run.binds
    assert str(ws / "repo" / ".git" / "config") in run.binds
    assert tree.end(run) == []
