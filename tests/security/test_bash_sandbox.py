"""bash under the OS sandbox, as real processes started the way the bash tool starts them.

Each command runs through the bash zygote, as the bash tool runs it (`launch_support`: new
session, stdin /dev/null, stderr into stdout); a timeout kills the process group. Survivors are
found by a unique `sleep` argument in /proc/*/cmdline. A few tests start the trampoline (which
confined stdio servers use) from `bash_launch`'s argv.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import launch_support
from omega_mcp.errors import SandboxUnavailableError
from omega_mcp.sandbox import probe
from omega_mcp.sandbox.child import exec as trampoline
from omega_mcp.sandbox.launch import bash_launch, describe_sandbox
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline, until_sync

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock sandbox is Linux-only")

_BOUND_SECONDS = 20.0


@pytest.fixture(autouse=True)
def _fresh_probe() -> Iterator[None]:
    probe.clear_cache()
    yield
    probe.clear_cache()


def _policy(tmp_path: Path, **changes: Any) -> SandboxPolicy:
    for name in ("home", "ws", "tmp", "outside"):
        (tmp_path / name).mkdir(exist_ok=True)
    base = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=tmp_path / "ws", tmp_dir=tmp_path / "tmp")
    return replace(base, **changes)


def _run(policy: SandboxPolicy, command: str, timeout: float = _BOUND_SECONDS) -> tuple[int, str]:
    """Run like the bash tool: wait for the command, then kill its group (leftovers included)."""
    return launch_support.run(policy, command, timeout)


def _output(policy: SandboxPolicy, command: str) -> str:
    return _run(policy, command)[1]


def _marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**9}"


def _with_marker(marker: str) -> list[int]:
    """Pids whose argv has `marker` as a whole argument (the `sleep MARKER` processes)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv:
                found.append(int(entry))
    return found


def _wait_for(predicate: Any, what: str, bound: float = 10.0) -> None:
    until_sync(predicate, what, bound)


def _kill_leftovers(marker: str) -> None:
    for pid in _with_marker(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- filesystem ------------------------------------------------------------------------------


def test_write_to_etc_is_denied(tmp_path: Path) -> None:
    out = _output(_policy(tmp_path), "echo x > /etc/omega-sandbox-test; echo rc=$?")
    assert "rc=1" in out
    assert "Permission denied" in out
    assert not Path("/etc/omega-sandbox-test").exists()


def test_write_to_home_outside_the_roots_is_denied(tmp_path: Path) -> None:
    name = f".omega-sandbox-test-{uuid.uuid4().hex}"
    target = Path.home() / name
    try:
        out = _output(_policy(tmp_path), f'echo x > "$HOME/{name}"; echo rc=$?')
        assert "rc=1" in out
        assert "Permission denied" in out
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)


def test_mv_out_of_the_workspace_is_denied(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    (tmp_path / "ws" / "f.txt").write_text("data")
    out = _output(policy, f"mv f.txt {tmp_path / 'outside'}/; echo rc=$?")
    assert "rc=1" in out
    assert (tmp_path / "ws" / "f.txt").read_text() == "data"
    assert not (tmp_path / "outside" / "f.txt").exists()


def test_hard_links_across_the_workspace_boundary_are_denied(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    (tmp_path / "ws" / "f.txt").write_text("data")
    (tmp_path / "outside" / "secret.txt").write_text("secret")
    out = _output(
        policy,
        f"ln f.txt {tmp_path / 'outside' / 'hl'}; echo out_rc=$?; "
        f"ln {tmp_path / 'outside' / 'secret.txt'} hl; echo in_rc=$?",
    )
    assert "out_rc=1" in out
    assert "in_rc=1" in out
    assert not (tmp_path / "outside" / "hl").exists()
    assert not (tmp_path / "ws" / "hl").exists()


def test_cp_over_omegas_config_is_denied(tmp_path: Path) -> None:
    config = tmp_path / "home" / "servers.toml"
    policy = _policy(tmp_path, config_path=config)
    config.write_text("[sandbox]\nmode = 'sandbox'\n")
    (tmp_path / "ws" / "evil.toml").write_text("[sandbox]\nmode = 'rwx'\n")
    out = _output(policy, f"cat {config}; cp evil.toml {config}; echo rc=$?")
    assert "mode = 'sandbox'" not in out  # hidden: bash sees an empty file (a read-only /dev/null)
    assert "rwx" not in config.read_text()


def test_config_inside_the_workspace_is_read_only_for_bash(tmp_path: Path) -> None:
    config = tmp_path / "ws" / "servers.toml"
    policy = _policy(tmp_path, config_path=config)
    config.write_text("original\n")
    out = _output(
        policy,
        "cp /dev/null servers.toml; echo cp_rc=$?; mv servers.toml moved.toml; echo mv_rc=$?; "
        "cd .. && mv ws ws2; echo mvdir_rc=$?; cd ws && echo ok > other.txt; echo ws_rc=$?",
    )
    assert "cp_rc=1" in out
    assert "mv_rc=1" in out
    assert "mvdir_rc=1" in out
    assert "ws_rc=0" in out
    assert config.read_text() == "original\n"
    assert (tmp_path / "ws" / "other.txt").read_text() == "ok\n"
    assert str(config) in str(describe_sandbox(policy)["protected_read_only"])


def test_omega_home_under_real_tmp_is_out_of_reach_except_scratch(tmp_path: Path) -> None:
    # tmp_path lives under /tmp, which bash sees as a private /tmp of its own: omega's home is not
    # there at all, only the write roots (the workspace, scratch) are bound back.
    policy = _policy(tmp_path, tmp_dir=Path("/tmp"))
    assert Path("/tmp") in policy.home.parents
    (tmp_path / "home" / "servers.toml").write_text("original\n")
    out = _output(
        policy,
        f"echo ok > {policy.scratch_dir}/x; echo scratch_rc=$?; cat {policy.home}/servers.toml; "
        f"echo evil > {policy.home}/servers.toml; mv {policy.home} {policy.home}.moved; "
        f"mv {tmp_path} {tmp_path}.moved; echo done",
    )
    assert "scratch_rc=0" in out and "done" in out
    assert "original" not in out
    assert (tmp_path / "home" / "servers.toml").read_text() == "original\n"
    assert (policy.scratch_dir / "x").read_text() == "ok\n"
    assert policy.home.is_dir() and not Path(f"{policy.home}.moved").exists()


def test_the_servers_interpreter_and_package_stay_read_only_inside_a_write_root(tmp_path: Path) -> None:
    # Rewriting them would run code outside the sandbox on the next trampoline start.
    prefix = Path(sys.prefix).resolve()
    package = Path(probe.__file__).resolve().parent.parent
    root = prefix.parent
    if len(root.parts) < 3:
        pytest.skip(f"the interpreter prefix {prefix} is too close to / to make its parent writable")
    name = f".omega-sandbox-test-{uuid.uuid4().hex}"
    probes = [prefix / name, package / name, root / name]
    try:
        out = _output(
            _policy(tmp_path, write_roots=(root,)),
            f"touch {prefix / name}; echo prefix=$?; touch {package / name}; echo package=$?; "
            f"touch {root / name}; echo root=$?",
        )
        assert "prefix=1" in out
        assert "package=1" in out
        assert "root=0" in out
        assert [p.exists() for p in probes] == [False, False, True]
    finally:
        for path in probes:
            path.unlink(missing_ok=True)


def test_dev_null_mktemp_workspace_and_tmp_dir_writes_work(tmp_path: Path) -> None:
    code, out = _run(
        _policy(tmp_path),
        'echo x > /dev/null && f=$(mktemp) && echo t > "$f" && echo w > in-ws.txt && echo s > "$TMPDIR/s" '
        '&& echo c > "$XDG_CACHE_HOME/c" && echo done "$f"',
    )
    assert code == 0, out
    assert "done" in out
    assert out.split()[-1].startswith(str(tmp_path / "tmp"))
    assert (tmp_path / "ws" / "in-ws.txt").read_text() == "w\n"


def test_real_tmp_is_writable_when_it_is_the_tmp_dir(tmp_path: Path) -> None:
    code, out = _run(_policy(tmp_path, tmp_dir=Path("/tmp")), 'f=$(mktemp) && echo hi > "$f" && cat "$f" && rm "$f"')
    assert code == 0, out
    assert out.strip() == "hi"


def test_write_roots_are_writable(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    code, out = _run(_policy(tmp_path, write_roots=(extra,)), f"echo e > {extra}/e.txt")
    assert code == 0, out
    assert (extra / "e.txt").read_text() == "e\n"


# --- network ---------------------------------------------------------------------------------


def _connect_command(port: int) -> str:
    return f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected || echo refused"


def test_loopback_tcp_connect_is_refused_in_sandbox_mode(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        out = _output(_policy(tmp_path), _connect_command(listener.getsockname()[1]))
    assert "refused" in out
    assert "connected" not in out


def test_loopback_tcp_connect_works_in_rx_mode(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        out = _output(_policy(tmp_path, mode="rx"), _connect_command(listener.getsockname()[1]))
    assert "connected" in out


# --- environment -----------------------------------------------------------------------------


def test_env_shows_no_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {"FAKE_API_KEY": "fk-1", "MY_TOKEN": "tok-2", "DB_PASSWORD": "pw-3", "OPENAI_API_KEY": "sk-4"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    code, out = _run(_policy(tmp_path), "env")
    assert code == 0
    for name, value in secrets.items():
        assert name not in out
        assert value not in out
    assert "OMEGA_SANDBOX=sandbox" in out


def test_env_passthrough_passes_one_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "tok-pass")
    monkeypatch.setenv("OTHER_TOKEN", "tok-other")
    out = _output(_policy(tmp_path, env_passthrough=("MY_TOKEN",)), "env")
    assert "MY_TOKEN=tok-pass" in out
    assert "tok-other" not in out


# --- resource limits -------------------------------------------------------------------------


async def test_process_count_is_capped_and_the_next_command_works(tmp_path: Path) -> None:
    policy = _policy(tmp_path, max_processes=40)
    marker = _marker()
    seen = b""
    try:
        process = await launch_support.start(policy, f"for i in $(seq 2000); do sleep {marker} & done; echo finished")
        try:
            capped = False
            try:
                with deadline(_BOUND_SECONDS):
                    async for chunk in process.stdout:
                        seen += chunk
                        if b"Resource temporarily unavailable" in seen:
                            capped = True
                            break
                count = len(_with_marker(marker))
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        finally:
            await process.aclose()
        assert capped, f"fork never failed: {seen[-200:]!r}"
        # pid_max = max_processes + 300 in the namespace: never anywhere near 2000.
        assert 40 <= count <= 40 + 300, count
        _wait_for(lambda: not _with_marker(marker), "the capped processes to die")
    finally:
        _kill_leftovers(marker)
    code, out = await launch_support.run_async(policy, "echo next")
    assert (code, out) == (0, "next\n")


def test_file_size_is_capped_and_the_next_command_works(tmp_path: Path) -> None:
    policy = _policy(tmp_path, max_file_size_mb=1)
    out = _output(policy, "head -c 5M /dev/zero > big; echo rc=$?; stat -c %s big")
    assert "rc=153" in out  # 128 + SIGXFSZ
    assert (tmp_path / "ws" / "big").stat().st_size == 1024 * 1024
    assert _run(policy, "echo next") == (0, "next\n")


def test_memory_limit_stops_a_large_allocation(tmp_path: Path) -> None:
    allocate = f"{sys.executable} -I -S -c 'bytearray(512 * 2**20)'; echo rc=$?"
    assert "MemoryError" in _output(_policy(tmp_path, memory_mb=128), allocate)
    assert "rc=0" in _output(_policy(tmp_path), allocate)


def test_core_dumps_are_disabled_and_limits_are_visible(tmp_path: Path) -> None:
    out = _output(_policy(tmp_path, max_open_files=256), "ulimit -c; ulimit -n")
    assert out.split() == ["0", "256"]


# --- process tree ----------------------------------------------------------------------------


def _detached_sleep(marker: str) -> str:
    """Start `setsid sleep MARKER`; print "started" once it runs (bounded wait inside bash)."""
    return (
        f"setsid sleep {marker} > /dev/null 2>&1 & "
        f"for i in $(seq 200); do grep -q {marker} /proc/$!/cmdline 2>/dev/null && echo started && break; "
        "sleep 0.05; done"
    )


def test_setsid_child_does_not_survive_the_command(tmp_path: Path) -> None:
    marker = _marker()
    try:
        out = _output(_policy(tmp_path), _detached_sleep(marker))
        assert out == "started\n"
        _wait_for(lambda: not _with_marker(marker), "the setsid child to die")
    finally:
        _kill_leftovers(marker)


async def test_leftovers_die_by_themselves_when_nobody_kills_the_group(tmp_path: Path) -> None:
    marker = _marker()
    try:
        process = await launch_support.start(_policy(tmp_path), _detached_sleep(marker))
        try:
            with deadline(_BOUND_SECONDS):
                out = b"".join([chunk async for chunk in process.stdout])
                assert (await process.wait(), out) == (0, b"started\n")
        finally:
            await process.aclose()  # closes our ends only: nobody kills the group
        _wait_for(lambda: not _with_marker(marker), "the leftover to die", bound=trampoline.LINGER_SECONDS + 5)
    finally:
        _kill_leftovers(marker)


@pytest.mark.parametrize("kill", ["group", "leader"])
async def test_setsid_child_does_not_survive_a_kill(tmp_path: Path, kill: str) -> None:
    marker, fg = _marker(), _marker()
    process = await launch_support.start(_policy(tmp_path), f"setsid sleep {marker} & sleep {fg}")
    try:
        _wait_for(lambda: _with_marker(marker) and _with_marker(fg), "the sleeps to start")
        if kill == "group":
            os.killpg(process.pid, signal.SIGKILL)  # what the bash tool does on timeout
        else:
            os.kill(process.pid, signal.SIGKILL)  # only the command's PID 1: its namespace dies with it
        with deadline(_BOUND_SECONDS):
            assert await process.wait() == -signal.SIGKILL
        _wait_for(lambda: not _with_marker(marker) and not _with_marker(fg), "the tree to die")
    finally:
        await process.aclose()
        _kill_leftovers(marker)
        _kill_leftovers(fg)


_SERVER = """
import json, sys
from pathlib import Path
import anyio
from omega_mcp.sandbox import zygote_client
from omega_mcp.sandbox.launch import bash_launch
from omega_mcp.sandbox.policy import SandboxPolicy
paths, command = json.loads(sys.argv[1]), sys.argv[2]
policy = SandboxPolicy(mode="sandbox", **{k: Path(v) for k, v in paths.items()})

async def main():
    await zygote_client.start(bash_launch(policy, command))
    print("spawned", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.read)

anyio.run(main)
"""


def test_nothing_outlives_a_crashed_server(tmp_path: Path) -> None:
    _policy(tmp_path)
    marker = _marker()
    paths = {"home": str(tmp_path / "home"), "workspace": str(tmp_path / "ws"), "tmp_dir": str(tmp_path / "tmp")}
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, json.dumps(paths), f"setsid sleep {marker} & wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        _wait_for(lambda: _with_marker(marker), "the sleep to start")
        server.kill()
        server.wait(timeout=_BOUND_SECONDS)
        _wait_for(lambda: not _with_marker(marker), "the orphaned tree to die")
    finally:
        _kill_leftovers(marker)
        server.kill()
        server.communicate(timeout=5)


def test_the_command_sees_its_own_pid_namespace(tmp_path: Path) -> None:
    code, out = _run(_policy(tmp_path), "echo $$; kill -TERM $$; echo not-reached")
    assert out == "2\n"
    assert code == -signal.SIGTERM  # reported as bash's own death by that signal


# --- availability ----------------------------------------------------------------------------


def test_landlock_unavailable_refuses_and_names_the_opt_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(probe.FORCE_NO_LANDLOCK_ENV, "1")
    policy = _policy(tmp_path)
    with pytest.raises(SandboxUnavailableError, match="require_os_sandbox = false"):
        bash_launch(policy, "echo hi")
    assert describe_sandbox(policy)["bash"] == "refused"


def test_opting_out_runs_unconfined_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(probe.FORCE_NO_LANDLOCK_ENV, "1")
    policy = _policy(tmp_path, require_os_sandbox=False)
    out = _output(policy, f"echo x > {tmp_path / 'outside' / 'free.txt'}; echo rc=$?")
    assert "rc=0" in out
    info = describe_sandbox(policy)
    assert info["bash"] == "unconfined"
    assert "WITHOUT OS confinement" in str(info["warnings"])


def test_rwx_mode_is_unconfined_but_scrubbed_and_contained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_API_KEY", "fk-rwx")
    policy = _policy(tmp_path, mode="rwx", max_file_size_mb=1)
    out = _output(
        policy, f"echo x > {tmp_path / 'outside' / 'free.txt'}; echo rc=$?; env; head -c 3M /dev/zero > big; echo fs=$?"
    )
    assert "rc=0" in out
    assert "fk-rwx" not in out
    assert "fs=153" in out
    assert describe_sandbox(policy)["confinement"] == "none"


def test_describe_sandbox_reports_the_effective_sandbox(tmp_path: Path) -> None:
    policy = _policy(tmp_path, max_processes=64)
    info = describe_sandbox(policy)
    assert info["mode"] == "sandbox"
    assert info["bash"] == "confined"
    assert info["confinement"] == "landlock"
    assert info["landlock_abi"] == probe.support().landlock_abi
    assert info["pid_namespace"] is True
    assert info["write_roots"] == [str(tmp_path / "ws"), str(policy.scratch_dir), str(tmp_path / "tmp"), "/dev/shm"]
    assert info["private_proc"] is True
    assert str(info["process_limit"]).startswith("pid namespace: 64 processes")
    assert "denied" in str(info["network"])
    assert info["limits"] == {"max_processes": 64, "max_file_size_mb": 4096, "max_open_files": 8192, "memory_mb": None}
    assert json.loads(json.dumps(info)) == info
    rx = describe_sandbox(replace(policy, mode="rx"))
    assert rx["network"] == "allowed"


# -- a root swapped for a symbolic link after omega started ------------------------------------


def test_a_write_root_replaced_by_a_symlink_is_not_granted_on_the_next_call(tmp_path: Path) -> None:
    extra = tmp_path / "tmp" / "extra"  # a write root inside another writable root (the tmp dir)
    extra.mkdir(parents=True)
    victim = tmp_path / "outside" / "victim"
    policy = _policy(tmp_path, write_roots=(extra,))
    victim.mkdir()
    _, out = _run(policy, f"mv {extra} {extra}.old; echo rc=$?")
    assert "rc=1" in out and "busy" in out, out  # bash cannot: the root is a mount point in its /tmp
    extra.rename(f"{extra}.old")  # someone else can
    extra.symlink_to(victim)
    _, out = _run(policy, f"echo pwned > {extra}/f; echo rc=$?")
    assert not (victim / "f").exists(), out
    assert "no longer the directory omega started with" in out


def test_bash_refuses_a_workspace_that_was_replaced_by_a_symlink(tmp_path: Path) -> None:
    workspace = tmp_path / "tmp" / "ws"  # the workspace inside the (writable) tmp dir
    workspace.mkdir(parents=True)
    victim = tmp_path / "outside"
    policy = _policy(tmp_path, workspace=workspace)
    _, out = _run(policy, f"cd /; mv {workspace} {workspace}.old; echo rc=$?")
    assert "rc=1" in out and "busy" in out, out
    workspace.rename(f"{workspace}.old")
    workspace.symlink_to(victim)
    with pytest.raises(SandboxUnavailableError, match="no longer the directory omega started with"):
        bash_launch(policy, "echo pwned > f")
    assert not (victim / "f").exists()


def test_the_trampoline_grants_no_write_root_reached_through_a_symlink(tmp_path: Path) -> None:
    # The last line of defence, without the launcher's check: the trampoline itself refuses links.
    policy = _policy(tmp_path)
    real = tmp_path / "outside" / "real"
    real.mkdir(parents=True)
    link = tmp_path / "tmp" / "link"
    link.symlink_to(real)
    launch = bash_launch(policy, f"echo pwned > {link}/f; echo rc=$?")
    argv = list(launch.argv)
    argv.insert(argv.index("--"), "--rw")
    argv.insert(argv.index("--"), str(link))
    proc = subprocess.run(argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True, timeout=_BOUND_SECONDS)
    assert not (real / "f").exists(), proc.stdout + proc.stderr
