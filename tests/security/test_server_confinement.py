"""A confined downstream server cannot do what a malicious one would; the same server unconfined can.

One real `omega-mcp serve` (an SDK client over stdio) runs the stdlib hostile fixture
(tests/fixtures/hostile_server.py) six times: `h` confined with nothing declared (`[sandbox] servers =
"confined"`), `u` with `sandbox = "none"`, `h2` another confined server, and `net`, `granted` and `ro`
with one declaration each. Its tool `attempt` answers `allowed: ...` or `denied: ...`; each denial is
also checked where it would show on the host (no file appeared, no connection was queued).

What the servers must not reach lies outside /tmp, under /var/tmp: a confined server has a private
/tmp, so a target under pytest's tmp_path would prove nothing. omega runs with HOME set to a fake home
there (the default hidden paths expand `~` from omega's $HOME) and with secret-looking variables set.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp import StdioServerParameters

from bash_processes import Markers, pids_with_arg
from waits import deadline, scaled, until_sync

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux-only")

HOSTILE = Path(__file__).parents[1] / "fixtures" / "hostile_server.py"
_BOUND_SECONDS = 15.0
_SECRET = "SECRET-KEY-0f4e"
_OMEGA_ENV = {"FOO_TOKEN": "token-value-1", "OPENAI_API_KEY": "sk-test-2"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope: the tests below share one omega


def _outside_tmp() -> Path:
    """A fresh directory outside /tmp (which a confined server sees as its own private tmpfs)."""
    if not os.path.isdir("/var/tmp"):
        pytest.skip("needs /var/tmp: a directory outside /tmp that confined servers share with the host")
    return Path(tempfile.mkdtemp(prefix="omega-confine-", dir="/var/tmp"))


def _hostile(name: str, sandbox: str | None = None, *args: str, env: str = "") -> str:
    lines = [f"[servers.{name}]", 'command = "${OMEGA_PYTHON}"', f"args = {json.dumps([str(HOSTILE), *args])}"]
    lines += [f"sandbox = {sandbox}"] if sandbox is not None else []
    lines += [f"env = {env}"] if env else []
    return "\n".join(lines) + "\n"


class _Queue:
    """A host listener (TCP, or a pathname UNIX socket) whose backlog shows who connected: the kernel
    completes a connect before any accept, so a connection that got through is waiting in it."""

    def __init__(self, family: int, address: tuple[str, int] | str) -> None:
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.bind(address)
        self.socket.listen(8)
        self.socket.setblocking(False)

    def taken(self) -> int:
        count = 0
        while True:
            try:
                peer, _ = self.socket.accept()
            except BlockingIOError:
                return count
            peer.close()
            count += 1


class _UdpEcho:
    """A host UDP echo server on 127.0.0.1 (a thread) that counts the datagrams it got."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.1)
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.socket.recvfrom(64)
            except TimeoutError:
                continue
            self.received += 1
            self.socket.sendto(data, peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=scaled(_BOUND_SECONDS))
        self.socket.close()


@dataclass
class World:
    """The host side: a fake home with a secret, places outside every root, listeners."""

    base: Path
    home: Path
    omega_home: Path
    outside: Path
    granted: Path
    tcp: _Queue
    unix: _Queue
    udp: _UdpEcho

    @property
    def port(self) -> int:
        return self.tcp.socket.getsockname()[1]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    base = _outside_tmp()
    home, omega_home, outside, granted = base / "home", base / "omega", base / "outside", base / "granted"
    for directory in (home / ".ssh", omega_home, outside, granted):
        directory.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(_SECRET)
    (omega_home / "token").write_text(_SECRET)
    tcp = _Queue(socket.AF_INET, ("127.0.0.1", 0))
    unix = _Queue(socket.AF_UNIX, str(base / "agent.sock"))  # listening before the servers start
    udp = _UdpEcho()
    try:
        yield World(base, home, omega_home, outside, granted, tcp, unix, udp)
    finally:
        udp.close()
        tcp.socket.close()
        unix.socket.close()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Hub:
    """omega serving the hostile servers, and omega's pid on the host."""

    client: mcp.Client
    omega_pid: int

    async def attempt(self, server: str, action: str, target: str | Path = "", port: int = 0) -> str:
        arguments: dict[str, object] = {"action": action, "target": str(target), "port": port}
        with deadline(_BOUND_SECONDS):
            result = await self.client.call_tool(f"mcp__{server}__attempt", arguments)
        assert not result.is_error, result
        text = result.content[0].text  # type: ignore[union-attr]
        assert text.startswith(("allowed: ", "denied: ")), text
        return text


def _serve_params(world: World, config: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "error"],
        env={"OMEGA_HOME": str(world.omega_home), "HOME": str(world.home), **_OMEGA_ENV},
        cwd=world.base,
    )


@pytest.fixture(scope="module")
async def hub(world: World) -> AsyncIterator[Hub]:
    config = world.base / "servers.toml"
    config.write_text(
        '[sandbox]\nservers = "confined"\n'
        + _hostile("h", None, env='{ MYVAR = "given" }')  # h starts first: h2's directory is not made yet
        + _hostile("u", '"none"', env='{ MYVAR = "given" }')
        + _hostile("h2")
        + _hostile("net", "{ network = true }")
        + _hostile("granted", f"{{ write_roots = [{json.dumps(str(world.granted))}] }}")
        + _hostile("ro", "{ read_only = true }")
    )
    async with mcp.Client(_serve_params(world, config), mode="legacy") as client:
        yield Hub(client, _omega_pid(await Hub(client, 0).attempt("u", "env")))


def _omega_pid(env: str) -> int:
    """omega's pid on the host, from the environment it gives every server (`recursion.MARKER`)."""
    pid = int(dict(line.split("=", 1) for line in env.removeprefix("allowed: ").splitlines())["OMEGA_MCP_PARENT_PID"])
    assert b"omega_mcp" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return pid


@pytest.fixture
def host_tmp() -> Iterator[Callable[[str], Path]]:
    """Unique paths in the host's /tmp, removed afterwards."""
    made: list[Path] = []

    def make(name: str) -> Path:
        made.append(Path(f"/tmp/omega-confine-{uuid.uuid4().hex}-{name}"))
        return made[-1]

    yield make
    for path in made:
        path.unlink(missing_ok=True)


def _denied(text: str) -> bool:
    return text.startswith("denied: ")


async def test_it_cannot_write_outside_its_roots(hub: Hub, world: World):
    for target in (world.outside / "h.txt", world.home / ".bashrc", world.omega_home / "servers.toml"):
        assert _denied(await hub.attempt("h", "write", target))
        assert not target.exists()
    assert _denied(await hub.attempt("h", "write", world.granted / "h.txt"))  # granted to another server only
    assert not (world.granted / "h.txt").exists()
    assert (await hub.attempt("u", "write", world.outside / "u.txt")).startswith("allowed")
    assert (world.outside / "u.txt").read_text() == "planted"


async def test_its_tmp_is_private(hub: Hub, host_tmp: Callable[[str], Path]):
    host_file, planted = host_tmp("host"), host_tmp("planted")
    host_file.write_text(_SECRET)
    assert _denied(await hub.attempt("h", "read", host_file))
    assert (await hub.attempt("u", "read", host_file)).startswith("allowed")
    assert (await hub.attempt("h", "write", planted)).startswith("allowed")  # into its own tmpfs
    assert not planted.exists()
    assert (await hub.attempt("h", "read", planted)).startswith("allowed")  # and it stays there


async def test_secrets_are_hidden(hub: Hub, world: World):
    environ = Path(f"/proc/{hub.omega_pid}/environ")  # its private /proc has no such pid
    for target in (world.home / ".ssh" / "id_rsa", environ):
        assert _denied(await hub.attempt("h", "read", target))
        assert (await hub.attempt("u", "read", target)).startswith("allowed")
    token = world.omega_home / "token"  # a hidden file is covered by an empty one
    hidden = await hub.attempt("h", "read", token)
    assert hidden == "allowed: read b''" or _denied(hidden), hidden
    assert _SECRET in await hub.attempt("u", "read", token)
    listing = await hub.attempt("h", "list", world.home / ".ssh")
    assert "id_rsa" not in listing


async def test_it_cannot_read_another_servers_directory(hub: Hub, world: World):
    own = (await hub.attempt("h2", "cwd")).removeprefix("allowed: ")
    assert own == str(world.omega_home / "servers" / "h2")
    memory = Path(own) / "memory.json"
    assert (await hub.attempt("h2", "write", memory)).startswith("allowed")
    assert memory.read_text() == "planted"
    assert (await hub.attempt("h2", "read", memory)).startswith("allowed")
    assert _denied(await hub.attempt("h", "read", memory))  # h started before h2's directory existed
    assert "memory.json" not in await hub.attempt("h", "list", own)
    assert _denied(await hub.attempt("h", "write", Path(own) / "planted.json"))
    assert (await hub.attempt("u", "read", memory)).startswith("allowed")


async def test_it_reaches_no_host_network_or_unix_socket(hub: Hub, world: World):
    assert _denied(await hub.attempt("h", "tcp", port=world.port))
    assert world.tcp.taken() == 0
    assert _denied(await hub.attempt("h", "udp", port=world.udp.socket.getsockname()[1]))
    assert world.udp.received == 0
    assert _denied(await hub.attempt("h", "unix", world.base / "agent.sock"))
    assert world.unix.taken() == 0

    assert (await hub.attempt("u", "tcp", port=world.port)).startswith("allowed")
    assert world.tcp.taken() == 1
    assert (await hub.attempt("u", "udp", port=world.udp.socket.getsockname()[1])).startswith("allowed")
    assert world.udp.received == 1
    assert (await hub.attempt("u", "unix", world.base / "agent.sock")).startswith("allowed")
    assert world.unix.taken() == 1


async def test_network_true_allows_tcp_but_not_host_unix_sockets(hub: Hub, world: World):
    assert (await hub.attempt("net", "tcp", port=world.port)).startswith("allowed")
    assert world.tcp.taken() == 1
    assert _denied(await hub.attempt("net", "unix", world.base / "agent.sock"))
    assert world.unix.taken() == 0
    assert _denied(await hub.attempt("net", "write", world.outside / "net.txt"))


async def test_it_cannot_signal_omega_or_other_host_processes(hub: Hub):
    for pid in (hub.omega_pid, os.getpid()):
        assert _denied(await hub.attempt("h", "kill", str(pid)))
    assert (await hub.attempt("u", "kill", str(hub.omega_pid))).startswith("allowed")


async def test_its_environment_has_no_secrets_but_its_own_env(hub: Hub):
    for server in ("h", "u"):
        env = (await hub.attempt(server, "env")).removeprefix("allowed: ")
        names = {line.split("=", 1)[0] for line in env.splitlines()}
        assert not names & set(_OMEGA_ENV), env
        assert not any(value in env for value in _OMEGA_ENV.values())
        assert "MYVAR=given" in env.splitlines()


async def test_its_cwd_defaults_to_its_own_directory(hub: Hub, world: World):
    for server in ("h", "h2", "net", "ro"):
        assert await hub.attempt(server, "cwd") == f"allowed: {world.omega_home / 'servers' / server}"


async def test_write_roots_are_writable(hub: Hub, world: World):
    target = world.granted / "out.txt"
    assert (await hub.attempt("granted", "write", target)).startswith("allowed")
    assert target.read_text() == "planted"
    assert _denied(await hub.attempt("granted", "write", world.outside / "granted.txt"))


async def test_read_only_denies_writing_its_cwd(hub: Hub, world: World, host_tmp: Callable[[str], Path]):
    target = world.omega_home / "servers" / "ro" / "state.json"
    assert _denied(await hub.attempt("ro", "write", target))
    assert not target.exists()
    planted = host_tmp("planted")
    assert (await hub.attempt("ro", "write", planted)).startswith("allowed")  # its private /tmp only
    assert not planted.exists()
    assert (await hub.attempt("h", "write", world.omega_home / "servers" / "h" / "state.json")).startswith("allowed")


# --- Processes: a confined server's daemon dies with omega, even when omega is SIGKILLed ---------


def _message(message_id: int, method: str, params: dict[str, object]) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": message_id, "method": method, "params": params}) + "\n").encode()


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    until_sync(predicate, what, _BOUND_SECONDS)


def _answer(fd: int, message_id: int) -> dict[str, Any]:
    """The answer to request `message_id` on omega's stdout (past other answers and notifications)."""
    deadline, pending = time.monotonic() + scaled(_BOUND_SECONDS), b""  # scaled like every bound
    while True:
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            message = json.loads(line)
            if message.get("id") == message_id:
                return message
        left = deadline - time.monotonic()
        assert left > 0 and select.select([fd], [], [], left)[0], f"no answer to request {message_id}"
        chunk = os.read(fd, 65536)
        assert chunk, "omega closed its stdout"
        pending += chunk


@pytest.fixture
def markers() -> Iterator[Markers]:
    made = Markers()
    yield made
    made.kill_leftovers()


@pytest.mark.parametrize("how", ["stdin closed", "SIGKILL"])
def test_nothing_a_confined_server_started_outlives_omega(how: str, markers: Markers):
    base = _outside_tmp()
    server_marker, daemon_marker = markers(), markers()
    config = base / "servers.toml"
    config.write_text('[sandbox]\nservers = "confined"\n' + _hostile("h", None, server_marker))
    env = {**os.environ, "OMEGA_HOME": str(base / "omega")}
    env.pop("OMEGA_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "omega_mcp", "serve", "--config", str(config)],
        env=env,
        cwd=base,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        proc.stdin.write(_message(1, "initialize", hello))
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        call = {"name": "mcp__h__attempt", "arguments": {"action": "spawn", "target": daemon_marker}}
        proc.stdin.write(_message(2, "tools/call", call))
        proc.stdin.flush()
        answer = _answer(proc.stdout.fileno(), 2)
        assert answer["result"]["content"][0]["text"].startswith("allowed: spawned"), answer
        _wait_for(lambda: bool(pids_with_arg(daemon_marker)), "the daemon started")
        assert pids_with_arg(server_marker)
        if how == "SIGKILL":
            proc.send_signal(signal.SIGKILL)
        else:
            proc.stdin.close()
        proc.wait(timeout=_BOUND_SECONDS)
        gone = lambda: not pids_with_arg(daemon_marker) and not pids_with_arg(server_marker)  # noqa: E731
        _wait_for(gone, f"the server or its daemon outlived omega ({how})")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        shutil.rmtree(base, ignore_errors=True)


# --- Status text: a server that needs a write root it was not given --------------------------------


def _tools(base: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMEGA_HOME": str(base / "omega"), "HOME": str(base / "home")}
    env.pop("OMEGA_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", "tools", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=base,
        timeout=60,
    )


def test_a_missing_write_root_is_named_in_the_status_and_declaring_it_fixes_the_start():
    base = _outside_tmp()
    try:
        state = base / "home" / ".state"
        state.mkdir(parents=True)
        config = base / "servers.toml"
        server = _hostile("d", None, "--die-writing", str(state / "state.json"))
        config.write_text('[sandbox]\nservers = "confined"\n' + server)
        failed = _tools(base, config)
        assert failed.returncode == 1, failed.stderr
        want = "denied write to ~/.state/state.json (the server is confined): add '~/.state' to "
        want += "servers.d.sandbox.write_roots"
        assert want in failed.stdout, failed.stdout
        assert not (state / "state.json").exists()

        config.write_text('[sandbox]\nservers = "confined"\n' + server + 'sandbox = { write_roots = ["~/.state"] }\n')
        started = _tools(base, config)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "d: connected" in started.stdout
        assert (state / "state.json").read_text() == "state"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_confined_server_refused_on_loopback_is_told_to_set_network_true():
    from omega_mcp.sandbox import probe

    support = probe.support()
    if not (support.net_namespace and support.landlock_enforced):
        pytest.skip(f"needs a network namespace and Landlock: {support.detail}")
    base = _outside_tmp()
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # on the host: the server's own loopback has nothing there
        connect = f"import socket; socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=5)"
        config = base / "servers.toml"
        config.write_text(
            f'[sandbox]\nservers = "confined"\n\n[servers.db]\ncommand = "${{OMEGA_PYTHON}}"\n'
            f"args = {json.dumps(['-c', connect])}\n"
        )
        failed = _tools(base, config)
        assert failed.returncode == 1, failed.stderr
        line = next(line for line in failed.stdout.splitlines() if line.startswith("db: failed:"))
        assert "connection refused: the server is confined without network" in line, line
        assert "set servers.db.sandbox.network = true" in line
    finally:
        listener.close()
        shutil.rmtree(base, ignore_errors=True)
