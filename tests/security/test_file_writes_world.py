"""`write` and `edit` act where bash acts: the session's file worker writes inside its sandbox world.

Run as the unprivileged account (`unprivileged_support.py`) in sandbox mode, through the Toolbox as a
client calls it. Before, omega's own process wrote, so only its path checks stood between the model
and a file: with the workspace at the home directory (a common setup), `write` replaced
`~/.ssh/authorized_keys` and created `~/.aws/credentials`, which bash, whose world covers them, could
not touch; and any entry omega's lists lacked was written (shown here by switching omega's hidden and
other-session checks off in the attack program: the kernel must refuse regardless). The controls are
the same acts where they must work: the workspace, the session's /tmp as bash sees it, mode kept,
parents made, protected names still refused, a link bash planted replaced (never followed), and an
approved write outside the roots.
"""

from __future__ import annotations

import dataclasses
import stat
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from omega_mcp.builtin.schemas import EditArgs, WriteArgs
from omega_mcp.builtin.write import edit_file, write_file
from omega_mcp.sandbox import probe
from omega_mcp.sandbox.approvals import ApprovalRequest, Grants
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.sandbox.world import Worlds
from unprivileged_support import scenario

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not probe.support().pid_namespace, reason="needs user namespaces"
)

# Off switches for omega's own lists, as an entry they lack would be: absent on main (harmless there).
_LISTS_OFF = """
from omega_mcp.sandbox import paths as _paths
_paths._hidden_write_reason = lambda policy, target: None
_paths._other_session_tmp = lambda policy, target: False
"""


def test_write_and_edit_cannot_touch_secrets_bash_cannot_see_in_a_home_workspace() -> None:
    program = """
async def main():
    FH = PLACE / "fakehome"
    async with Toolbox(policy(workspace=FH)) as box:
        out = {}
        out["keys"] = await call(box, "write", {"file_path": "~/.ssh/authorized_keys", "content": "EVIL-KEY\\n"})
        edit = {"file_path": "~/.ssh/config", "old_string": "Host", "new_string": "EVIL"}
        out["edit"] = await call(box, "edit", edit)
        out["aws"] = await call(box, "write", {"file_path": "~/.aws/credentials", "content": "EVIL\\n"})
        out["bash"] = await call(box, "bash", {"command": "echo EVIL-KEY >> ~/.ssh/authorized_keys; ls -a ~/.ssh"})
        out["ok"] = await call(box, "write", {"file_path": "~/notes.txt", "content": "fine\\n"})
        print(json.dumps(out))
anyio.run(main)
"""
    with scenario() as attack:
        ssh = attack.fakehome / ".ssh"
        ssh.mkdir()
        (ssh / "authorized_keys").write_text("good-key\n")
        (ssh / "config").write_text("Host example\n")
        attack.own(ssh, ssh / "authorized_keys", ssh / "config")
        found = attack.run(program)
        keys = (ssh / "authorized_keys").read_text()
        config = (ssh / "config").read_text()
        aws = (attack.fakehome / ".aws").exists()
        notes = (attack.fakehome / "notes.txt").read_text()
    assert keys == "good-key\n" and config == "Host example\n" and not aws, found
    for name in ("keys", "edit", "aws"):
        assert found[name]["error"] and "denied" in found[name]["text"] and "hidden" in found[name]["text"], found
    assert "Permission denied" in found["bash"]["text"], found  # bash's world covers it: the same line
    assert not found["ok"]["error"] and notes == "fine\n", found


def test_the_kernel_refuses_a_hidden_secret_even_when_omegas_list_would_allow_it() -> None:
    program = (
        _LISTS_OFF
        + """
async def main():
    FH = PLACE / "fakehome"
    async with Toolbox(policy(workspace=FH)) as box:
        out = {}
        out["keys"] = await call(box, "write", {"file_path": "~/.ssh/authorized_keys", "content": "EVIL-KEY\\n"})
        edit = {"file_path": "~/.ssh/config", "old_string": "Host", "new_string": "EVIL"}
        out["edit"] = await call(box, "edit", edit)
        print(json.dumps(out))
anyio.run(main)
"""
    )
    with scenario() as attack:
        ssh = attack.fakehome / ".ssh"
        ssh.mkdir()
        (ssh / "authorized_keys").write_text("good-key\n")
        (ssh / "config").write_text("Host example\n")
        attack.own(ssh, ssh / "authorized_keys", ssh / "config")
        found = attack.run(program)
        keys = (ssh / "authorized_keys").read_text()
        config = (ssh / "config").read_text()
    assert keys == "good-key\n" and config == "Host example\n", found
    for name in ("keys", "edit"):  # the kernel's refusal, named as a denial of the path
        assert found[name]["error"] and "denied" in found[name]["text"] and "sandbox refuses" in found[name]["text"]


def test_write_and_edit_cannot_reach_another_sessions_private_tmp_even_without_omegas_check() -> None:
    tag = uuid.uuid4().hex[:8]
    program = (
        _LISTS_OFF
        + f"""
async def main():
    async with Toolbox(policy()) as box:
        a, b = object(), object()
        out = {{}}
        out["make"] = await call(box, "bash", {{"command": "echo SECRET-OF-A > /tmp/a-{tag}"}}, owner=a)
        mine = await call(box, "bash", {{"command": "true"}}, owner=b)
        found = [p for p in (HOME / "clients").rglob("a-{tag}")]  # its client tree holds the private /tmp directories
        out["found"] = [str(p) for p in found]
        out["write"] = [await call(box, "write", {{"file_path": str(p), "content": "EVIL"}}, owner=b) for p in found]
        out["edit"] = [await call(box, "edit", {{"file_path": str(p), "old_string": "SECRET", "new_string": "EVIL"}},
                       owner=b) for p in found]
        out["new"] = [await call(box, "write", {{"file_path": str(p.parent / "planted-{tag}"), "content": "EVIL"}},
                      owner=b) for p in found]
        out["after"] = await call(box, "bash", {{"command": "cat /tmp/a-{tag}; ls /tmp"}}, owner=a)
        print(json.dumps(out))
anyio.run(main)
"""
    )
    with scenario() as attack:
        found = attack.run(program)
    assert len(found["found"]) == 1, found  # A's private /tmp, seen from omega's side
    for result in found["write"] + found["edit"] + found["new"]:
        assert result["error"], found
    assert "SECRET-OF-A" in found["after"]["text"] and f"planted-{tag}" not in found["after"]["text"], found


def test_a_link_bash_plants_in_its_tmp_is_replaced_by_write_and_refused_by_edit_never_followed() -> None:
    tag = uuid.uuid4().hex[:8]
    host = Path(f"/tmp/omega-host-{tag}")
    try:
        with scenario() as attack:
            host.write_text("HOST-TMP\n")
            attack.own(host)
            program = f"""
async def main():
    async with Toolbox(policy()) as box:
        out = {{}}
        out["plant"] = await call(box, "bash", {{"command":
            "ln -s {host} /tmp/l1-{tag}; ln -s {host} /tmp/l2-{tag}; ln -s /tmp /tmp/d-{tag}"}})
        out["edit"] = await call(box, "edit", {{"file_path": "/tmp/l1-{tag}", "old_string": "HOST", "new_string": "X"}})
        out["write"] = await call(box, "write", {{"file_path": "/tmp/l2-{tag}", "content": "mine"}})
        out["through"] = await call(box, "write", {{"file_path": "/tmp/d-{tag}/omega-host-{tag}", "content": "EVIL"}})
        out["bash"] = await call(box, "bash", {{"command": "cat /tmp/l2-{tag}; test -L /tmp/l1-{tag} && echo L1"}})
        print(json.dumps(out))
anyio.run(main)
"""
            found = attack.run(program)
            content = host.read_text()
    finally:
        host.unlink(missing_ok=True)
    assert content == "HOST-TMP\n", found
    assert found["edit"]["error"] and "symbolic link" in found["edit"]["text"], found
    assert not found["write"]["error"] and "replaced a symbolic link" in found["write"]["text"], found
    assert found["through"]["error"], found
    assert "mine" in found["bash"]["text"] and "L1" in found["bash"]["text"], found


def test_ordinary_writes_and_edits_in_a_world_work_as_before() -> None:
    tag = uuid.uuid4().hex[:8]
    program = f"""
async def main():
    async with Toolbox(policy()) as box:
        out = {{}}
        out["deep"] = await call(box, "write", {{"file_path": "a/b/c/new.txt", "content": "one\\ntwo\\n"}})
        out["edit"] = await call(box, "edit", {{"file_path": "a/b/c/new.txt", "old_string": "two", "new_string": "2"}})
        out["mode"] = await call(box, "bash", {{"command": "printf 'x=1\\n' > run.sh; chmod 750 run.sh"}})
        out["edit_mode"] = await call(box, "edit", {{"file_path": "run.sh", "old_string": "x=1", "new_string": "x=2"}})
        out["tmp_w"] = await call(box, "write", {{"file_path": "/tmp/w-{tag}", "content": "to bash"}})
        out["tmp_b"] = await call(box, "bash", {{"command": "cat /tmp/w-{tag}; printf 'from bash' > /tmp/b-{tag}"}})
        edit = {{"file_path": "/tmp/b-{tag}", "old_string": "from", "new_string": "by"}}
        out["tmp_e"] = await call(box, "edit", edit)
        out["tmp_r"] = await call(box, "bash", {{"command": "cat /tmp/b-{tag}; stat -c %a run.sh"}})
        out["hook"] = await call(box, "write", {{"file_path": ".git/hooks/pre-commit", "content": "evil"}})
        out["missing"] = await call(box, "edit", {{"file_path": "nope.txt", "old_string": "a", "new_string": "b"}})
        out["notfound"] = await call(box, "edit", {{"file_path": "run.sh", "old_string": "zzz", "new_string": "b"}})
        out["dir"] = await call(box, "write", {{"file_path": "a/b", "content": "x"}})
        print(json.dumps(out))
anyio.run(main)
"""
    with scenario() as attack:
        (attack.ws / ".git" / "hooks").mkdir(parents=True)
        for d in (attack.ws / ".git", attack.ws / ".git" / "hooks"):
            attack.own(d)
        found = attack.run(program)
        deep = (attack.ws / "a" / "b" / "c" / "new.txt").read_text()
        run = attack.ws / "run.sh"
        script, mode = run.read_text(), stat.S_IMODE(run.stat().st_mode)
        hook = (attack.ws / ".git" / "hooks" / "pre-commit").exists()
        leaked = Path(f"/tmp/w-{tag}").exists()
    for name in ("deep", "edit", "edit_mode", "tmp_w", "tmp_e"):
        assert not found[name]["error"], found
    assert "(created)" in found["deep"]["text"] and deep == "one\n2\n", found
    assert script == "x=2\n" and mode == 0o750, found
    assert "to bash" in found["tmp_b"]["text"] and "by bash" in found["tmp_r"]["text"], found
    assert "750" in found["tmp_r"]["text"] and not leaked, found  # the session's /tmp, not the host's
    assert found["hook"]["error"] and "protected" in found["hook"]["text"] and not hook, found
    assert found["missing"]["error"] and "does not exist" in found["missing"]["text"], found
    assert found["notfound"]["error"] and "old_string was not found" in found["notfound"]["text"], found
    assert found["dir"]["error"] and "directory" in found["dir"]["text"], found


def _text(result: object) -> str:
    return "".join(getattr(block, "text", "") for block in getattr(result, "content", []))


@pytest.mark.anyio
async def test_an_approved_write_outside_the_roots_still_works_with_a_world(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "e.txt").write_text("alpha\n")
    base = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=workspace, tmp_dir=tmp_path / "tmp")
    worlds = Worlds(dataclasses.replace(base, on_denied="ask"))
    owner = object()
    policy = worlds.policy_for(owner)
    asked: list[str] = []

    async def approve(request: ApprovalRequest) -> bool:
        asked.append(request.path)
        return True

    try:
        inside = await write_file(policy, WriteArgs(file_path="in.txt", content="in"), approve=approve, grants=Grants())
        wrote = await write_file(
            policy, WriteArgs(file_path=str(outside / "n" / "a.txt"), content="hi"), approve=approve, grants=Grants()
        )
        edited = await edit_file(
            policy,
            EditArgs(file_path=str(outside / "e.txt"), old_string="alpha", new_string="beta"),
            approve=approve,
            grants=Grants(),
        )
    finally:
        await anyio.to_thread.run_sync(worlds.close, owner)
    assert not inside.is_error and (workspace / "in.txt").read_text() == "in"
    assert not wrote.is_error and "approved by the user" in _text(wrote), _text(wrote)
    assert not edited.is_error and "approved by the user" in _text(edited), _text(edited)
    assert (outside / "n" / "a.txt").read_text() == "hi" and (outside / "e.txt").read_text() == "beta\n"
    assert asked == [str(outside / "n" / "a.txt"), str(outside / "e.txt")]
