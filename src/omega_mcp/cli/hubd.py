"""The user's shared hub (`omega-mcp hub serve`, started by `attach`) and `omega-mcp hub start|status|stop`.

The shared hub is `serve --http`'s hub served on a UNIX socket instead (`server/unix.py`): the same
Toolbox, `[hub.clients]` profiles, tool search and metrics, every attached window a client of its
own. It binds its socket before anything else, so windows queue there while it starts; a second hub
for the same config finds the socket answering and exits. It reloads its config on SIGHUP and when
the file's content changes (polled), as `serve --http` does (cli/hub.py); it exits when no window has
been attached for `[hub] idle_exit` seconds, on `hub stop`, and on SIGINT/SIGTERM, stopping every
server on the way out, and removes its socket. `hub start|status|stop` speak to it with one control
line each (the stdlib client in cli/attach.py). Once its servers have settled it asks its own MCP
server, on a private socket pair, each opening a window may send (`initialize` at each version,
`server/discover` with and without the 2026 envelope) and writes the answers to run/ as its
greeting, dated by its config's content and omega's version, from which `attach` answers a window's
opening at once, even before a hub listens. Its log (stdout and stderr, the file `attach` opened) is rotated by size.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio

from omega_mcp.cli import attach
from omega_mcp.cli.common import EXIT_FAILURE, EXIT_OK, UsageError
from omega_mcp.cli.signals import SignalGuard
from omega_mcp.cli.toolbox import open_toolbox
from omega_mcp.config import Config
from omega_mcp.narrow import object_or_none
from omega_mcp.proxy.spawn import EarlyStarts
from omega_mcp.version import __version__

if TYPE_CHECKING:
    from collections.abc import Mapping

    from omega_mcp.proxy.supervisor import Downstreams
    from omega_mcp.server.server import OmegaServer
    from omega_mcp.server.unix import Windows

__all__ = ["hub_command", "run_shared_hub"]

logger = logging.getLogger("omega_mcp")

_WATCH_SECONDS = 1.0
_START_SECONDS = 120.0
_ROTATE_SECONDS = 30.0
_ASK_SECONDS = 10.0


def _memory_mb(pid: int) -> float | None:
    """A process's proportional set size (its fair share of shared pages), in MB."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _status(config: Config, downstreams: Downstreams, windows: Windows, started: float) -> dict[str, Any]:
    servers = [
        {
            "name": s.server_name,
            "status": s.state,
            "pid": s.pid,
            "memory_mb": _memory_mb(s.pid) if s.pid is not None else None,
            "tools": len(s.tools),
        }
        for s in downstreams.statuses()
    ]
    attached = [
        {"client": w.client, "workspace": w.workspace, "mode": w.mode, "pid": w.pid, "since": w.since}
        for w in windows.attached.values()
    ]
    return {
        "config": str(config.path) if config.path else None,
        "pid": os.getpid(),
        "since": started,
        "memory_mb": _memory_mb(os.getpid()),
        "ready": downstreams.ready,
        "windows": attached,
        "servers": servers,
    }


def _digest(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return attach.digest(path.read_bytes())
    except OSError:
        return None


def _openings() -> dict[str, dict[str, Any]]:
    """Each opening request a window may send whose answer `attach` may give at once, by its greeting key."""
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    client = {"name": "omega-hub-greeting", "version": "1"}

    def initialize(version: str) -> dict[str, Any]:
        return {
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": client},
        }

    openings = {f"initialize {version}": initialize(version) for version in HANDSHAKE_PROTOCOL_VERSIONS}
    openings["initialize *"] = initialize("omega-any-other-version")
    openings["discover"] = {"method": "server/discover"}
    for version in MODERN_PROTOCOL_VERSIONS:
        meta = {PROTOCOL_VERSION_META_KEY: version, CLIENT_INFO_META_KEY: client, CLIENT_CAPABILITIES_META_KEY: {}}
        openings[f"discover {version}"] = {"method": "server/discover", "params": {"_meta": meta}}
    return openings


async def _ask_ourselves(server: OmegaServer, opening: Mapping[str, Any]) -> dict[str, Any] | None:
    """The server's answer to one opening request on a fresh connection, as a window would get it."""
    import socket

    from omega_mcp._sdk import SESSION_MESSAGES
    from omega_mcp.server.stdio import serve_streams
    from omega_mcp.wire.pipes import PipeReader, PipeWriter

    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    writer_fd = os.dup(theirs.fileno())
    reader = PipeReader(theirs.fileno(), SESSION_MESSAGES, label="[greeting]")
    writer = PipeWriter(writer_fd, SESSION_MESSAGES, label="[greeting]")
    answer: dict[str, Any] | None = None
    try:
        with anyio.move_on_after(_ASK_SECONDS):
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(serve_streams, server, reader, writer, relay=False))
                ours.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, **opening}).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    await anyio.wait_readable(ours)
                    chunk = ours.recv(1 << 16)
                    if not chunk:
                        break
                    data += chunk
                answer = object_or_none(json.loads(data)) if data.endswith(b"\n") else None
                ours.shutdown(socket.SHUT_WR)  # the connection ends as a window's does
    finally:
        reader.detach()
        writer.detach()
        ours.close()
        theirs.close()
        os.close(writer_fd)
    return answer


async def write_greeting(server: OmegaServer, address: attach.HubAddress, content: bytes) -> bool:
    """Write run/'s greeting: this hub's answers to each opening, for `config`'s `content` (see attach.py).

    Each window is told its own workspace and tree (`server.client_instructions`), so the answers hold
    the instructions as a template (`HubInstructions.template`) that `attach` fills in for its window,
    of the hub's mode (`window`: what it fills them with when the window names no workspace).
    """
    from omega_mcp.server.unix import WINDOW_CLIENT

    policy = server.toolbox.policy
    own = server.client_instructions.template(policy) if server.client_instructions is not None else None
    answers: dict[str, str] = {}
    began = time.monotonic()
    for key, opening in _openings().items():
        answer = await _ask_ourselves(server, opening)
        if answer is None or answer.get("id") != 1 or ("result" in answer) == ("error" in answer):
            logger.warning("the hub's greeting was not written: no answer of its own to %s", key)
            return False
        part = "result" if "result" in answer else "error"
        body: object = answer[part]
        fields = object_or_none(body)
        if own is not None and fields is not None and "instructions" in fields:
            body = {**fields, "instructions": own}
        answers[key] = f"{json.dumps(part)}:{json.dumps(body, separators=(',', ':'))}"
    logger.debug("the hub asked itself %d openings in %.0f ms", len(answers), (time.monotonic() - began) * 1000)
    window = {"mode": policy.mode, "workspace": str(policy.workspace), "tree": str(policy.clients_dir / WINDOW_CLIENT)}
    greeting = {"omega": __version__, "config": attach.digest(content), "answers": answers, "window": window}
    temporary = f"{address.greeting}.{os.getpid()}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(greeting).encode())  # a few KB: one write
        finally:
            os.close(fd)
        os.replace(temporary, address.greeting)
    except OSError as exc:
        logger.warning("the hub's greeting was not written to %s: %s", address.greeting, exc.strerror or exc)
        return False
    return True


def rotate_own_log(path: str, limit: int = attach.LOG_BYTES) -> bool:
    """When this process's stderr is the log at `path` and has reached `limit` bytes, move it to
    `path.1` and go on in a new file there (stdout and stderr both)."""
    try:
        mine, theirs = os.fstat(2), os.stat(path)
    except OSError:
        return False
    if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino) or not attach.rotate_log(path, limit):
        return False
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)
    logger.info("the log went on past %d bytes: the older part is %s.1", limit, path)
    return True


async def run_shared_hub(
    config: Config, args: argparse.Namespace, guard: SignalGuard, early: EarlyStarts | None = None
) -> int:
    """Serve the shared hub of `config` on its socket until stopped or idle; returns the exit code."""
    from omega_mcp.server.unix import bind_unix

    address = attach.HubAddress(attach.omega_home(), str(config.path) if config.path is not None else None)
    try:
        content = config.path.read_bytes() if config.path is not None else b""
    except OSError:
        content = None
    address.prepare()
    if address.connect() is not None:
        logger.info("a hub for %s already listens at %s", config.path or "(no config)", address.socket)
        return EXIT_OK
    try:
        listener = bind_unix(Path(address.socket))
    except OSError as exc:
        raise UsageError(str(exc)) from None
    ours = os.stat(address.socket).st_ino
    try:
        return await _serve(config, args, guard=guard, early=early, listener=listener, address=address, content=content)
    finally:
        listener.close()
        try:
            if os.stat(address.socket).st_ino == ours:  # not a newer hub's
                os.unlink(address.socket)
        except OSError:
            pass


async def _serve(
    config: Config,
    args: argparse.Namespace,
    *,
    guard: SignalGuard,
    early: EarlyStarts | None,
    listener: Any,
    address: attach.HubAddress,
    content: bytes | None,
) -> int:
    from omega_mcp.sandbox import zygote_client

    zygote_client.prestart()
    from omega_mcp.cli.hub import hub_operations, hub_server, reload_on_sighup, reload_once
    from omega_mcp.sandbox.launch import describe_sandbox
    from omega_mcp.server.unix import Windows, serve_unix

    started = time.time()
    async with open_toolbox(config, args, early) as (toolbox, downstreams):
        policy = toolbox.policy
        sandbox = describe_sandbox(policy)
        server, profiles = hub_server(config, toolbox, downstreams, sandbox, clients=True)
        assert profiles is not None  # clients=True
        tokens, _ops = hub_operations(config, server, toolbox, downstreams, policy)
        windows = Windows()
        current = [config]

        async def control(kind: str, request: Mapping[str, Any]) -> Mapping[str, Any]:
            if kind == "status":
                return _status(current[0], downstreams, windows, started)
            if kind == "ready":  # every server connected or failed once (`wait_ready` is bounded by serve's 0 s)
                with anyio.move_on_after(_START_SECONDS):
                    while not downstreams.ready:  # noqa: ASYNC110 - the supervisor's flag, no public event
                        await anyio.sleep(0.05)
                return {"ok": downstreams.ready, "ready": downstreams.ready}
            if kind == "stop":
                logger.info("hub stop: stopping")
                tg.cancel_scope.cancel()
                return {"ok": True, "stopping": os.getpid()}
            return {"ok": False, "error": f"unknown request {kind!r}"}

        async def watch_file() -> None:
            seen = _digest(config.path)
            while True:
                await anyio.sleep(_WATCH_SECONDS)
                now = _digest(config.path)
                if now is not None and now != seen:
                    seen = now
                    logger.info("%s changed: reloading", config.path)
                    current[0] = await reload_once(current[0], policy, downstreams, tokens, profiles)

        async def idle_exit() -> None:
            seconds = config.hub.idle_exit
            while True:
                since = windows.idle_since
                if since is not None and time.monotonic() - since >= seconds:
                    logger.info("no window attached for %g s: the hub exits ([hub] idle_exit)", seconds)
                    tg.cancel_scope.cancel()
                    return
                wait = seconds - (time.monotonic() - since) if since is not None else seconds
                with anyio.move_on_after(max(wait, 0.05)):
                    await windows.changed.wait()

        async def greet() -> None:
            # Once the servers have settled: asking itself costs the loop ~100 ms, which the first
            # windows of a cold start should not wait behind (the greeting is for the next cold start).
            with anyio.move_on_after(_START_SECONDS):
                while not downstreams.ready:  # noqa: ASYNC110 - the supervisor's flag, no public event
                    await anyio.sleep(0.1)
            assert content is not None
            await write_greeting(server, address, content)

        async def rotate() -> None:
            while True:
                await anyio.sleep(_ROTATE_SECONDS)
                rotate_own_log(address.log)

        async with anyio.create_task_group() as tg:
            tg.start_soon(guard.until_signalled, tg.cancel_scope)
            if content is not None:
                tg.start_soon(greet)
            tg.start_soon(rotate)
            await tg.start(reload_on_sighup, config, policy, downstreams, tokens, profiles)
            if config.path is not None:
                tg.start_soon(watch_file)
            tg.start_soon(idle_exit)
            logger.info("the shared hub serves %s at %s", config.path or "(no config)", address.socket)
            await serve_unix(
                server,
                listener,
                profiles,
                windows,
                control,
                max_message_bytes=config.hub.max_message_mb << 20,
            )
    return EXIT_OK


def _print_status(status: Mapping[str, Any], out: IO[str]) -> None:
    out.write(f"hub pid {status.get('pid')} for {status.get('config') or '(no config)'}, ")
    out.write(f"memory {status.get('memory_mb')} MB, {'ready' if status.get('ready') else 'starting'}\n")
    windows: list[dict[str, Any]] = status.get("windows") or []
    out.write(f"windows ({len(windows)}):\n")
    for w in windows:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(w.get("since") or 0))
        out.write(f"  {w.get('client')}  workspace {w.get('workspace')}  mode {w.get('mode')}  since {since}\n")
    servers: list[dict[str, Any]] = status.get("servers") or []
    out.write(f"servers ({len(servers)}):\n")
    for s in servers:
        memory = f"{s['memory_mb']} MB" if s.get("memory_mb") is not None else "-"
        out.write(f"  {s.get('name')}  {s.get('status')}  pid {s.get('pid') or '-'}  {memory}\n")


def hub_command(args: argparse.Namespace, out: IO[str]) -> int:
    """`omega-mcp hub start | status [--json] | stop`: the exit code (1: no hub runs, for status/stop)."""
    address = attach.address_of(args.config)
    if args.action == "start":
        try:
            address.prepare()
            attach.start_hub(address).close()
        except OSError as exc:
            raise UsageError(f"hub start: {exc.strerror or exc}") from None
        answer = attach.request(address, "ready", _START_SECONDS)
        if answer is None:
            out.write("the hub went away while starting; see its log: " + str(address.log) + "\n")
            return EXIT_FAILURE
        status = attach.request(address, "status") or {}
        servers: list[dict[str, Any]] = status.get("servers") or []  # type: ignore[assignment]
        up = sum(1 for s in servers if s.get("status") == "connected")
        out.write(f"hub pid {status.get('pid')} ready: {up} of {len(servers)} servers connected\n")
        return EXIT_OK
    if args.action == "stop":
        pid = None
        status = attach.request(address, "status")
        if status is not None:
            pid = status.get("pid")
        answer = attach.request(address, "stop")
        if answer is None:
            out.write("no hub runs for this config\n")
            return EXIT_FAILURE
        deadline = time.monotonic() + 60
        while isinstance(pid, int) and time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        out.write(f"hub pid {pid} stopped\n")
        return EXIT_OK
    status = attach.request(address, "status")
    if status is None:
        if args.json:
            out.write(json.dumps({"running": False}) + "\n")
        else:
            out.write("no hub runs for this config\n")
        return EXIT_FAILURE
    if args.json:
        out.write(json.dumps({"running": True, **status}, indent=2) + "\n")
    else:
        _print_status(status, out)
    return EXIT_OK


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
