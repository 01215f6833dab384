"""The shared hub's transport: MCP over a UNIX socket, one connection per attached window.

`omega-mcp attach` (cli/attach.py) connects here. Every connection opens with one JSON line, the
hello, before any MCP byte: `{"omega": "attach", "window": ID, "workspace": DIR, "mode": M, ...}` makes
the connection a window, a client of its own (`Profiles.window`: its workspace and mode; its private
/tmp, background shells, roots, approvals and log level are its connection's, as for any MCP client),
served by the one `OmegaServer` over the one Toolbox; `{"omega": "status" | "stop" | "ready"}` is a
control request, answered with one JSON line. The hub answers a hello with one line too (`{"ok": true}`
or `{"ok": false, "error": ...}`), then MCP flows as newline-delimited JSON-RPC through the same pipe
streams as stdio (`PipeReader`/`PipeWriter` on the socket; calls take the SDK path with the hub's
fast `tools/call` middleware, not the stdio relay, which serves one client per server pipe). The
socket lives in a 0700 directory, and every peer's uid is checked with SO_PEERCRED: a peer of
another uid is closed without a word.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from omega_mcp._sdk import SESSION_MESSAGES
from omega_mcp.narrow import object_or_none
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.profiles import Profiles
from omega_mcp.server.server import OmegaServer
from omega_mcp.server.stdio import serve_streams
from omega_mcp.wire.pipes import PipeReader, PipeWriter

__all__ = ["Control", "Window", "Windows", "bind_unix", "peer_uid", "serve_unix"]

logger = logging.getLogger(__name__)

WINDOW_CLIENT = "window-"
"""A window's client name is this and its id (`attach`'s hello): its tree is `clients/window-<id>`."""

_HELLO_SECONDS = 10.0
_HELLO_BYTES = 1 << 16
Control = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
"""Answers a control request (`status`, `stop`, `ready`) with the object to send back."""


@dataclass(slots=True)
class Window:
    """One attached window as `hub status` shows it."""

    client: str
    workspace: str
    mode: str
    pid: int | None
    since: float = field(default_factory=time.time)


class Windows:
    """The attached windows, and since when none has been (for `[hub] idle_exit`)."""

    def __init__(self) -> None:
        self.attached: dict[str, Window] = {}
        self.idle_since: float | None = time.monotonic()
        self.changed = anyio.Event()

    def join(self, window: Window) -> None:
        self.attached[window.client] = window
        self.idle_since = None
        self._poke()

    def leave(self, client: str) -> None:
        self.attached.pop(client, None)
        if not self.attached:
            self.idle_since = time.monotonic()
        self._poke()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


def bind_unix(path: Path) -> socket.socket:
    """Listen at `path` (its directory made 0700; a stale socket file replaced).

    Raises:
        OSError: it cannot be bound (the message names the path).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _short(path) as where:
            try:
                os.unlink(where)
            except FileNotFoundError:
                pass
            sock.bind(where)
        os.chmod(path, 0o600)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen at {path}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


class _short:
    """A socket path that fits `sun_path` (108 bytes): a long one is reached through /proc/self/fd."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> str:
        text = str(self.path)
        if len(text.encode()) < 100:
            return text
        self.fd = os.open(self.path.parent, os.O_PATH | os.O_DIRECTORY)
        return f"/proc/self/fd/{self.fd}/{self.path.name}"

    def __exit__(self, *_: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)


_SOL_LOCAL, _LOCAL_PEERCRED = 0, 1
"""macOS and the BSDs: `getsockopt(SOL_LOCAL, LOCAL_PEERCRED)` gives a `struct xucred` (version, uid, ...)."""


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a UNIX socket: SO_PEERCRED on Linux, LOCAL_PEERCRED
    on macOS and the BSDs (Python has no constant for it there).

    Raises:
        OSError: the platform tells no peer's uid (the connection is then refused).
    """
    peercred = getattr(socket, "SO_PEERCRED", None)
    if isinstance(peercred, int):
        creds = sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[1]
    if sys.platform == "darwin" or sys.platform.startswith(("freebsd", "openbsd", "netbsd")):
        creds = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, struct.calcsize("2I") + 4 + 16 * 4)
        return struct.unpack_from("2I", creds)[1]
    raise OSError(f"no way to tell a UNIX socket peer's uid on {sys.platform}")


async def _hello(sock: socket.socket) -> dict[str, Any] | None:
    """The connection's first line, taken off the socket without reading past it (bounded)."""
    with anyio.move_on_after(_HELLO_SECONDS):
        while True:
            await anyio.wait_readable(sock)
            try:
                head = sock.recv(_HELLO_BYTES, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            if not head:
                return None
            end = head.find(b"\n")
            if end < 0:
                if len(head) >= _HELLO_BYTES:
                    return None
                await anyio.sleep(0.01)  # more of the line is on its way
                continue
            sock.recv(end + 1)
            try:
                return object_or_none(json.loads(head[:end]))
            except ValueError:
                return None
    return None


def _send_line(sock: socket.socket, message: Mapping[str, Any]) -> None:
    sock.setblocking(True)
    try:
        sock.settimeout(5)
        sock.sendall(json.dumps(message).encode() + b"\n")
    finally:
        sock.setblocking(False)


async def serve_unix(
    server: OmegaServer,
    listener: socket.socket,
    profiles: Profiles,
    windows: Windows,
    control: Control,
    *,
    max_message_bytes: int | None = None,
) -> None:
    """Accept windows and control requests at `listener` until cancelled."""
    uid = os.getuid()
    async with anyio.create_task_group() as task_group:
        while True:
            await anyio.wait_readable(listener)
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:  # out of descriptors: let the others finish first
                logger.warning("hub socket: %s", exc)
                await anyio.sleep(0.1)
                continue
            try:
                theirs = peer_uid(sock)
            except OSError:
                theirs = -1
            if theirs != uid:
                logger.warning("hub socket: refused a peer of uid %s (the hub serves uid %s only)", theirs, uid)
                sock.close()
                continue
            sock.setblocking(False)
            task_group.start_soon(_Connection(server, profiles, windows, control, max_message_bytes).serve, sock)


def _remove_tree(policy: SandboxPolicy) -> None:
    """A window's own tree goes with it (a window id is never reused, so its caches would only pile up)."""
    tree = policy.client_dir
    if tree.parent == policy.clients_dir and tree.name.startswith(WINDOW_CLIENT):
        shutil.rmtree(tree, ignore_errors=True)


def _window_settings(hello: Mapping[str, Any]) -> tuple[str, Path | None, str | None, int | None] | str:
    """(client name, workspace, mode, pid) from a window's hello, or what is wrong with it."""
    window, workspace, mode, pid = hello.get("window"), hello.get("workspace"), hello.get("mode"), hello.get("pid")
    if not isinstance(window, str) or not window or len(window) > 64 or not window.replace("-", "").isalnum():
        return "the hello names no window"
    if workspace is not None and (not isinstance(workspace, str) or not os.path.isabs(workspace)):
        return "workspace: not an absolute path"
    if mode is not None and mode not in ("sandbox", "rx", "rwx"):
        return f"mode: {mode!r} is not sandbox, rx or rwx"
    chosen = Path(workspace) if workspace else None
    return f"{WINDOW_CLIENT}{window}", chosen, mode, pid if isinstance(pid, int) else None


class _Connection:
    """One accepted connection: a window, or a control request."""

    def __init__(
        self,
        server: OmegaServer,
        profiles: Profiles,
        windows: Windows,
        control: Control,
        max_message_bytes: int | None,
    ) -> None:
        self.server, self.profiles, self.windows = server, profiles, windows
        self.control, self.max_message_bytes = control, max_message_bytes

    async def serve(self, sock: socket.socket) -> None:
        try:
            hello = await _hello(sock)
            kind = hello.get("omega") if hello is not None else None
            if hello is None or not isinstance(kind, str):
                return
            if kind != "attach":
                answer: Mapping[str, Any] = {"ok": False, "error": "no answer in time"}
                with anyio.move_on_after(3600):
                    answer = await self.control(kind, hello)
                _send_line(sock, answer)
                return
            await self._window(sock, hello)
        except OSError as exc:
            logger.debug("hub socket: a connection failed: %s", exc)
        except Exception:  # boundary: one window's failure must not take the hub (and every other window) down
            logger.exception("hub socket: a connection failed")
        finally:
            sock.close()

    async def _window(self, sock: socket.socket, hello: Mapping[str, Any]) -> None:
        settings = _window_settings(hello)
        if isinstance(settings, str):
            _send_line(sock, {"ok": False, "error": settings})
            return
        client, workspace, mode, pid = settings
        if workspace is not None:
            try:
                workspace.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                _send_line(sock, {"ok": False, "error": f"cannot create {workspace}: {exc.strerror or exc}"})
                return
        server, profiles, windows = self.server, self.profiles, self.windows
        profile = profiles.window(client, workspace, mode)
        policy = profile.policy or profiles.hub
        naming = server.toolbox.naming
        answer = {"ok": True, "client": client, "hub": os.getpid()}
        _send_line(sock, {**answer, "client_prefix": naming.client_prefix, "names": naming.style})
        windows.join(Window(client, str(policy.workspace), policy.mode, pid))
        logger.info("window %s attached (workspace %s, mode %s)", client, policy.workspace, policy.mode)
        writer_fd = os.dup(sock.fileno())
        reader = PipeReader(sock.fileno(), SESSION_MESSAGES, label=f"[{client}]")
        writer = PipeWriter(writer_fd, SESSION_MESSAGES, label=f"[{client}]")
        try:
            # No stdio relay: it hooks each server's pipe for one client only (its ids and answers are
            # that client's), and it would not pick a window's own `share = "session"` connection.
            await serve_streams(
                server, reader, writer, relay=False, max_message_bytes=self.max_message_bytes, window=profile
            )
        finally:
            reader.detach()
            writer.detach()
            os.close(writer_fd)
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                # Its 2026-era shells and /tmp (a handshake-era connection's went with the connection).
                await server.toolbox.end_session(profile)
                if server.catalog is not None:
                    await server.catalog.pool.end(("omega-client", client))
            profiles.leave(client)
            windows.leave(client)
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                await anyio.to_thread.run_sync(_remove_tree, policy)
            logger.info("window %s left", client)
