"""`omega-mcp attach`: a stdio MCP server for one client window, relayed to the user's shared hub.

This module runs once per window, so what it imports is paid per window: only what the
interpreter has built in or compiled (`_socket`, `select`, `fcntl`, `_blake2`, and the relay's
`_json`), not `json`, `re`, `pathlib`, `socket` or `argparse` (which only a malformed command line
loads, for its message), and nothing of omega's but its version. The console script and `python -m
omega_mcp attach` reach it before the rest of the command line is imported. It finds the hub for
the resolved config file (`$OMEGA_HOME/run/hub-<hash of the path>.sock`, the directory 0700),
starting it detached when none answers (`omega-mcp hub serve`, logging to `$OMEGA_HOME/logs/`,
rotated by size; a lock file in run/ makes two windows starting at once start one), says who it is
in one hello line (its window id, workspace, mode), then relays (cli/attach_relay.py). When the last
hub for this config content and omega version left its greeting in run/ (its own answers to
`initialize` and `server/discover`), the opening is answered at once while the hub is reached or
started. Where the socket cannot be used (no run directory, a config found implicitly in the
current directory, which the in-process trust check must judge, a hub that does not start), it
says why on stderr and serves as `omega-mcp serve` with the same flags.
"""

from __future__ import annotations

import _socket
import _thread
import errno
import fcntl
import os
import sys
import time

from omega_mcp.cli.attach_relay import Greeting, HubEnd, Relay, dumps, object_of
from omega_mcp.version import __version__

TYPE_CHECKING = False  # not `typing`: one per window
if TYPE_CHECKING:
    import subprocess

try:
    from _blake2 import blake2b as _blake2b
except ImportError:  # an interpreter built without its own hashes
    from hashlib import blake2b as _blake2b

__all__ = ["HubAddress", "address_of", "digest", "main", "omega_home", "request", "rotate_log", "start_hub"]

_START_SECONDS = 90.0
LOG_BYTES = 8 << 20
"""The hub's log is rotated past this size (one old file is kept: `hub-<hash>.log.1`)."""
_FLAGS = {"--config", "--mode", "--workspace", "--client-prefix", "--names", "--log-level"}
_CHOICES = {"--mode": ("sandbox", "rx", "rwx"), "--names": ("full", "short")}


def digest(data: bytes) -> str:
    """The hash naming a hub's files (of its config's path) and dating its greeting (of the content)."""
    return _blake2b(data, digest_size=16).hexdigest()


class HubAddress:
    """Where the shared hub of one config file lives: its socket, start lock, greeting and log."""

    def __init__(self, home: str, config: str | None) -> None:
        self.home = home
        self.config = config
        name = f"hub-{digest((config or '').encode())}"
        self.run_dir = os.path.join(home, "run")
        self.socket = os.path.join(self.run_dir, f"{name}.sock")
        self.lock = os.path.join(self.run_dir, f"{name}.lock")
        self.greeting = os.path.join(self.run_dir, f"{name}.json")
        self.log = os.path.join(home, "logs", f"{name}.log")
        self.started: list[int | None] = []
        """For each hub this process started, its exit status once it has exited (else None)."""

    def prepare(self) -> None:
        """Make `run/` (0700, ours) and `logs/`.

        Raises:
            OSError: they cannot be made, or run/ is not ours alone.
        """
        os.makedirs(self.run_dir, mode=0o700, exist_ok=True)
        info = os.stat(self.run_dir)
        if info.st_uid != os.getuid():
            raise OSError(errno.EPERM, f"{self.run_dir} belongs to uid {info.st_uid}")
        if info.st_mode & 0o077:
            os.chmod(self.run_dir, 0o700)
        os.makedirs(os.path.dirname(self.log), exist_ok=True)

    def connect(self) -> _socket.socket | None:
        """A connection to the hub, or None when none listens."""
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        text = self.socket
        fd = -1
        try:
            if len(text.encode()) >= 100:  # sun_path holds 108 bytes: reach a long path through its directory
                fd = os.open(self.run_dir, os.O_PATH | os.O_DIRECTORY)
                text = f"/proc/self/fd/{fd}/{os.path.basename(self.socket)}"
            sock.connect(text)
        except OSError:
            sock.close()
            return None
        finally:
            if fd >= 0:
                os.close(fd)
        return sock

    def read_greeting(self) -> Greeting | None:
        """The greeting the last hub for this config wrote, if it is for this content and omega version."""
        try:
            with open(self.greeting, "rb") as file:
                found = object_of(file.read())
            content = b""
            if self.config is not None:
                with open(self.config, "rb") as file:
                    content = file.read()
        except OSError:
            return None
        if found is None or found.get("omega") != __version__ or found.get("config") != digest(content):
            return None
        answers = found.get("answers")
        if not isinstance(answers, dict):
            return None
        items: dict[object, object] = answers  # pyright: ignore[reportUnknownVariableType]
        # Each answer goes out as it is, inside one line: one that could end the line is no answer.
        return Greeting(
            {str(k): v for k, v in items.items() if isinstance(v, str) and "\n" not in v and "\r" not in v},
            found.get("window"),
        )


def omega_home() -> str:
    return os.path.abspath(os.path.expanduser(os.environ.get("OMEGA_HOME") or "~/.omega"))


def resolve_config(flag: str | None) -> tuple[str | None, bool]:
    """The config file as `serve` finds it, resolved, and whether it was found implicitly in the cwd."""
    if flag:
        return os.path.realpath(os.path.expanduser(flag)), False
    env = os.environ.get("OMEGA_CONFIG")
    if env:
        return os.path.realpath(os.path.expanduser(env)), False
    here = os.path.join(os.getcwd(), "servers.toml")
    if os.path.isfile(here):
        return os.path.realpath(here), True
    home = os.path.join(omega_home(), "servers.toml")
    return (os.path.realpath(home), False) if os.path.isfile(home) else (None, False)


def address_of(flag: str | None) -> HubAddress:
    return HubAddress(omega_home(), resolve_config(flag)[0])


def _read_line(sock: _socket.socket, seconds: float) -> dict[str, object] | None:
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
    return object_of(data)


def request(address: HubAddress, what: str, seconds: float = 10.0, **fields: object) -> dict[str, object] | None:
    """One control request to the running hub (`status`, `stop`, `ready`); None when no hub answers."""
    sock = address.connect()
    if sock is None:
        return None
    try:
        sock.settimeout(seconds)
        sock.sendall(dumps({"omega": what, **fields}).encode() + b"\n")
        return _read_line(sock, seconds)
    except OSError:
        return None
    finally:
        sock.close()


def rotate_log(path: str, limit: int = LOG_BYTES) -> bool:
    """Move the log at `path` to `path.1` (replacing an older one) once it has reached `limit` bytes."""
    try:
        if os.stat(path).st_size < limit:
            return False
        os.replace(path, path + ".1")
    except OSError:
        return False
    return True


def start_hub(address: HubAddress, naming: tuple[str | None, str | None] = (None, None)) -> _socket.socket:
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
            argv += ["--config", address.config]
        env = {**os.environ, "OMEGA_HOME": address.home}
        env.pop("OMEGA_CONFIG", None)
        for key, value in zip(("OMEGA_HUB_CLIENT_PREFIX", "OMEGA_HUB_NAMES"), naming, strict=True):
            if value is not None:
                env[key] = value
        rotate_log(address.log)
        log = os.open(address.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=address.run_dir,
                env=env,
                start_new_session=True,
            )
        finally:
            os.close(log)
        address.started.append(None)
        while True:
            sock = address.connect()
            code = proc.poll()
            if sock is not None:
                if code is None:  # reaped when it exits, for `_open` to know
                    _thread.start_new_thread(_reap, (proc, address.started, len(address.started) - 1))
                return sock
            if code is not None:
                raise OSError(errno.ECHILD, f"the hub exited with status {code} (its log: {address.log})")
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT, f"the hub did not listen within {_START_SECONDS:g} s ({address.log})")
            time.sleep(0.02)
    finally:
        os.close(lock)


def _reap(proc: subprocess.Popen[bytes], started: list[int | None], index: int) -> None:
    started[index] = proc.wait()


def _exit_status(started: list[int | None], since: int, seconds: float = 1.0) -> int | None:
    """The exit status of a hub in `started[since:]` (which its reaper fills in), given `seconds` to exit."""
    end = time.monotonic() + (seconds if len(started) > since else 0)
    while True:
        code = next((c for c in started[since:] if c is not None), None)
        if code is not None or time.monotonic() > end:
            return code
        time.sleep(0.02)


class _Options:
    """`attach`'s flags: the common spellings read here, anything else (help, a mistake) by argparse."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        found = self._quick(argv)
        self.values = found if found is not None else self._parsed(argv)

    @staticmethod
    def _quick(argv: list[str]) -> dict[str, str] | None:
        values: dict[str, str] = {}
        rest = list(argv)
        while rest:
            flag, _, value = rest.pop(0).partition("=")
            if flag not in _FLAGS:
                return None
            if not _:
                if not rest or rest[0].startswith("-"):
                    return None
                value = rest.pop(0)
            if value not in _CHOICES.get(flag, (value,)):
                return None
            values[flag] = value
        return values

    @staticmethod
    def _parsed(argv: list[str]) -> dict[str, str]:
        import argparse  # for its help and its messages (exits 0 or 2)

        parser = argparse.ArgumentParser(
            prog="omega-mcp attach",
            description="stdio MCP server for one client window, served by the user's shared hub for this config",
        )
        # The same flags and help as cli/main.py's `attach` parser, without importing it (no SDK here).
        parser.add_argument("--config", metavar="PATH", help="servers.toml to use (found as for serve)")
        parser.add_argument("--mode", choices=_CHOICES["--mode"], help="this window's sandbox mode")
        parser.add_argument("--workspace", metavar="DIR", help="this window's workspace")
        parser.add_argument("--client-prefix", metavar="PREFIX", help="as for serve")
        parser.add_argument("--names", choices=_CHOICES["--names"], help="as for serve")
        parser.add_argument("--log-level", metavar="LEVEL", help="as for serve")
        args = vars(parser.parse_args(argv))
        return {f"--{k.replace('_', '-')}": v for k, v in args.items() if v is not None}

    def get(self, flag: str) -> str | None:
        return self.values.get(flag)


def workspace_of(options: _Options) -> str | None:
    """The window's `--workspace`, absolute; None: the hub's."""
    workspace = options.get("--workspace")
    return os.path.abspath(os.path.expanduser(workspace)) if workspace else None


def _hello(options: _Options, window: str) -> bytes:
    hello = {
        "omega": "attach",
        "window": window,
        "workspace": workspace_of(options),
        "mode": options.get("--mode"),
        "client_prefix": options.get("--client-prefix"),
        "names": options.get("--names"),
        "pid": os.getpid(),
    }
    return dumps(hello).encode() + b"\n"


def _open(address: HubAddress, options: _Options, hello: bytes) -> HubEnd:
    """A window's connection to the hub (started if needed), its hello answered.

    A connection closed before the answer is tried again (bounded): a hub that was killed may leave
    its listening socket for a moment with a child that is dying too.

    Raises:
        OSError: no hub could be reached or started.
        ValueError: the hub refused the window (the message says why).
    """
    deadline = time.monotonic() + _START_SECONDS
    naming = (options.get("--client-prefix"), options.get("--names"))
    while True:
        before = len(address.started)
        sock = start_hub(address, naming)
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
        code = _exit_status(address.started, before)
        if code is not None:  # the hub this call started took the connection and exited: it will not start
            raise OSError(errno.ECHILD, f"the hub exited with status {code} (its log: {address.log})")
        if time.monotonic() > deadline:
            raise OSError(errno.ECONNRESET, "the hub closed the connection")
        time.sleep(0.1)
    if answer.get("ok") is not True:
        sock.close()
        raise ValueError(str(answer.get("error")))
    for key, flag, mine in (("client_prefix", "--client-prefix", naming[0]), ("names", "--names", naming[1])):
        hub = answer.get(key)
        if mine is not None and hub is not None and mine != hub:
            _say(f"the running hub names tools with {flag} {hub!r}, not {mine!r} (the window that started it did)")
    sock.setblocking(False)
    return HubEnd(sock.fileno(), sock.fileno(), shut=lambda: sock.shutdown(_socket.SHUT_WR), close=sock.close)


def _serve_child(options: _Options, why: OSError) -> HubEnd:
    """`omega-mcp serve` with the same flags on pipes, for a window whose opening was already answered."""
    import subprocess

    _say(f"the shared hub cannot be used: {why.strerror or why}; serving in-process instead (omega-mcp serve)")
    argv = [sys.executable, "-P", "-m", "omega_mcp", "serve", *options.argv]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    os.set_blocking(stdin.fileno(), False)
    os.set_blocking(stdout.fileno(), False)

    def close() -> None:
        for pipe in (stdin, stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            proc.wait(_START_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    return HubEnd(stdout.fileno(), stdin.fileno(), shut=stdin.close, close=close, serve=True)


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
    config, implicit = resolve_config(options.get("--config"))
    if implicit:
        return _serve_instead(options, f"{config} was found in the current directory (the hub takes --config only)")
    if config is not None and not os.path.isfile(config):
        return _serve_instead(options, f"{config} does not exist")
    address = HubAddress(omega_home(), config)
    window = f"{os.getpid()}-{os.urandom(3).hex()}"
    hello = _hello(options, window)
    try:
        address.prepare()
        greeting = address.read_greeting()
        if greeting is not None:
            greeting = greeting.for_window(window, workspace_of(options), options.get("--mode"))
        # Without a greeting the hub answers the opening: reach it first (nothing read from the client yet).
        end = None if greeting is not None else _open(address, options, hello)
    except ValueError as exc:
        _say(f"the hub refused this window: {exc}")
        return 2
    except OSError as exc:
        return _serve_instead(options, f"the shared hub cannot be used: {exc.strerror or exc}")
    relay = Relay(lambda: _open(address, options, hello), greeting, end, lambda why: _serve_child(options, why))
    try:
        return relay.run()
    except ValueError as exc:
        _say(f"the hub refused this window: {exc}")
        return 2
    except OSError as exc:
        _say(f"the hub cannot be reached: {exc.strerror or exc}")
        return 1
    except KeyboardInterrupt:
        return 130
