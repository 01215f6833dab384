"""The sandbox is a private world, not a filtered view of the host's: attacks that reached the host's.

Each attack runs as an unprivileged account (`unprivileged_support.py`), in sandbox mode with the
real `/tmp` as bash's tmp dir, through the Toolbox as a client would call it. On the code before
the private world each of them succeeded: bash opened a terminal of the user's (`/dev/pts/N`) and
wrote into it, read and overwrote the host's `/dev/shm`, moved the user's tmux-like socket directory
in the shared `/tmp` and connected to it on the next call, read a key of the user's session keyring,
read credentials outside the short hide list, and read a hidden file after renaming its directory.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
import uuid
from pathlib import Path

import pytest

from unprivileged_support import scenario

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces and Landlock")


def _bash_program(*commands: str) -> str:
    """An attack program: run each command with bash in one session, print their results as JSON."""
    calls = ", ".join(f"await call(box, 'bash', {{'command': {json.dumps(c)}}})" for c in commands)
    return f"""
async def main():
    async with Toolbox(policy()) as box:
        print(json.dumps({{"results": [{calls}]}}))
anyio.run(main)
"""


def test_bash_cannot_open_a_terminal_of_the_user() -> None:
    master, slave = os.openpty()
    try:
        name = os.ttyname(slave)
        with scenario() as attack:
            os.chown(name, attack.uid, -1)  # the user's own terminal, as a login gives it
            opener = (
                f"python3 -c \"import os; fd = os.open('{name}', os.O_RDWR | os.O_NOCTTY); "
                "os.write(fd, b'INJECTED\\033]52;c;cHduZWQ=\\007'); print('opened')\""
            )
            found = attack.run(_bash_program(opener))["results"][0]
        readable, _, _ = select.select([master], [], [], 0.2)
        injected = os.read(master, 1024) if readable else b""
    finally:
        os.close(master)
        os.close(slave)
    assert "opened" not in found["text"], found
    assert b"INJECTED" not in injected


def test_bash_neither_reads_nor_writes_the_hosts_shared_memory() -> None:
    shm = Path("/dev/shm") / f"omega-attack-{uuid.uuid4().hex[:8]}"
    try:
        with scenario() as attack:
            shm.write_text("HOST-SHM-DATA\n")
            shm.chmod(0o600)
            attack.own(shm)
            found = attack.run(_bash_program(f"cat {shm}; echo pwned > {shm}; echo s > /dev/shm/mine && echo shm=ok"))
        text = found["results"][0]["text"]
        assert "HOST-SHM-DATA" not in text, text
        assert "shm=ok" in text, text  # a /dev/shm of its own still works
        assert shm.read_text() == "HOST-SHM-DATA\n"
    finally:
        shm.unlink(missing_ok=True)


def test_a_socket_in_the_hosts_tmp_is_out_of_reach_while_tmp_is_writable_and_shared_with_read() -> None:
    tag = uuid.uuid4().hex[:8]
    home, moved, shared = Path(f"/tmp/omega-tmux-{tag}"), Path(f"/tmp/omega-moved-{tag}"), f"/tmp/omega-shared-{tag}"
    connected, stop = threading.Event(), threading.Event()
    listener = socket.socket(socket.AF_UNIX)
    try:
        with scenario() as attack:
            home.mkdir(mode=0o700)
            listener.bind(str(home / "default"))
            (home / "default").chmod(0o777)
            attack.own(home, home / "default")
            listener.listen(4)
            listener.settimeout(0.2)

            def accept() -> None:
                while not stop.is_set():
                    try:
                        listener.accept()[0].close()
                    except TimeoutError:
                        continue
                    except OSError:
                        return
                    connected.set()

            threading.Thread(target=accept, daemon=True).start()
            connect = (
                'python3 -c "import socket, sys; s = socket.socket(socket.AF_UNIX); '
                "s.connect(sys.argv[1]); s.send(b'run-shell'); print('connected')\""
            )
            calls = [
                ("bash", {"command": f"mv {home} {moved}; echo moved=$?"}),
                ("bash", {"command": f"{connect} {moved}/default; {connect} {home}/default"}),
                ("bash", {"command": f"echo from-bash > {shared}; ls /tmp"}),
                ("read", {"file_path": shared}),
                ("write", {"file_path": f"{shared}-w", "content": "from-write"}),
                ("bash", {"command": f"cat {shared}-w"}),
            ]
            program = f"""
async def main():
    async with Toolbox(policy()) as box:
        out = [await call(box, name, args) for name, args in json.loads({json.dumps(json.dumps(calls))})]
        print(json.dumps({{"results": out}}))
anyio.run(main)
"""
            found = attack.run(program)["results"]
            assert home.is_dir() and not moved.exists(), found[0]
    finally:
        stop.set()
        listener.close()
        for path in (home / "default", Path(shared), Path(f"{shared}-w")):
            path.unlink(missing_ok=True)
        for path in (home, moved):
            if path.is_dir():
                for child in path.iterdir():
                    child.unlink()
                path.rmdir()
    assert not connected.is_set(), found
    assert "connected" not in found[1]["text"], found[1]
    assert f"omega-tmux-{tag}" not in found[2]["text"], found[2]  # the host's /tmp is not bash's
    assert "from-bash" in found[3]["text"] and not found[3]["error"], found[3]  # read sees bash's /tmp
    assert "from-write" in found[5]["text"], found[5]  # and bash sees what write put there
    assert not Path(shared).exists() and not Path(f"{shared}-w").exists()  # none of it on the host


_READ_KEY = r"""
import ctypes, os, sys
keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(64)
size = libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(11), ctypes.c_long(int(sys.argv[1])), buf, ctypes.c_long(64))
print("read", buf.raw[:size] if size > 0 else os.strerror(ctypes.get_errno()))
found = libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(10), ctypes.c_long(-3), ctypes.c_char_p(b"user"),
                     ctypes.c_char_p(b"omega-attack"), ctypes.c_long(0))
print("search", found if found > 0 else os.strerror(ctypes.get_errno()))
"""

_KEYRING_ATTACK = """
import ctypes, subprocess
add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(1), ctypes.c_long(0))  # a session keyring, as a login has
key = libc.syscall(ctypes.c_long(add_key), ctypes.c_char_p(b"user"), ctypes.c_char_p(b"omega-attack"),
                   ctypes.c_char_p(b"KEY-SECRET"), ctypes.c_long(10), ctypes.c_long(-3))
mine = subprocess.run([sys.executable, str(WS / "key.py"), str(key)], capture_output=True, text=True).stdout

async def main():
    async with Toolbox(policy()) as box:
        found = await call(box, "bash", {"command": f"python3 key.py {key}"})
        print(json.dumps({"key": key, "bash": found, "self": mine}))
anyio.run(main)
"""


def test_bash_cannot_read_a_key_of_the_users_session_keyring() -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("the keyctl syscall numbers of this test are known for x86_64 and aarch64")
    with scenario() as attack:
        (attack.ws / "key.py").write_text(_READ_KEY)
        attack.own(attack.ws / "key.py")
        found = attack.run(_KEYRING_ATTACK)
    assert int(found["key"]) > 0, found
    assert "KEY-SECRET" in found["self"], found  # the key is there for the user's own processes
    assert "KEY-SECRET" not in found["bash"]["text"], found


_SECRETS = {
    ".claude/.credentials.json": "CLAUDE-OAUTH-TOKEN",
    ".claude.json": "CLAUDE-JSON-SERVER-KEY",
    ".codex/auth.json": "CODEX-AUTH-TOKEN",
    ".cache/huggingface/token": "HF-TOKEN",
    ".config/gh/hosts.yml": "GH-TOKEN",
    ".gemini/oauth_creds.json": "GEMINI-TOKEN",
    ".bashrc": "export OPENAI_API_KEY=BASHRC-KEY",
    ".bash_history": "HISTORY-SECRET",
    ".zshrc": "export ANTHROPIC_API_KEY=ZSHRC-KEY",
}


def test_every_common_credential_and_omegas_own_files_are_hidden_from_bash_and_read() -> None:
    with scenario() as attack:
        files = {attack.fakehome / name: secret for name, secret in _SECRETS.items()}
        config = attack.place / "cfg" / "servers.toml"
        files[config] = "CONFIG-SERVER-HEADER-KEY"
        files[attack.home / "servers.toml"] = "HOME-CONFIG-KEY"
        files[attack.home / "sessions" / "s1.jsonl"] = "SAVED-SESSION-SECRET"
        for path, secret in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secret + "\n")
            attack.own(path)
        for directory in {p.parent for p in files}:
            while directory not in (attack.place, attack.place.parent):
                attack.own(directory)
                directory = directory.parent
        paths = [str(p) for p in files]
        program = f"""
async def main():
    async with Toolbox(policy(config_path=Path({str(config)!r}))) as box:
        out = {{"bash": await call(box, "bash", {{"command": "cat " + " ".join({paths!r}) + " 2>&1; echo done"}})}}
        out["read"] = [await call(box, "read", {{"file_path": p}}) for p in {paths!r}]
        print(json.dumps(out))
anyio.run(main)
"""
        found = attack.run(program)
    assert "done" in found["bash"]["text"], found["bash"]
    for secret in files.values():
        assert secret not in found["bash"]["text"], (secret, found["bash"]["text"])
    for path, result in zip(paths, found["read"], strict=True):
        assert result["error"] and "denied" in result["text"], (path, result)


def test_a_hidden_path_stays_hidden_when_a_directory_above_it_is_renamed() -> None:
    with scenario() as attack:
        for sub in ("sub", "other"):
            (attack.ws / sub).mkdir()
            (attack.ws / sub / "secret.txt").write_text(f"HIDDEN-{sub.upper()}\n")
            attack.own(attack.ws / sub, attack.ws / sub / "secret.txt")
        program = """
hidden = (WS / "sub" / "secret.txt", WS / "other" / "secret.txt")
async def main():
    async with Toolbox(policy(hidden=hidden)) as box:
        out = [await call(box, "bash", {"command": "mv sub sub2; echo mv=$?"})]
        out.append(await call(box, "bash", {"command": "cat sub2/secret.txt sub/secret.txt; echo done"}))
        out.append(await call(box, "read", {"file_path": str(WS / "sub2" / "secret.txt")}))
        os.rename(WS / "other", WS / "other2")  # renamed by someone else: `read` knows it by identity
        out.append(await call(box, "read", {"file_path": str(WS / "other2" / "secret.txt")}))
        print(json.dumps({"results": out}))
anyio.run(main)
"""
        found = attack.run(program)["results"]
        assert (attack.ws / "sub" / "secret.txt").exists(), found[0]
    assert "HIDDEN-SUB" not in found[1]["text"], found
    assert found[2]["error"] or "HIDDEN-SUB" not in found[2]["text"], found[2]
    assert found[3]["error"] and "HIDDEN-OTHER" not in found[3]["text"], found[3]
