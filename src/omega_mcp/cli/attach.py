"""`omega-mcp attach`: a stdio MCP server for one client window, relayed to the user's shared hub.

This module imports the standard library only (and nothing of omega's that would load the SDK,
anyio or pydantic): it runs once per window, so its cost is paid per window. `python -m omega_mcp
attach` reaches it from `__main__` before the rest of the command line is imported. It finds the
hub for the resolved config file (`$OMEGA_HOME/run/hub-<hash of the path>.sock`, the directory
0700), starting it detached when none answers (`omega-mcp hub serve`, logging to
`$OMEGA_HOME/logs/`; a lock file in run/ makes two windows starting at once start one), says who it
is in one hello line (its window id, workspace, mode), then copies newline-delimited JSON-RPC both
ways. It watches the lines only to know the client's `initialize` and which requests are in flight:
when the hub goes away, each of those gets an error saying the hub restarted, and attach finds or
starts a new hub and re-opens its session there by replaying the `initialize` (its answer
swallowed) and `notifications/initialized`. Where the socket cannot be used (no run directory, a
config found implicitly in the current directory, which the in-process trust check must judge, a
hub that does not start), it says why on stderr and becomes `omega-mcp serve` with the same flags.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import selectors
import socket
import sys
import time
from pathlib import Path

__all__ = ["HubAddress", "address_of", "main", "request", "start_hub"]

_START_SECONDS = 90.0
_LOST = "the hub restarted while this call was in flight; call again"
_REPLAY = "omega-attach-replay-"
_CLOSING_SECONDS = 30.0
"""After the client closed stdin, how long its requests still in flight may take to be answered."""


class HubAddress:
    """Where the shared hub of one config file lives: its socket, start lock and log."""

    def __init__(self, home: Path, config: Path | None) -> None:
        self.home = home
        self.config = config
        digest = hashlib.sha256(str(config or "").encode()).hexdigest()[:16]
        self.run_dir = home / "run"
        self.socket = self.run_dir / f"hub-{digest}.sock"
        self.lock = self.run_dir / f"hub-{digest}.lock"
        self.log = home / "logs" / f"hub-{digest}.log"

    def prepare(self) -> None:
        """Make `run/` (0700, ours) and `logs/`.

        Raises:
            OSError: they cannot be made, or run/ is not ours alone.
        """
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self.run_dir.stat()
        if info.st_uid != os.getuid():
            raise OSError(errno.EPERM, f"{self.run_dir} belongs to uid {info.st_uid}")
        if info.st_mode & 0o077:
            os.chmod(self.run_dir, 0o700)
        self.log.parent.mkdir(parents=True, exist_ok=True)

    def connect(self) -> socket.socket | None:
        """A connection to the hub, or None when none listens."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        text = str(self.socket)
        fd = -1
        try:
            if len(text.encode()) >= 100:  # sun_path holds 108 bytes: reach a long path through its directory
                fd = os.open(self.run_dir, os.O_PATH | os.O_DIRECTORY)
                text = f"/proc/self/fd/{fd}/{self.socket.name}"
            sock.connect(text)
        except OSError:
            sock.close()
            return None
        finally:
            if fd >= 0:
                os.close(fd)
        return sock


def omega_home() -> Path:
    return Path(os.path.expanduser(os.environ.get("OMEGA_HOME") or "~/.omega")).absolute()


def resolve_config(flag: str | None) -> tuple[Path | None, bool]:
    """The config file as `serve` finds it, resolved, and whether it was found implicitly in the cwd."""
    if flag:
        return Path(os.path.realpath(os.path.expanduser(flag))), False
    env = os.environ.get("OMEGA_CONFIG")
    if env:
        return Path(os.path.realpath(os.path.expanduser(env))), False
    here = Path.cwd() / "servers.toml"
    if here.is_file():
        return Path(os.path.realpath(here)), True
    home = omega_home() / "servers.toml"
    return (Path(os.path.realpath(home)), False) if home.is_file() else (None, False)


def address_of(flag: str | None) -> HubAddress:
    return HubAddress(omega_home(), resolve_config(flag)[0])


def _read_line(sock: socket.socket, seconds: float) -> dict[str, object] | None:
    sock.settimeout(seconds)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    return _object(data)


def _object(data: bytes) -> dict[str, object] | None:
    """A JSON object, else None."""
    try:
        found: object = json.loads(data)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    items: dict[object, object] = found  # pyright: ignore[reportUnknownVariableType]
    return {str(k): v for k, v in items.items()}


def request(address: HubAddress, what: str, seconds: float = 10.0, **fields: object) -> dict[str, object] | None:
    """One control request to the running hub (`status`, `stop`, `ready`); None when no hub answers."""
    sock = address.connect()
    if sock is None:
        return None
    try:
        sock.settimeout(seconds)
        sock.sendall(json.dumps({"omega": what, **fields}).encode() + b"\n")
        return _read_line(sock, seconds)
    except OSError:
        return None
    finally:
        sock.close()


def start_hub(address: HubAddress, naming: tuple[str | None, str | None] = (None, None)) -> socket.socket:
    """A connection to the hub, started detached if none runs (one start at a time, by the lock); a hub
    it starts names tools as `naming` says (`--client-prefix`, `--names` of the window; None: `[hub]`'s).

    Raises:
        OSError: it could not be started, or did not listen in time (the message says why).
    """
    sock = address.connect()
    if sock is not None:
        return sock
    deadline = time.monotonic() + _START_SECONDS
    lock = os.open(address.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OSError(errno.ETIMEDOUT, "another omega has been starting the hub for too long") from None
                time.sleep(0.05)
        sock = address.connect()  # the window that held the lock started it
        if sock is not None:
            return sock
        import subprocess  # only to start the hub: not on a window's way when one runs

        argv = [sys.executable, "-P", "-m", "omega_mcp", "hub", "serve"]
        if address.config is not None:
            argv += ["--config", str(address.config)]
        env = {**os.environ, "OMEGA_HOME": str(address.home)}
        env.pop("OMEGA_CONFIG", None)
        for key, value in zip(("OMEGA_HUB_CLIENT_PREFIX", "OMEGA_HUB_NAMES"), naming, strict=True):
            if value is not None:
                env[key] = value
        with open(address.log, "ab") as log, open(os.devnull, "rb") as nothing:
            proc = subprocess.Popen(
                argv, stdin=nothing, stdout=log, stderr=log, cwd=address.run_dir, env=env, start_new_session=True
            )
        while True:
            sock = address.connect()
            if sock is not None:
                return sock
            code = proc.poll()
            if code is not None:
                raise OSError(errno.ECHILD, f"the hub exited with status {code} (its log: {address.log})")
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT, f"the hub did not listen within {_START_SECONDS:g} s ({address.log})")
            time.sleep(0.02)
    finally:
        os.close(lock)


class _Options:
    def __init__(self, argv: list[str]) -> None:
        import argparse

        parser = argparse.ArgumentParser(
            prog="omega-mcp attach",
            description="stdio MCP server for one client window, served by the user's shared hub for this config",
        )
        # The same flags and help as cli/main.py's `attach` parser, without importing it (no SDK here).
        parser.add_argument("--config", metavar="PATH", help="servers.toml to use (found as for serve)")
        parser.add_argument("--mode", choices=("sandbox", "rx", "rwx"), help="this window's sandbox mode")
        parser.add_argument("--workspace", metavar="DIR", help="this window's workspace")
        parser.add_argument("--client-prefix", metavar="PREFIX", help="as for serve")
        parser.add_argument("--names", choices=("full", "short"), help="as for serve")
        parser.add_argument("--log-level", metavar="LEVEL", help="as for serve")
        self.args = parser.parse_args(argv)
        self.argv = argv


def _hello(options: _Options, window: str) -> bytes:
    args = options.args
    workspace = os.path.abspath(os.path.expanduser(args.workspace)) if args.workspace else None
    hello = {
        "omega": "attach",
        "window": window,
        "workspace": workspace,
        "mode": args.mode,
        "client_prefix": args.client_prefix,
        "names": args.names,
        "pid": os.getpid(),
    }
    return json.dumps(hello).encode() + b"\n"


def _open(address: HubAddress, hello: bytes) -> socket.socket:
    """A window's connection to the hub (started if needed), its hello answered.

    A connection closed before the answer is tried again (bounded): a hub that was killed may leave
    its listening socket for a moment with a child that is dying too.

    Raises:
        OSError: no hub could be reached or started.
        ValueError: the hub refused the window (the message says why).
    """
    deadline = time.monotonic() + _START_SECONDS
    asked = json.loads(hello)
    while True:
        sock = start_hub(address, (asked.get("client_prefix"), asked.get("names")))
        try:
            sock.settimeout(30)
            sock.sendall(hello)
        except OSError:
            answer = None
        else:
            answer = _read_line(sock, 120)  # a hub that just started answers once its server is built
        if answer is not None:
            break
        sock.close()
        if time.monotonic() > deadline:
            raise OSError(errno.ECONNRESET, "the hub closed the connection")
        time.sleep(0.1)
    if answer.get("ok") is not True:
        sock.close()
        raise ValueError(str(answer.get("error")))
    for key, flag in (("client_prefix", "--client-prefix"), ("names", "--names")):
        if asked.get(key) is not None and answer.get(key) is not None and asked.get(key) != answer.get(key):
            hub, mine = answer.get(key), asked.get(key)
            _say(f"the running hub names tools with {flag} {hub!r}, not {mine!r} (the window that started it did)")
    sock.setblocking(False)
    return sock


class _Relay:
    """Copies lines between stdin/stdout and the hub socket, re-opening the hub when it goes away."""

    def __init__(self, address: HubAddress, hello: bytes, sock: socket.socket) -> None:
        self.address, self.hello, self.sock = address, hello, sock
        self.to_hub = bytearray()
        self.to_client = bytearray()
        self.from_client = bytearray()
        self.from_hub = bytearray()
        self.in_flight: dict[str, bytes] = {}  # json of the id -> the id's raw JSON
        self.initialize: bytes | None = None
        self.initialized: bytes | None = None
        self.swallow: set[str] = set()
        self.replays = 0
        self.client_open = True
        self.closing = 0.0
        self.shut = False
        os.set_blocking(0, False)
        os.set_blocking(1, False)

    def _from_client_line(self, line: bytes) -> None:
        message = _object(line)
        if message is not None:
            method, key = message.get("method"), message.get("id")
            if method == "initialize":
                self.initialize = line
            elif method == "notifications/initialized":
                self.initialized = line
            if isinstance(method, str) and key is not None:
                self.in_flight[json.dumps(key)] = json.dumps(key).encode()
        self.to_hub += line + b"\n"

    def _from_hub_line(self, line: bytes) -> None:
        message = _object(line)
        if message is not None and "method" not in message and "id" in message:
            key = json.dumps(message.get("id"))
            if key in self.swallow:
                self.swallow.discard(key)
                return
            self.in_flight.pop(key, None)
        self.to_client += line + b"\n"

    def _lost(self) -> None:
        """The hub went away: fail what was in flight, find or start another, re-open the session."""
        self.sock.close()
        for raw in self.in_flight.values():
            error = b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"%s"}}\n' % (raw, _LOST.encode())
            self.to_client += error
        self.in_flight.clear()
        self.swallow.clear()
        self.to_hub.clear()
        self.from_hub.clear()
        _say("the hub went away; attaching to a new one")
        self.sock = _open(self.address, self.hello)
        if self.initialize is not None:
            message = json.loads(self.initialize)
            self.replays += 1
            replay_id = f"{_REPLAY}{self.replays}"
            message["id"] = replay_id
            self.swallow.add(json.dumps(replay_id))
            self.to_hub += json.dumps(message).encode() + b"\n"
            if self.initialized is not None:
                self.to_hub += self.initialized + b"\n"

    def run(self) -> int:
        selector = selectors.PollSelector()  # poll, unlike epoll, takes regular files (always ready)
        try:
            return self._loop(selector)
        finally:
            selector.close()
            self.sock.close()

    def _loop(self, selector: selectors.BaseSelector) -> int:
        while True:
            if not self.client_open:
                if not self.to_hub and not self.to_client and (not self.in_flight or time.monotonic() > self.closing):
                    return 0
                self._end_hub_side()
            wanted: list[tuple[int, int]] = []
            if self.client_open:
                wanted.append((0, selectors.EVENT_READ))
            wanted.append((self.sock.fileno(), selectors.EVENT_READ | (selectors.EVENT_WRITE if self.to_hub else 0)))
            if self.to_client:
                wanted.append((1, selectors.EVENT_WRITE))
            for fd in list(selector.get_map() or {}):
                selector.unregister(fd)
            for fd, events in wanted:
                selector.register(fd, events)
            for key, events in selector.select(None if self.client_open else 1.0):
                fd = key.fd
                if fd == 0:
                    self._read_client()
                elif fd == 1:
                    self._write_client()
                else:
                    if events & selectors.EVENT_READ and not self._read_hub():
                        if not self.client_open:
                            return 0
                        self._lost()
                        break
                    if events & selectors.EVENT_WRITE and self.to_hub and not self._write_hub():
                        self._lost()
                        break

    def _read_client(self) -> None:
        try:
            data = os.read(0, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.client_open = False
            self.closing = time.monotonic() + _CLOSING_SECONDS
            if self.from_client:
                self._from_client_line(bytes(self.from_client))
                self.from_client.clear()
            return
        self.from_client += data
        *lines, rest = bytes(self.from_client).split(b"\n")
        self.from_client[:] = rest
        for line in lines:
            if line.strip():
                self._from_client_line(line)

    def _write_client(self) -> None:
        try:
            written = os.write(1, self.to_client)
        except BlockingIOError:
            return
        except OSError:  # the client went away
            self.client_open = False
            self.to_client.clear()
            return
        del self.to_client[:written]

    def _read_hub(self) -> bool:
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        self.from_hub += data
        *lines, rest = bytes(self.from_hub).split(b"\n")
        self.from_hub[:] = rest
        for line in lines:
            if line.strip():
                self._from_hub_line(line)
        return True

    def _write_hub(self) -> bool:
        try:
            sent = self.sock.send(self.to_hub)
        except BlockingIOError:
            return True
        except OSError:
            return False
        del self.to_hub[:sent]
        return True

    def _end_hub_side(self) -> None:
        """The client left: once its requests are answered, the hub ends the window (our end of the socket)."""
        if not self.to_hub and not self.in_flight and not self.shut:
            self.shut = True
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def _say(text: str) -> None:
    sys.stderr.write(f"omega-mcp attach: {text}\n")
    sys.stderr.flush()


def _serve_instead(options: _Options, why: str) -> int:
    """Serve in-process, as `omega-mcp serve` with the same flags (nothing was read from stdin yet)."""
    _say(f"{why}; serving in-process instead (omega-mcp serve)")
    argv = [sys.executable, "-P", "-m", "omega_mcp", "serve", *options.argv]
    os.execv(sys.executable, argv)  # noqa: S606 - becomes serve, on the same stdin/stdout
    return 2  # not reached


def main(argv: list[str]) -> int:
    """`omega-mcp attach [flags]`: relay this window to the shared hub; the exit code."""
    options = _Options(argv)
    config, implicit = resolve_config(options.args.config)
    if implicit:
        return _serve_instead(options, f"{config} was found in the current directory (the hub takes --config only)")
    if config is not None and not config.is_file():
        return _serve_instead(options, f"{config} does not exist")
    address = HubAddress(omega_home(), config)
    hello = _hello(options, f"{os.getpid()}-{os.urandom(3).hex()}")
    try:
        address.prepare()
        sock = _open(address, hello)
    except ValueError as exc:
        _say(f"the hub refused this window: {exc}")
        return 2
    except OSError as exc:
        return _serve_instead(options, f"the shared hub cannot be used: {exc.strerror or exc}")
    try:
        return _Relay(address, hello, sock).run()
    except (OSError, ValueError) as exc:
        _say(f"the hub cannot be reached again: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
