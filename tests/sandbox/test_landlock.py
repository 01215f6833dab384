from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from omega_mcp.sandbox import probe
from omega_mcp.sandbox.child import exec as trampoline
from omega_mcp.sandbox.child import landlock

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux-only")

# Restricting is irreversible, so every restriction happens in a child interpreter.
_CHILD = """
import os, socket, sys
from omega_mcp.sandbox.child import landlock
ws, outside, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
landlock.restrict_self(landlock.abi_version(), writable=[ws], devices=["/dev/null"], deny_tcp=True)
def attempt(name, fn):
    try:
        fn()
        print(name, "ok")
    except OSError as exc:
        print(name, type(exc).__name__)
def write(path):
    with open(path, "w") as f:
        f.write("x")
def connect():
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
attempt("ws", lambda: write(os.path.join(ws, "inside.txt")))
attempt("outside", lambda: write(os.path.join(outside, "pwn.txt")))
attempt("devnull", lambda: write("/dev/null"))
attempt("read", lambda: open(os.path.join(outside, "secret.txt")).read())
attempt("tcp", connect)
print("nnp", open("/proc/self/status").read().split("NoNewPrivs:")[1].split()[0])
"""


@pytest.fixture(autouse=True)
def _fresh_probe() -> Iterator[None]:
    probe.clear_cache()
    yield
    probe.clear_cache()


def test_abi_version_reports_a_landlock_abi_with_tcp_rules() -> None:
    assert landlock.abi_version() >= 4


@pytest.mark.parametrize(
    ("abi", "rights"),
    [
        (0, 0),
        (1, (1 << 13) - 1),
        (2, (1 << 14) - 1),
        (3, (1 << 15) - 1),
        (4, (1 << 15) - 1),
        (5, (1 << 16) - 1),
        (7, (1 << 16) - 1),
    ],
)
def test_fs_rights_grow_with_the_abi(abi: int, rights: int) -> None:
    assert landlock.fs_rights(abi) == rights


def test_restricted_process_writes_only_granted_roots_and_cannot_connect(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(ws), str(outside), str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines == {
        "ws": "ok",
        "outside": "PermissionError",
        "devnull": "ok",
        "read": "ok",
        "tcp": "PermissionError",
        "nnp": "1",
    }
    assert not (outside / "pwn.txt").exists()
    assert (ws / "inside.txt").read_text() == "x"


def test_a_file_given_as_writable_root_gets_file_rights_only(tmp_path: Path) -> None:
    target = tmp_path / "one.txt"
    target.write_text("")
    code = (
        "import sys; from omega_mcp.sandbox.child import landlock\n"
        "landlock.restrict_self(landlock.abi_version(), writable=[sys.argv[1]])\n"
        "open(sys.argv[1], 'w').write('written')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "written"


def test_restrict_self_without_landlock_raises_a_landlock_error() -> None:
    with pytest.raises(landlock.LandlockError, match="not available"):
        landlock.restrict_self(0)


def test_probe_sees_enforced_landlock_and_working_namespaces() -> None:
    found = probe.support()
    assert found.platform == "linux"
    assert found.landlock_abi == landlock.abi_version()
    assert found.landlock_enforced
    assert found.pid_namespace
    assert found.mount_proc
    assert found.detail == ""


def test_callers_asking_at_once_share_one_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    # `serve` starts the bash zygote (which asks first) in a thread while its main thread describes
    # the sandbox: a second caller waits for the probe under way instead of running another one.
    runs: list[list[str]] = []
    running, second = threading.Event(), threading.Event()
    real_run = subprocess.run

    def counted_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        runs.append(argv)
        running.set()
        if len(runs) > 1:
            second.set()
        second.wait(1)  # bounded: the second caller gets here within it only when it is not held back
        return real_run(argv, **kwargs)

    monkeypatch.setattr(probe.subprocess, "run", counted_run)
    found: list[probe.Support] = []
    first = threading.Thread(target=lambda: found.append(probe.support()))
    first.start()
    assert running.wait(30)
    found.append(probe.support())
    first.join(30)
    assert len(runs) == 1
    assert len(found) == 2 and found[0] == found[1]


def test_forcing_the_probe_off_reports_no_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(probe.FORCE_NO_LANDLOCK_ENV, "1")
    found = probe.support()
    assert found.landlock_abi == 0
    assert not found.landlock_enforced
    assert probe.FORCE_NO_LANDLOCK_ENV in found.detail


def test_trampoline_parses_options_in_order() -> None:
    spec = trampoline.parse(
        ["--rw", "/a", "--pin", "/p", "--protect", "/q", "--pidns", "--rlimit", "fsize=10", "--", "bash", "-c", "x"]
    )
    assert spec.writable == ["/a"]
    assert spec.binds == [("pin", "/p"), ("protect", "/q")]
    assert spec.pidns
    assert spec.rlimits == [("fsize", 10)]
    assert spec.command == ["bash", "-c", "x"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus", "1", "--", "true"], "unknown option"),
        (["--rw"], "needs a value"),
        (["--rlimit", "stack=1", "--", "true"], "unknown rlimit"),
        (["--rw", "/a"], "no command"),
    ],
)
def test_trampoline_rejects_bad_options(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        trampoline.parse(argv)


def test_trampoline_failure_exits_125_without_running_the_command() -> None:
    done = subprocess.run(
        [*probe.TRAMPOLINE_ARGV, "--bogus", "x", "--", "/bin/echo", "ran"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == trampoline.EXIT_SANDBOX_FAILURE
    assert "omega-mcp sandbox:" in done.stderr
    assert "ran" not in done.stdout


def test_trampoline_refuses_when_its_expected_parent_is_gone() -> None:
    done = subprocess.run(
        [*probe.TRAMPOLINE_ARGV, "--parent-pid", "1", "--", "/bin/echo", "ran"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == trampoline.EXIT_SANDBOX_FAILURE
    assert "server exited" in done.stderr
    assert "ran" not in done.stdout


def test_trampoline_mirrors_the_exit_status() -> None:
    done = subprocess.run(
        [*probe.TRAMPOLINE_ARGV, "--pidns", "--", "/bin/bash", "-c", "exit 7"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 7
