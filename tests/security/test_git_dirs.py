"""Every repository is protected wherever its git directory is, and the tools' own configs are protected names.

Each attack runs as an unprivileged account through the Toolbox in sandbox mode (bash and the file
tools), then the user runs their REAL git (unsandboxed, as that account) in the same project: `git
status` and `git commit`. What the model planted would touch a marker file at that moment; the
marker must not appear. The attacks: `.git` renamed away plus a `gitdir:` file, then `git config
core.fsmonitor` and a planted hook; a hook planted in the `core.hooksPath` directory (`.husky`);
`.git/modules/sub/config` (a submodule's git directory); a nested repository whose git directory a
`gitdir:` file names. The controls: the user's own hook (in `.husky`) still runs; an ordinary file
is written by bash and by `write`. Then `.npmrc`, `.devcontainer/devcontainer.json` and
`.yarnrc.yml`: denied to write/edit, and undone when bash makes them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.protect import protected_reason
from unprivileged_support import Scenario, scenario

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces and Landlock"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]

_GIT = "git -c user.name=u -c user.email=u@example.com"


def _attack(attack: Scenario, setup: str, calls: list[tuple[str, dict[str, object]]], after: str) -> dict[str, object]:
    """`setup` (the user's shell, unsandboxed), the tool calls, then `after` (the user's git again)."""
    program = f"""
import subprocess
def user(script):
    done = subprocess.run(["bash", "-c", script], cwd=WS, capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr
async def main():
    first = user({setup!r})
    async with Toolbox(policy(mode="sandbox")) as box:
        out = []
        for name, args in {calls!r}:
            out.append(await call(box, name, args))
    last = user({after!r})
    print(json.dumps({{"setup": first, "results": out, "after": last}}))
anyio.run(main)
"""
    return attack.run(program, timeout=180)


def _user_repo(path: str = ".") -> str:
    return f"git init -q {path} && cd {path} && echo 1 > f && git add f && {_GIT} commit -qm one && cd - >/dev/null"


def _markers(attack: Scenario) -> list[str]:
    return sorted(p.name for p in attack.place.glob("marker-*"))


def test_a_renamed_git_directory_behind_a_gitdir_file_keeps_its_config_and_hooks() -> None:
    with scenario() as attack:
        marker = attack.place / "marker-renamed"
        hook = f"#!/bin/sh\ntouch {marker}-hook\n"
        calls: list[tuple[str, dict[str, object]]] = [
            ("bash", {"command": "mv .git .gitreal && printf 'gitdir: .gitreal\\n' > .git; echo moved"}),
            (
                "bash",
                {
                    "command": f"git config core.fsmonitor 'touch {marker}'; echo rc=$?; "
                    f"printf '{hook}' > .gitreal/hooks/pre-commit; chmod +x .gitreal/hooks/pre-commit; echo done"
                },
            ),
            ("write", {"file_path": ".gitreal/config", "content": f"[core]\n\tfsmonitor = touch {marker}\n"}),
            ("write", {"file_path": ".gitreal/hooks/post-commit", "content": hook}),
            ("bash", {"command": "echo ordinary > notes.txt && cat notes.txt"}),
            ("write", {"file_path": "other.txt", "content": "ordinary"}),
        ]
        after = f"git status --short; {_GIT} commit -q --allow-empty -m two; echo committed=$?"
        found = _attack(attack, _user_repo(), calls, after)
        results = found["results"]
        assert isinstance(results, list)
        assert "moved" in results[0]["text"], results[0]
        assert "rc=0" not in results[1]["text"], results[1]
        for denied in results[2:4]:
            assert denied["error"] and "protected" in denied["text"], denied
        assert "ordinary" in results[4]["text"] and not results[5]["error"], results[4:]
        assert (attack.ws / "other.txt").read_text() == "ordinary"
        assert "committed=0" in str(found["after"]), found["after"]
        assert _markers(attack) == [], found
        assert "fsmonitor" not in (attack.ws / ".gitreal" / "config").read_text()


def test_a_hook_planted_in_the_core_hookspath_directory_never_runs_and_the_users_own_does() -> None:
    with scenario() as attack:
        marker, mine = attack.place / "marker-husky", attack.place / "user-hook-ran"
        setup = (
            _user_repo() + f" && mkdir .husky && printf '#!/bin/sh\\ntouch {mine}\\n' > .husky/pre-commit"
            " && chmod +x .husky/pre-commit && git config core.hooksPath .husky"
        )
        evil = f"#!/bin/sh\ntouch {marker}\n"
        calls: list[tuple[str, dict[str, object]]] = [
            (
                "bash",
                {
                    "command": f"printf '{evil}' > .husky/post-commit; chmod +x .husky/post-commit; "
                    f"printf '{evil}' >> .husky/pre-commit; echo done"
                },
            ),
            ("write", {"file_path": ".husky/commit-msg", "content": evil}),
            ("edit", {"file_path": ".husky/pre-commit", "old_string": "touch", "new_string": "rm -f x; touch"}),
        ]
        after = f"{_GIT} commit -q --allow-empty -m two; echo committed=$?; git status --short"
        found = _attack(attack, setup, calls, after)
        results = found["results"]
        assert isinstance(results, list)
        for denied in results[1:]:
            assert denied["error"] and "protected" in denied["text"], denied
        assert "committed=0" in str(found["after"]), found
        assert mine.exists(), found  # the control: the user's own hook ran
        assert _markers(attack) == [], found
        assert not (attack.ws / ".husky" / "post-commit").exists()


def test_a_submodule_git_directory_and_a_nested_repository_behind_a_gitdir_file_are_protected() -> None:
    with scenario() as attack:
        marker = attack.place / "marker-nested"
        setup = (
            _user_repo()
            + " && mkdir -p .git/modules store"
            + f" && git init -q --separate-git-dir=.git/modules/sub sub && cd sub && echo 1 > f && git add f"
            f" && {_GIT} commit -qm s && cd .. && git init -q --separate-git-dir=store/nested.git nested"
            f" && cd nested && echo 1 > f && git add f && {_GIT} commit -qm n"
        )
        evil = f"#!/bin/sh\ntouch {marker}-hook\n"
        calls: list[tuple[str, dict[str, object]]] = [
            (
                "bash",
                {
                    "command": f"git -C sub config core.fsmonitor 'touch {marker}-sub'; echo rc1=$?; "
                    f"git -C nested config core.fsmonitor 'touch {marker}-nested'; echo rc2=$?; "
                    f"printf '{evil}' > store/nested.git/hooks/pre-commit; chmod +x store/nested.git/hooks/pre-commit; "
                    f"printf '{evil}' > .git/modules/sub/hooks/pre-commit; chmod +x .git/modules/sub/hooks/pre-commit; "
                    "echo done"
                },
            ),
            ("write", {"file_path": ".git/modules/sub/config", "content": f"[core]\n\tfsmonitor = touch {marker}\n"}),
            ("write", {"file_path": "store/nested.git/hooks/pre-commit", "content": evil}),
        ]
        after = (
            f"for r in sub nested; do git -C $r status --short; {_GIT} -C $r commit -q --allow-empty -m x; "
            "echo committed=$?; done"
        )
        found = _attack(attack, setup, calls, after)
        results = found["results"]
        assert isinstance(results, list)
        assert (attack.ws / ".git" / "modules" / "sub" / "HEAD").exists(), found["setup"]
        text = results[0]["text"]
        assert "done" in text and "rc1=0" not in text and "rc2=0" not in text, text
        for denied in results[1:]:
            assert denied["error"] and "protected" in denied["text"], denied
        assert str(found["after"]).count("committed=0") == 2, found
        assert _markers(attack) == [], found


def test_files_a_repositorys_config_includes_are_protected_like_its_config() -> None:
    """`include.path = ../cfg` (and `includeIf`) make a workspace file part of the config: git status
    would run a `core.fsmonitor` the model put there. The control: the user's own included setting holds."""
    with scenario() as attack:
        marker = attack.place / "marker-include"
        setup = (
            _user_repo()
            + " && printf '[user]\\n\\tname = from-cfg\\n' > cfg && git config include.path ../cfg"
            + " && git config 'includeIf.gitdir:/.path' ../conf/later && mkdir conf"
        )
        evil = f"[core]\n\tfsmonitor = touch {marker}\n"
        calls: list[tuple[str, dict[str, object]]] = [
            ("bash", {"command": f"printf '{evil}' >> cfg; echo rc1=$?; printf '{evil}' > conf/later; echo made"}),
            ("write", {"file_path": "cfg", "content": evil}),
            ("edit", {"file_path": "cfg", "old_string": "from-cfg", "new_string": "x"}),
            ("write", {"file_path": "conf/later", "content": evil}),
            ("write", {"file_path": "conf/ordinary.txt", "content": "ordinary"}),
        ]
        after = "git status --short; echo status=$?; git config user.name"
        found = _attack(attack, setup, calls, after)
        results = found["results"]
        assert isinstance(results, list)
        text = results[0]["text"]
        assert "made" in text and "rc1=0" not in text, text
        assert "undone" in text and "conf/later" in text, text  # made anyway: moved to the quarantine
        for denied in results[1:4]:
            assert denied["error"] and "protected" in denied["text"], denied
        assert not results[4]["error"], results[4]  # the control: an ordinary file beside them
        assert "status=0" in str(found["after"]) and "from-cfg" in str(found["after"]), found
        assert _markers(attack) == [], found
        assert not (attack.ws / "conf" / "later").exists()


def test_an_include_and_a_hooks_path_outside_the_work_tree_are_protected_for_the_file_tools_too() -> None:
    """Named by a repository that is not above them (`../shared/cfg` of `app/`): no walk up from the
    path finds it; what the tracker learnt from the repository's config does."""
    with scenario() as attack:
        marker = attack.place / "marker-elsewhere"
        setup = (
            _user_repo("app") + " && mkdir shared && git -C app config include.path ../../shared/cfg"
            " && git -C app config core.hooksPath ../hooks"
        )
        calls: list[tuple[str, dict[str, object]]] = [
            ("write", {"file_path": "shared/cfg", "content": f"[core]\n\tfsmonitor = touch {marker}\n"}),
            ("write", {"file_path": "hooks/pre-commit", "content": f"#!/bin/sh\ntouch {marker}-hook\n"}),
            ("write", {"file_path": "shared/readme.txt", "content": "ordinary"}),
        ]
        after = f"cd app && git status --short; {_GIT} commit -q --allow-empty -m two; echo committed=$?"
        found = _attack(attack, setup, calls, after)
        results = found["results"]
        assert isinstance(results, list)
        for denied in results[:2]:
            assert denied["error"] and "protected" in denied["text"], denied
        assert not results[2]["error"], results[2]  # the control: an ordinary file beside it
        assert "committed=0" in str(found["after"]), found
        assert _markers(attack) == [], found
        assert not (attack.ws / "shared" / "cfg").exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        (".npmrc", "script-shell=/tmp/evil.sh\n"),
        (".devcontainer/devcontainer.json", '{"initializeCommand": "touch /tmp/evil"}\n'),
        (".yarnrc.yml", "yarnPath: ./evil.cjs\n"),
    ],
)
def test_the_tools_configs_are_denied_to_the_file_tools_and_undone_for_bash(name: str, content: str) -> None:
    with scenario() as attack:
        calls: list[tuple[str, dict[str, object]]] = [
            ("write", {"file_path": name, "content": content}),
            ("write", {"file_path": f"pkg/{name}", "content": content}),
            ("bash", {"command": f"mkdir -p deep/{name.rsplit('/', 1)[0] if '/' in name else '.'}; "
                      f"printf {json.dumps(content)} > deep/{name}; echo done"}),
            ("write", {"file_path": "ordinary.txt", "content": "ok"}),
        ]  # fmt: skip
        found = _attack(attack, "true", calls, "true")
        results = found["results"]
        assert isinstance(results, list)
        for denied in results[:2]:
            assert denied["error"] and "protected" in denied["text"], denied
        undone = results[2]
        assert "done" in undone["text"] and "omega undid" in undone["text"], undone
        assert not (attack.ws / "deep" / name).exists()
        assert not (attack.ws / name).exists() and not (attack.ws / "pkg").exists()
        assert (attack.ws / "ordinary.txt").read_text() == "ok"


def test_an_edit_of_an_existing_npmrc_is_denied() -> None:
    with scenario() as attack:
        calls: list[tuple[str, dict[str, object]]] = [
            ("edit", {"file_path": ".npmrc", "old_string": "save-exact=true", "new_string": "script-shell=/x"}),
            ("bash", {"command": "echo script-shell=/x >> .npmrc; cat .npmrc"}),
        ]
        found = _attack(attack, "echo save-exact=true > .npmrc", calls, "true")
        results = found["results"]
        assert isinstance(results, list)
        assert results[0]["error"] and "protected" in results[0]["text"], results[0]
        assert (attack.ws / ".npmrc").read_text() == "save-exact=true\n", results


def test_the_file_tools_cannot_make_a_repository_around_a_config_they_wrote_first(tmp_path: Path) -> None:
    """config first (an ordinary file then), HEAD after: the HEAD is refused, so no git directory forms."""
    ws = tmp_path / "ws"
    (ws / "evil").mkdir(parents=True)
    (ws / "evil" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/x\n")
    (ws / "evil" / "objects").mkdir()
    (ws / "evil" / "refs").mkdir()
    policy = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=ws)
    reason = protected_reason(policy, ws / "evil" / "HEAD")
    assert reason is not None and "protected" in reason and "HEAD" in reason, reason
    assert protected_reason(policy, ws / "evil" / "notes.txt") is None  # the control
