"""omega run as root (containers, CI): bash is an unprivileged user in its namespace, and nothing outlives omega.

Before, root's bash was root inside its user namespace, with every capability there: it could
ptrace the namespace's init (the trampoline's PID 1), make it forget its parent-death signal, and
so outlive omega after omega was killed. Now bash runs as an unprivileged uid inside (files it
writes are still root's outside), holds no capability, and PID 1 is not dumpable: the attack below
(attach to PID 1, inject `prctl(PR_SET_PDEATHSIG, 0)`) is refused, and killing omega kills it all.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import mcp
import pytest
from mcp import StdioServerParameters

from bash_processes import Markers, assert_gone, wait_running
from waits import deadline

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the root case: run the suite as root (as CI does) to see it"),
]

# Attach to PID 1 and make it run prctl(PR_SET_PDEATHSIG, 0) (x86_64: the syscall instruction it is
# blocked behind is reused), then detach. Prints how far it got.
_DISARM = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
NAMES = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
         "fs_base gs_base ds es fs gs")
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in NAMES.split()]
if libc.ptrace(16, 1, None, None) != 0:  # PTRACE_ATTACH
    print("attach refused:", os.strerror(ctypes.get_errno()), flush=True)
    raise SystemExit(0)
os.waitpid(1, 0x40000000)  # __WALL
saved, regs = Regs(), Regs()
libc.ptrace(12, 1, None, ctypes.byref(saved))  # PTRACE_GETREGS
ctypes.memmove(ctypes.byref(regs), ctypes.byref(saved), ctypes.sizeof(Regs))
regs.rax, regs.rdi, regs.rsi, regs.orig_rax = 157, 1, 0, 2**64 - 1  # prctl(PR_SET_PDEATHSIG, 0)
regs.rip = saved.rip - 2
libc.ptrace(13, 1, None, ctypes.byref(regs))  # PTRACE_SETREGS
libc.ptrace(9, 1, None, None)  # PTRACE_SINGLESTEP
os.waitpid(1, 0x40000000)
libc.ptrace(13, 1, None, ctypes.byref(saved))
libc.ptrace(17, 1, None, None)  # PTRACE_DETACH
print("disarmed", flush=True)
"""


@pytest.fixture
def markers() -> Iterator[Markers]:
    made = Markers()
    yield made
    made.kill_leftovers()


def _config(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "disarm.py").write_text(_DISARM)
    config = tmp_path / "servers.toml"
    config.write_text(f'[sandbox]\nworkspace = "{ws}"\n')
    return config


def _params(tmp_path: Path, config: Path) -> StdioServerParameters:
    env = {"OMEGA_HOME": str(tmp_path / "home"), "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    if os.environ.get("PYTHONPATH"):  # an older checkout under test
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    argv = ["-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "error"]
    return StdioServerParameters(command=sys.executable, args=argv, env=env, cwd=tmp_path)


def _text(result: object) -> str:
    return "".join(getattr(block, "text", "") for block in getattr(result, "content", []))


async def test_roots_bash_is_an_unprivileged_user_whose_files_stay_roots(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with deadline(60):
        async with mcp.Client(_params(tmp_path, config), mode="legacy") as client:
            result = await client.call_tool("bash", {"command": "id -u; grep CapEff /proc/self/status; touch mine"})
    lines = _text(result).split()
    assert lines[0] != "0", lines
    assert lines[1:] == ["CapEff:", "0000000000000000"], lines
    assert (tmp_path / "ws" / "mine").stat().st_uid == 0


async def test_bash_run_by_root_cannot_disarm_its_init_and_outlive_omega(tmp_path: Path, markers: Markers) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the injection of this test is written for x86_64")
    config = _config(tmp_path)
    marker = markers()
    command = f"python3 disarm.py; exec sleep {marker}"
    with deadline(60):
        async with mcp.Client(_params(tmp_path, config), mode="legacy") as client:
            started = await client.call_tool("bash", {"command": command, "run_in_background": True})
            shell_id = _text(started).split()[3].rstrip(".")
            await wait_running(marker)
            said = _text(await client.call_tool("bash_output", {"shell_id": shell_id}))
            for pid in _omegas(config):
                os.kill(pid, signal.SIGKILL)  # no cleanup code runs: only the kernel's death signals
    await assert_gone(marker, bound=10)
    assert "attach refused" in said, said


def _omegas(config: Path) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and str(config).encode() in argv:
                found.append(int(entry.name))
    return found
