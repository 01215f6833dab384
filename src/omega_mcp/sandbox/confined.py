"""A command the bash zygote started, as an anyio `Process` (`ConfinedProcess`), for the bash tool.

omega is not the command's parent, so it learns everything from what the command's PID 1 sends on
the command's channel (`zygote_init.py`): first its host pid (the process group to kill; `started`)
with a pidfd of itself (readable once it, and with it the command's whole PID namespace, is gone),
at the end a 3-byte record of how the command ended (`reaper.py`). A launch given up before the pid
was read is `abandon`ed: the command either never runs or is killed. The output is the read end of
the command's pipe, read as the event loop says. Every wait is the caller's to bound.
"""

from __future__ import annotations

import array
import os
import select
import signal
import socket
import struct
from collections.abc import Callable

import anyio
from anyio.abc import ByteReceiveStream, Process

from omega_mcp.errors import ToolError
from omega_mcp.sandbox.child.zygote import decode

__all__ = ["ConfinedProcess", "NotStartedError", "abandon", "started"]

GONE_SECONDS = 5.0
"""For a command's PID 1 to be gone once it reported (it exits right after)."""
_CREDS = socket.CMSG_SPACE(struct.calcsize("3i"))
_FDS = socket.CMSG_SPACE(4 * array.array("i").itemsize)


class NotStartedError(Exception):
    """The command's launch never reached a live zygote: it did not run, and may be retried."""


async def started(channel: socket.socket) -> tuple[int, int]:
    """The command's host pid and a pidfd of its PID 1, once it runs.

    Raises:
        NotStartedError: the session went away before starting it.
        ToolError: the session could not start it (the message says why).
    """
    while True:
        await anyio.wait_readable(channel)
        try:
            data, ancillary, _, _ = channel.recvmsg(4096, _CREDS + _FDS)
        except BlockingIOError:
            continue
        except OSError as exc:
            raise NotStartedError(str(exc)) from None
        pid, fds = _unpack(ancillary)
        fields = decode(data)
        if fields == ["pid"] and pid and len(fds) == 1:
            return pid, fds[0]
        for fd in fds:
            os.close(fd)
        if fields[:1] == ["error"] and len(fields) > 1:
            raise ToolError(fields[1])
        raise NotStartedError("the sandbox launcher closed the request" if not data else f"unexpected {data!r}")


def _unpack(ancillary: list[tuple[int, int, bytes]]) -> tuple[int, list[int]]:
    pid = 0
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_CREDENTIALS and len(data) >= struct.calcsize("3i"):
            pid = struct.unpack("3i", data[: struct.calcsize("3i")])[0]
        elif kind == socket.SCM_RIGHTS:
            found = array.array("i")
            found.frombytes(data[: len(data) - len(data) % found.itemsize])
            fds.extend(found)
    return pid, fds


def abandon(channel: socket.socket) -> None:
    """A launch given up (cancelled): make sure its command either never runs or is killed."""
    try:
        channel.shutdown(socket.SHUT_RD)  # from now on the command's PID 1 cannot report: it aborts
        data, ancillary, _, _ = channel.recvmsg(4096, _CREDS + _FDS)
    except OSError:
        return
    pid, fds = _unpack(ancillary)
    for fd in fds:
        os.close(fd)
    if decode(data) == ["pid"] and pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _PipeStream(ByteReceiveStream):
    """The read end of the command's output pipe, non-blocking, read as the event loop says."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            if self._fd < 0:
                raise anyio.ClosedResourceError
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    def close(self) -> None:
        """Close now (nothing awaits this stream: a helper's, whose output is a socket of its own)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    async def aclose(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            anyio.notify_closing(fd)
            os.close(fd)


class ConfinedProcess(Process):
    """A command the zygote started: `pid` is its PID 1's host pid and process group (kill the group
    to kill the command), `wait()` its exit status (negative: the signal that killed it), `stdout`
    its output. `launcher_died` says the zygote or the session died under it (it was killed then)."""

    def __init__(
        self, pid: int, pidfd: int, channel: socket.socket, stdout: int, launcher_gone: Callable[[], bool]
    ) -> None:
        self._pid = pid
        self._pidfd = pidfd
        self._channel = channel
        self._stdout = _PipeStream(stdout)
        self._launcher_gone = launcher_gone
        self._returncode: int | None = None
        self._reading: anyio.Event | None = None
        self.launcher_died = False

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def gone(self) -> bool:
        """Whether the command's PID 1 exited, and so nothing of it runs any more (its PID namespace
        died with it): what `processes.tree_alive` asks instead of walking /proc."""
        if self._pidfd < 0:
            return self._returncode is not None
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(0))

    @property
    def stdin(self) -> None:
        return None

    @property
    def stdout(self) -> ByteReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> None:
        return None

    async def wait(self) -> int:
        while self._returncode is None:
            if self._reading is not None:  # another task reads the status: wait for it
                await self._reading.wait()
                continue
            self._reading = anyio.Event()
            try:
                self._returncode = await self._read_status()
            finally:
                reading, self._reading = self._reading, None
                reading.set()
        return self._returncode

    async def _read_status(self) -> int:
        while True:
            if self._channel.fileno() < 0:
                raise anyio.ClosedResourceError
            await anyio.wait_readable(self._channel)
            try:
                record = self._channel.recv(64)
            except BlockingIOError:
                continue
            except OSError:
                record = b""
            if record and len(record) != 3:
                continue  # nothing else is ever sent; ignore it
            if (not record or not record[2]) and self._pidfd >= 0:
                # PID 1 exits right after its report (or already did, without one): wait until it
                # and its namespace are gone, so no member of the group is seen alive afterwards.
                with anyio.move_on_after(GONE_SECONDS):
                    await anyio.wait_readable(self._pidfd)
            if not record:
                # Killed without a word: by our own SIGKILL, or because its session or zygote died.
                self.launcher_died = self._launcher_gone()
                return -signal.SIGKILL
            return -record[1] if record[:1] == b"s" else record[1]

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, signal: int) -> None:
        try:
            os.killpg(self._pid, signal)
        except ProcessLookupError:
            pass

    def discard(self) -> None:
        """Kill the command's tree and close every fd now, without waiting (a helper nobody waits for;
        its PID 1's parent, the zygote's session process, reaps it)."""
        self.kill()
        self._stdout.close()
        if self._channel.fileno() >= 0:
            self._channel.close()
        if self._pidfd >= 0:
            fd, self._pidfd = self._pidfd, -1
            os.close(fd)

    async def aclose(self) -> None:
        try:
            await self._stdout.aclose()
            if self._returncode is None:
                await self.wait()
        finally:
            if self._channel.fileno() >= 0:
                anyio.notify_closing(self._channel)
                self._channel.close()
            if self._pidfd >= 0:
                fd, self._pidfd = self._pidfd, -1
                anyio.notify_closing(fd)
                os.close(fd)
