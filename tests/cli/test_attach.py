"""`omega-mcp attach` against the shared hub, all real processes: several windows on one hub (their
files, /tmp and shells apart; one process per shared server, one per window for a session server),
the start race, kill -9 of the hub with a window attached, idle exit, `hub status`/`stop`, a peer of
another uid refused, bash unable to reach the socket, and a first tools/list that is complete."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import mcp
import pytest
from mcp import MCPError
from mcp.client.stdio import StdioServerParameters

from waits import deadline, scaled, until, until_sync

ECHO = Path(__file__).parent.parent / "fixtures" / "echo_server.py"


def _config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "hub.toml"
    config.write_text(
        f"[servers.echo]\ncommand = {sys.executable!r}\nargs = [{str(ECHO)!r}]\n"
        f'[servers.sess]\ncommand = {sys.executable!r}\nargs = [{str(ECHO)!r}]\nshare = "session"\n{extra}'
    )
    return config


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "h")}
    env.pop("OMEGA_CONFIG", None)
    return env


def _omega(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def _status(tmp_path: Path, config: Path) -> dict[str, object] | None:
    done = _omega(tmp_path, "hub", "status", "--json", "--config", str(config))
    status = json.loads(done.stdout)
    return status if status.get("running") else None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _hubs(config: Path) -> list[int]:
    """The pids of every `hub serve` process of this config."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and b"hub" in argv and str(config).encode() in argv and _alive(int(entry)):
            found.append(int(entry))
    return found


async def _gone(pid: int, seconds: float = 30) -> None:
    with deadline(seconds):
        while _alive(pid):  # noqa: ASYNC110 - another process, no event to wait on
            await anyio.sleep(0.05)


@pytest.fixture
def stop_hubs(tmp_path: Path) -> Iterator[None]:
    """Whatever the test did, no hub of its config is left running."""
    yield None
    config = tmp_path / "hub.toml"
    _omega(tmp_path, "hub", "stop", "--config", str(config))
    for pid in _hubs(config):
        os.kill(pid, signal.SIGKILL)


@asynccontextmanager
async def _window(tmp_path: Path, config: Path, *flags: str) -> AsyncIterator[mcp.Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "attach", "--config", str(config), *flags],
        env=_env(tmp_path),
        cwd=str(tmp_path),
    )
    async with mcp.Client(params) as client:
        yield client


def _text(result: object) -> str:
    return "".join(getattr(block, "text", "") for block in getattr(result, "content", []))


async def test_windows_share_one_hub_and_each_keeps_its_files_tmp_and_shells(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    wa, wb = tmp_path / "wa", tmp_path / "wb"
    async with (
        _window(tmp_path, config, "--workspace", str(wa)) as a,
        _window(tmp_path, config, "--workspace", str(wb)) as b,
    ):
        shared = [_text(await w.call_tool("mcp__echo__pid", {})) for w in (a, b)]
        assert shared[0] == shared[1]  # one process for the shared server
        session = [_text(await w.call_tool("mcp__sess__pid", {})) for w in (a, b)]
        assert session[0] != session[1]  # one per window for share = "session"

        wrote = await a.call_tool("write", {"file_path": "mine.txt", "content": "a's\n"})
        assert not wrote.is_error, _text(wrote)
        assert (wa / "mine.txt").read_text() == "a's\n" and not (wb / "mine.txt").exists()
        assert (await b.call_tool("read", {"file_path": "mine.txt"})).is_error  # relative: its own workspace
        await b.call_tool("write", {"file_path": str(wa / "mine.txt"), "content": "b's\n"})  # refused, or its own /tmp
        assert (wa / "mine.txt").read_text() == "a's\n"

        assert not (await a.call_tool("bash", {"command": "echo secret > /tmp/a-was-here"})).is_error
        assert "secret" in _text(await a.call_tool("bash", {"command": "cat /tmp/a-was-here"}))
        assert "No such file" in _text(await b.call_tool("bash", {"command": "cat /tmp/a-was-here"}))

        started = _text(await a.call_tool("bash", {"command": "sleep 60", "run_in_background": True}))
        shell = next(word for word in started.replace(".", " ").split() if word.startswith("shell_"))
        theirs = await b.call_tool("bash_output", {"shell_id": shell})
        assert theirs.is_error and "running" not in _text(theirs)
        assert "running" in _text(await a.call_tool("bash_output", {"shell_id": shell}))

        status = _status(tmp_path, config)
        assert status is not None
        windows = status["windows"]
        assert isinstance(windows, list) and {w["workspace"] for w in windows} == {str(wa), str(wb)}
        assert len(_hubs(config)) == 1


async def test_two_windows_starting_at_once_start_one_hub(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    pids: list[str] = []

    async def window() -> None:
        async with _window(tmp_path, config) as client:
            pids.append(_text(await client.call_tool("mcp__echo__pid", {})))
            tools = {t.name for t in (await client.list_tools()).tools}
            assert "mcp__echo__echo" in tools

    async with anyio.create_task_group() as tg:
        tg.start_soon(window)
        tg.start_soon(window)
    assert len(pids) == 2 and pids[0] == pids[1]
    assert len(_hubs(config)) == 1


async def test_a_window_outlives_a_killed_hub(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    async with _window(tmp_path, config) as client:
        assert _text(await client.call_tool("mcp__echo__echo", {"text": "before"})) == "before"
        [hub] = _hubs(config)
        os.kill(hub, signal.SIGKILL)
        await _gone(hub)
        with deadline(60):
            while True:
                try:
                    result = await client.call_tool("mcp__echo__echo", {"text": "after"})
                except MCPError as exc:  # it reached attach while the hub was going: lost, and said so
                    assert "hub restarted" in str(exc)
                    continue
                if not result.is_error:
                    break
                assert "starting" in _text(result)  # the new hub's server is on its way
        assert _text(result) == "after"
        [again] = _hubs(config)
        assert again != hub
        assert "bash" in {t.name for t in (await client.list_tools()).tools}


async def test_the_hub_exits_when_no_window_has_been_attached_for_idle_exit(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path, "[hub]\nidle_exit = 1\n")
    async with _window(tmp_path, config) as client:
        assert not (await client.call_tool("mcp__echo__echo", {"text": "x"})).is_error
        [hub] = _hubs(config)
        echo = int(_text(await client.call_tool("mcp__echo__pid", {})))
    await _gone(hub)
    await _gone(echo)
    assert not list((tmp_path / "h" / "run").glob("*.sock"))


async def test_hub_start_status_and_stop(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    assert _omega(tmp_path, "hub", "status", "--config", str(config)).returncode == 1
    started = _omega(tmp_path, "hub", "start", "--config", str(config))
    assert started.returncode == 0, started.stderr
    assert "2 of 2 servers connected" in started.stdout
    status = _status(tmp_path, config)
    assert status is not None and status["ready"] is True
    servers = {s["name"]: s for s in status["servers"]}  # type: ignore[union-attr]
    assert servers["echo"]["status"] == "connected" and isinstance(servers["echo"]["pid"], int)
    echo = servers["echo"]["pid"]
    text = _omega(tmp_path, "hub", "status", "--config", str(config))
    assert text.returncode == 0 and "echo  connected" in text.stdout and "windows (0)" in text.stdout
    # a window's first tools/list already has every server's tools
    async with _window(tmp_path, config) as client:
        first = {t.name for t in (await client.list_tools()).tools}
        assert {"bash", "mcp__echo__echo", "mcp__sess__echo"} <= first
    hub = status["pid"]
    assert _omega(tmp_path, "hub", "stop", "--config", str(config)).returncode == 0
    assert isinstance(hub, int) and isinstance(echo, int)
    await _gone(hub)
    await _gone(echo)
    assert _omega(tmp_path, "hub", "stop", "--config", str(config)).returncode == 1


async def test_bash_cannot_see_or_reach_the_hub_socket_or_its_greeting(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    async with _window(tmp_path, config, "--mode", "sandbox") as client:
        run = tmp_path / "h" / "run"
        [sock] = run.glob("*.sock")
        await until(lambda: bool(list(run.glob("*.json"))), "the hub's greeting")
        [greeting] = run.glob("*.json")
        probe = (
            f"ls {run}; cat {greeting}; python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); "
            f's.connect("{sock}"); print("CONNECTED")\''
        )
        result = _text(await client.call_tool("bash", {"command": probe}))
        assert "CONNECTED" not in result and sock.name not in result
        assert f"{greeting}: No such file or directory" in result and "instructions" not in result


def test_a_peer_of_another_uid_is_refused(tmp_path: Path, stop_hubs: None) -> None:
    from unprivileged_support import unprivileged

    user = unprivileged()
    if user is None:
        pytest.skip("needs root to run a client as another uid")
    config = _config(tmp_path)
    assert _omega(tmp_path, "hub", "start", "--config", str(config)).returncode == 0
    [sock] = (tmp_path / "h" / "run").glob("*.sock")
    # Open the way to the socket for the other account, so only the hub's own check stands.
    for place in sock.parents:
        if place in (Path("/"), Path("/tmp")):
            break
        place.chmod(place.stat().st_mode | 0o001)
    sock.chmod(0o666)
    client = """if True:
        import os, socket, sys
        os.chdir(os.path.dirname(sys.argv[1]))
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.path.basename(sys.argv[1]))
        s.settimeout(10)
        try:
            s.sendall(b'{"omega": "status"}\\n')
            print(repr(s.recv(1000)))
        except (ConnectionResetError, BrokenPipeError):
            print(repr(b""))
    """
    done = subprocess.run(
        [sys.executable, "-c", client, str(sock)],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/", capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # it did connect
    assert done.stdout.strip() == "b''"  # and was closed without a word
    assert _status(tmp_path, config) is not None  # while the hub still serves its own uid


async def test_a_hub_names_tools_as_the_window_that_started_it_asked(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    async with _window(tmp_path, config, "--client-prefix", "mcp__omega__", "--names", "short") as client:
        assert not (await client.call_tool("mcp__echo__pid", {})).is_error  # the full name is always accepted
        names = {t.name for t in (await client.list_tools()).tools}
        assert "echo__echo" in names and "mcp__echo__echo" not in names


async def test_a_config_file_whose_content_changes_is_reloaded_and_no_server_restarts(
    tmp_path: Path, stop_hubs: None
) -> None:
    config = _config(tmp_path)
    async with _window(tmp_path, config) as client:
        before = _text(await client.call_tool("mcp__echo__pid", {}))
        added = f"[servers.added]\ncommand = {sys.executable!r}\nargs = [{str(ECHO)!r}]\n"
        config.write_text(config.read_text() + added)
        with deadline(30):
            while "mcp__added__echo" not in {t.name for t in (await client.list_tools()).tools}:  # noqa: ASYNC110
                await anyio.sleep(0.2)  # the hub polls the file: nothing in this process to wait on
        assert _text(await client.call_tool("mcp__added__echo", {"text": "new"})) == "new"
        assert _text(await client.call_tool("mcp__echo__pid", {})) == before


class _Pipes:
    """A raw `attach` process on pipes, for the exchanges an SDK client would hide (who answered, and when)."""

    def __init__(self, tmp_path: Path, config: Path, *flags: str, **env: str) -> None:
        self.errors = tmp_path / f"attach-{len(list(tmp_path.glob('attach-*.err')))}.err"
        with self.errors.open("wb") as errors:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "omega_mcp", "attach", "--config", str(config), *flags],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                env={**_env(tmp_path), **env},
                cwd=tmp_path,
            )
        self.buffer = b""

    def send(self, message: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, key: int) -> dict[str, object]:
        """The answer to request `key` (notifications on the way are skipped), bounded."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + scaled(30)
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message = json.loads(line)
                if message.get("id") == key:
                    return message
            left = end - time.monotonic()
            assert left > 0 and select.select([fd], [], [], left)[0], f"no answer to request {key}"
            chunk = os.read(fd, 1 << 16)
            assert chunk, "attach exited"
            self.buffer += chunk

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(scaled(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _hub_answers(
    tmp_path: Path, config: Path, *openings: dict[str, object], workspace: str | None = None
) -> list[dict[str, object]]:
    """What the running hub itself answers to each opening, asked as a window of its own (one per opening,
    its tree's name made `window-ID` as `_same_tree` makes every window's)."""
    [sock_path] = (tmp_path / "h" / "run").glob("*.sock")
    answers = []
    run = os.open(sock_path.parent, os.O_PATH | os.O_DIRECTORY)  # tmp_path makes too long a sun_path
    for opening in openings:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(f"/proc/self/fd/{run}/{sock_path.name}")
            sock.settimeout(scaled(30))
            reader = sock.makefile("rb")
            hello = {"omega": "attach", "window": f"probe{len(answers)}", "workspace": workspace, "pid": os.getpid()}
            sock.sendall(json.dumps(hello).encode() + b"\n")
            assert json.loads(reader.readline())["ok"] is True
            sock.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, **opening}).encode() + b"\n")
            answers.append(_same_tree(json.loads(reader.readline())))
    os.close(run)
    return answers


def _same_tree(answer: dict[str, object]) -> dict[str, object]:
    """`answer` with the window's own tree in its instructions named `window-ID`, whichever window it is."""
    result = answer.get("result")
    if isinstance(result, dict) and isinstance(result.get("instructions"), str):
        text = re.sub(r"/clients/window-[\w-]+", "/clients/window-ID", result["instructions"])
        return {**answer, "result": {**result, "instructions": text}}
    return answer


_INITIALIZE = {
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
_DISCOVER = {
    "method": "server/discover",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
}


def _greeted(tmp_path: Path, config: Path) -> Path:
    """Start and stop the hub once, so that run/ holds its greeting for `config`; the start lock's path."""
    assert _omega(tmp_path, "hub", "start", "--config", str(config)).returncode == 0
    run = tmp_path / "h" / "run"
    until_sync(lambda: bool(list(run.glob("*.json"))), "the hub's greeting")
    assert _omega(tmp_path, "hub", "stop", "--config", str(config)).returncode == 0
    [lock] = run.glob("*.lock")
    return lock


@contextmanager
def _held(lock: Path) -> Iterator[None]:
    """Hold the hub's start lock: no hub can start for this config until it is let go."""
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield None
    finally:
        os.close(fd)


def test_a_cold_window_is_answered_at_once_in_both_eras_and_its_first_list_waits_for_the_hub(
    tmp_path: Path, stop_hubs: None
) -> None:
    config = _config(tmp_path)
    lock = _greeted(tmp_path, config)
    handshake, modern, probing = _Pipes(tmp_path, config), _Pipes(tmp_path, config), _Pipes(tmp_path, config)
    try:
        with _held(lock):  # no hub can start: whatever answers now is attach alone
            handshake.send({"id": 1, **_INITIALIZE})
            modern.send({"id": 7, **_DISCOVER})
            probing.send({"id": 1, "method": "server/discover"})  # no 2026 envelope: the handshake follows
            probing.send({"id": 2, **_INITIALIZE})
            answered = _same_tree(handshake.answer(1)), _same_tree(modern.answer(7))
            probed = probing.answer(1), _same_tree(probing.answer(2))
            assert not _hubs(config)
            handshake.send({"method": "notifications/initialized"})
            handshake.send({"id": 2, "method": "tools/list"})
        listed = handshake.answer(2)  # once the hub the window starts is up
        names = {t["name"] for t in listed["result"]["tools"]}  # type: ignore[index]
        assert {"bash", "mcp__echo__echo", "mcp__sess__echo"} <= names
        # what attach answered is what the hub itself answers
        assert list(answered) == _hub_answers(tmp_path, config, {"id": 1, **_INITIALIZE}, {"id": 7, **_DISCOVER})
        assert answered[0]["result"]["protocolVersion"] == "2025-06-18"  # type: ignore[index]
        assert probed[0]["error"]["code"] == -32601  # type: ignore[index]  # as the hub answers it
        assert probed[0] == _hub_answers(tmp_path, config, {"id": 1, "method": "server/discover"})[0]
        assert probed[1] == {**answered[0], "id": 2}
    finally:
        for window in (handshake, modern, probing):
            window.close()


def test_a_window_is_told_its_own_workspace_and_tree_at_once_and_by_the_hub(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    lock = _greeted(tmp_path, config)
    hub_workspace, own = tmp_path / "h" / "workspace", tmp_path / "project"
    own.mkdir()
    handshake, modern = (_Pipes(tmp_path, config, "--workspace", str(own)) for _ in range(2))
    other_mode = _Pipes(tmp_path, config, "--workspace", str(own), "--mode", "rx")
    try:
        with _held(lock):  # no hub: attach answers from the greeting alone
            handshake.send({"id": 1, **_INITIALIZE})
            modern.send({"id": 2, **_DISCOVER})
            answered = handshake.answer(1), modern.answer(2)
            other_mode.send({"id": 1, **_INITIALIZE})
        for answer in answered:
            text = str(answer["result"]["instructions"])  # type: ignore[index]
            assert f"are the workspace {own}." in text and f"only under {own}, " in text
            assert str(hub_workspace) not in text and "clients/@hub" not in text
            [tree] = re.findall(r"(/\S+/clients/window-[\w-]+)/scratch", text)
            assert Path(tree).parent == tmp_path / "h" / "clients"
        # Another mode than the hub's: only the hub can tell (its answer comes once the lock is let go).
        text = str(other_mode.answer(1)["result"]["instructions"])  # type: ignore[index]
        assert "Sandbox mode rx" in text and f"workspace {own}." in text
        # The hub's own answers to a window of that workspace are the same (each window's tree its own).
        hub = _hub_answers(tmp_path, config, {"id": 1, **_INITIALIZE}, {"id": 2, **_DISCOVER}, workspace=str(own))
        assert [_same_tree(a) for a in answered] == hub
    finally:
        for window in (handshake, modern, other_mode):
            window.close()


def test_a_greeting_for_other_config_content_is_not_used(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    lock = _greeted(tmp_path, config)
    config.write_text(config.read_text() + f"[servers.added]\ncommand = {sys.executable!r}\nargs = [{str(ECHO)!r}]\n")
    window = _Pipes(tmp_path, config)
    try:
        with _held(lock):
            window.send({"id": 1, **_INITIALIZE})
        instructions = window.answer(1)["result"]["instructions"]  # type: ignore[index]
        assert "added (mcp__added__*)" in str(instructions)  # the new hub's answer, not the old greeting's
    finally:
        window.close()


def test_a_window_answered_at_once_whose_hub_cannot_start_is_served_in_process(tmp_path: Path, stop_hubs: None) -> None:
    config = _config(tmp_path)
    _greeted(tmp_path, config)
    # The naming a window hands the hub it starts, made one the hub refuses: that hub exits at once.
    window = _Pipes(tmp_path, config, OMEGA_HUB_CLIENT_PREFIX="not a prefix!")
    try:
        window.send({"id": 1, **_INITIALIZE})
        assert "result" in window.answer(1)
        window.send({"method": "notifications/initialized"})
        window.send(
            {"id": 2, "method": "tools/call", "params": {"name": "mcp__echo__echo", "arguments": {"text": "x"}}}
        )
        called = window.answer(2)
        assert called["result"]["content"][0]["text"] == "x", called  # type: ignore[index]
        assert not _hubs(config)
    finally:
        window.close()
    assert "the hub exited with status 2" in window.errors.read_text()
    assert "serving in-process instead" in window.errors.read_text()


def test_the_hub_log_is_rotated_past_its_size_keeping_one_older_file(tmp_path: Path) -> None:
    from omega_mcp.cli.attach import rotate_log

    log = tmp_path / "hub.log"
    log.write_bytes(b"old\n" * 10)
    assert not rotate_log(str(log), limit=1000) and not (tmp_path / "hub.log.1").exists()
    assert rotate_log(str(log), limit=40)
    assert (tmp_path / "hub.log.1").read_bytes() == b"old\n" * 10 and not log.exists()
    log.write_bytes(b"newer\n" * 10)
    assert rotate_log(str(log), limit=40)
    assert (tmp_path / "hub.log.1").read_bytes() == b"newer\n" * 10  # one older file, no more
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub.log.1"]


def test_a_running_hub_goes_on_in_a_new_log_once_its_own_is_too_big(tmp_path: Path) -> None:
    log = tmp_path / "hub.log"
    code = (
        "import sys\n"
        "from omega_mcp.cli.hubd import rotate_own_log\n"
        "print('before ' * 20, flush=True)\n"
        "assert not rotate_own_log(sys.argv[1], limit=10_000)\n"
        "assert rotate_own_log(sys.argv[1], limit=100)\n"
        "print('after', flush=True)\n"
        "sys.stderr.write('after on stderr\\n')\n"
    )
    with log.open("ab") as out:
        done = subprocess.run([sys.executable, "-c", code, str(log)], stdout=out, stderr=out, timeout=60, check=False)
    assert done.returncode == 0, (tmp_path / "hub.log.1").read_text() if (tmp_path / "hub.log.1").exists() else ""
    assert (tmp_path / "hub.log.1").read_text().startswith("before ")
    assert log.read_text().splitlines()[-2:] == ["after", "after on stderr"]


def test_a_hub_started_on_a_log_past_its_size_starts_a_new_one(
    tmp_path: Path, stop_hubs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omega_mcp.cli.attach import LOG_BYTES, address_of

    config = _config(tmp_path)
    monkeypatch.setenv("OMEGA_HOME", str(tmp_path / "h"))
    log = Path(address_of(str(config)).log)
    log.parent.mkdir(parents=True)
    with log.open("wb") as big:
        big.truncate(LOG_BYTES)  # sparse: its size is what counts
    assert _omega(tmp_path, "hub", "start", "--config", str(config)).returncode == 0
    assert Path(f"{log}.1").stat().st_size == LOG_BYTES
    assert 0 < log.stat().st_size < LOG_BYTES
