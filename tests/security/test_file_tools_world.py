"""`read` acts where bash acts: inside the calling session's sandbox world, not in omega's process.

Each attack runs as an unprivileged account (`unprivileged_support.py`) in sandbox mode with the
real `/tmp` as the tools' tmp dir, through the Toolbox as a client calls it. Before the file tools
worked in the session's world (omega's own process opened the path), each succeeded: `read` of
`/proc/<pid>/root/tmp/...` of another session's bash command, or of a confined process, read their
private /tmp; `/proc/<pid>/status` listed the host's processes; a symbolic link bash planted in its
private /tmp was followed out to the host's /tmp, which bash itself cannot see. The controls are the
same acts where they must work: a session's own /tmp, the workspace, images, binaries, writes.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from unprivileged_support import scenario

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")

_FIND = """
def find(tag):
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and tag.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found

async def wait_for(tag):
    with anyio.fail_after(30):
        while not (pids := find(tag)):
            await anyio.sleep(0.02)  # bounded polling: the process is another session's
    return pids
"""


def test_read_cannot_reach_another_sessions_tmp_or_the_hosts_processes_through_proc() -> None:
    tag = uuid.uuid4().hex[:8]
    seconds = f"97.{int(tag, 16) % 1000:03d}{len(tag)}"  # an argv no other process has
    program = (
        _FIND
        + f"""
async def main():
    async with Toolbox(policy()) as box:
        a, b = object(), object()
        out = {{}}
        out["write"] = await call(box, "bash", {{"command": "echo SECRET-OF-A > /tmp/secret-{tag}"}}, owner=a)
        out["bg"] = await call(box, "bash", {{"command": "exec sleep {seconds}", "run_in_background": True}}, owner=a)
        pids = await wait_for("sleep\\0{seconds}")
        out["pids"] = pids
        out["root"] = [await call(box, "read", {{"file_path": f"/proc/{{p}}/root/tmp/secret-{tag}"}}, owner=b)
                       for p in pids]
        out["cwd"] = [await call(box, "read", {{"file_path": f"/proc/{{p}}/cwd/../../../../../../tmp/secret-{tag}"}},
                      owner=b) for p in pids]
        out["status"] = [await call(box, "read", {{"file_path": f"/proc/{{p}}/status"}}, owner=b)
                         for p in [*pids, str(os.getpid())]]
        out["own"] = await call(box, "read", {{"file_path": "/tmp/secret-{tag}"}}, owner=a)
        out["self"] = await call(box, "read", {{"file_path": "/proc/self/status"}}, owner=b)
        print(json.dumps(out))
anyio.run(main)
"""
    )
    with scenario() as attack:
        found = attack.run(program)
    assert found["pids"], found
    for result in found["root"] + found["cwd"]:
        assert "SECRET-OF-A" not in result["text"] and result["error"], found
    for result in found["status"]:
        assert result["error"] and "does not exist" in result["text"], found  # the host's processes are not there
    assert "SECRET-OF-A" in found["own"]["text"], found  # the session's own /tmp is where bash put it
    assert not found["self"]["error"] and "Pid:" in found["self"]["text"], found  # its own /proc is readable


def test_read_cannot_reach_a_confined_processs_private_tmp_through_proc() -> None:
    tag = uuid.uuid4().hex[:8]
    program = (
        _FIND
        + f"""
import subprocess
from omega_mcp.sandbox.launch import confined_argv
code = "open('/tmp/srv-{tag}', 'w').write('SERVER-SECRET'); import time; print('ready', flush=True); time.sleep(60)"
async def main():
    argv = confined_argv(policy(), [sys.executable, "-I", "-c", code, "server-{tag}"])
    server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
    try:
        async with Toolbox(policy()) as box:
            ready = await anyio.to_thread.run_sync(server.stdout.readline)
            pids = await wait_for("server-{tag}")
            out = {{"ready": ready.decode(), "pids": pids}}
            out["root"] = [await call(box, "read", {{"file_path": f"/proc/{{p}}/root/tmp/srv-{tag}"}}) for p in pids]
            print(json.dumps(out))
    finally:
        os.killpg(server.pid, 9)
        server.wait(10)
anyio.run(main)
"""
    )
    with scenario() as attack:
        found = attack.run(program)
    assert found["ready"].strip() == "ready" and found["pids"], found
    for result in found["root"]:
        assert "SERVER-SECRET" not in result["text"] and result["error"], found
    assert not Path(f"/tmp/srv-{tag}").exists()  # the server's /tmp was its own


def test_a_link_bash_plants_in_its_tmp_is_not_followed_by_read_to_the_hosts_tmp() -> None:
    tag = uuid.uuid4().hex[:8]
    host = Path(f"/tmp/omega-host-{tag}")
    try:
        with scenario() as attack:
            host.write_text("HOST-TMP-SECRET\n")
            host.chmod(0o600)
            attack.own(host)
            program = f"""
async def main():
    async with Toolbox(policy()) as box:
        out = {{}}
        out["plant"] = await call(box, "bash", {{"command":
            "cat {host}; ln -s {host} /tmp/link-{tag}; echo own > /tmp/own-{tag}; ln -s /tmp/own-{tag} /tmp/ok-{tag}"}})
        out["link"] = await call(box, "read", {{"file_path": "/tmp/link-{tag}"}})
        out["ok"] = await call(box, "read", {{"file_path": "/tmp/ok-{tag}"}})
        print(json.dumps(out))
anyio.run(main)
"""
            found = attack.run(program)
    finally:
        host.unlink(missing_ok=True)
    assert "HOST-TMP-SECRET" not in found["plant"]["text"], found  # bash cannot see the host's /tmp
    assert "HOST-TMP-SECRET" not in found["link"]["text"] and found["link"]["error"], found
    assert "does not exist" in found["link"]["text"], found
    assert "own" in found["ok"]["text"] and not found["ok"]["error"], found  # a link within its /tmp works


# Off switches for omega's own read checks (`paths.py`), as an entry their lists lack would be: where
# omega opens a world's file itself (`sandbox/worldopen.py`), the world's covers must still decide.
_READ_LISTS_OFF = """
from omega_mcp.sandbox import paths as _paths
_paths._read_block_reason = lambda policy, target: None
_paths._hidden_identity = lambda policy, real: None
"""


def test_read_cannot_see_what_the_world_covers_even_when_omegas_lists_would_allow_it() -> None:
    tag = uuid.uuid4().hex[:8]
    program = (
        _READ_LISTS_OFF
        + f"""
async def main():
    async with Toolbox(policy(workspace=PLACE / "fakehome")) as box:
        a, b = object(), object()
        out = {{}}
        out["key"] = await call(box, "read", {{"file_path": "~/.ssh/id_ed25519"}}, owner=b)
        out["again"] = await call(box, "read", {{"file_path": "~/.ssh/id_ed25519"}}, owner=b)
        out["make"] = await call(box, "bash", {{"command": "echo SECRET-OF-A > /tmp/a-{tag}"}}, owner=a)
        found = [str(p) for p in (HOME / "clients").rglob("a-{tag}")]
        out["found"] = found
        out["other"] = [await call(box, "read", {{"file_path": p}}, owner=b) for p in found]
        out["ok"] = await call(box, "read", {{"file_path": "~/notes.txt"}}, owner=b)
        print(json.dumps(out))
anyio.run(main)
"""
    )
    with scenario() as attack:
        ssh = attack.fakehome / ".ssh"
        ssh.mkdir()
        (ssh / "id_ed25519").write_text("PRIVATE-KEY\n")
        (attack.fakehome / "notes.txt").write_text("fine\n")
        attack.own(ssh, ssh / "id_ed25519", attack.fakehome / "notes.txt")
        found = attack.run(program)
    assert len(found["found"]) == 1, found  # A's private /tmp, seen from omega's side
    assert "PRIVATE-KEY" not in json.dumps(found) and "SECRET-OF-A" not in json.dumps(found["other"]), found
    for result in (found["key"], found["again"], *found["other"]):
        assert result["error"], found
    assert found["ok"] == {"error": False, "text": "     1\tfine"}, found


_PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\xa5\xfb\xaa\x9d\x00\x00\x00\x00IEND\xaeB`\x82"
)


def test_the_file_tools_still_read_write_and_edit_workspace_files_images_binaries_and_tmp_in_a_world() -> None:
    program = f"""
WS.joinpath("img.png").write_bytes({_PNG!r})
WS.joinpath("blob.bin").write_bytes(bytes(range(256)) * 8)
WS.joinpath("notes.txt").write_text("alpha\\nbeta\\n")
async def kinds(box, name, args):
    result = await box.call_tool(name, args)
    return {{"error": bool(result.is_error), "types": [b.type for b in result.content], "text": text(result)}}
async def main():
    async with Toolbox(policy()) as box:
        out = {{}}
        out["text"] = await call(box, "read", {{"file_path": "notes.txt"}})
        out["image"] = await kinds(box, "read", {{"file_path": str(WS / "img.png")}})
        out["binary"] = await call(box, "read", {{"file_path": "blob.bin"}})
        out["write"] = await call(box, "write", {{"file_path": "new/made.txt", "content": "one\\n"}})
        out["edit"] = await call(box, "edit", {{"file_path": "new/made.txt", "old_string": "one", "new_string": "two"}})
        out["again"] = await call(box, "read", {{"file_path": "new/made.txt"}})
        out["bash"] = await call(box, "bash", {{"command": "cat new/made.txt; printf 'from bash' > /tmp/b.txt"}})
        out["tmp"] = await call(box, "read", {{"file_path": "/tmp/b.txt"}})
        out["missing"] = await call(box, "read", {{"file_path": "nope.txt"}})
        out["dir"] = await call(box, "read", {{"file_path": str(WS)}})
        out["hidden"] = await call(box, "read", {{"file_path": str(PLACE / "fakehome" / ".bashrc")}})
        print(json.dumps(out))
anyio.run(main)
"""
    with scenario() as attack:
        attack.fakehome.joinpath(".bashrc").write_text("export SECRET=1\n")
        attack.own(attack.fakehome / ".bashrc")
        found = attack.run(program)
    assert found["text"] == {"error": False, "text": "     1\talpha\n     2\tbeta"}, found
    assert "image" in found["image"]["types"] and not found["image"]["error"], found
    assert found["binary"]["error"] and "binary file" in found["binary"]["text"], found
    assert not found["write"]["error"] and not found["edit"]["error"], found
    assert "2\ttwo" not in found["again"]["text"] and "1\ttwo" in found["again"]["text"], found
    assert "two" in found["bash"]["text"], found
    assert "from bash" in found["tmp"]["text"] and not found["tmp"]["error"], found
    assert found["missing"]["error"] and "does not exist" in found["missing"]["text"], found
    assert found["dir"]["error"] and "is a directory" in found["dir"]["text"], found
    assert found["hidden"]["error"] and "hidden" in found["hidden"]["text"], found
    assert json.dumps(found).count("SECRET=1") == 0
