"""The relay of `omega-mcp attach`: one client window's newline-delimited JSON-RPC between its stdio and the hub.

Like cli/attach.py it imports only what the interpreter has built in or compiled (`_json`, `select`,
no `json`, `re`, `enum` or `selectors`), since it runs once per window. It watches the lines only to
know the client's opening and which requests are in flight. The opening is answered at once when the
hub's greeting is known (`Greeting`: the answers the hub wrote to run/ for this config content and
omega version): `initialize`, and `server/discover` in both eras, are answered here and still sent
on to the hub, whose answer to them is swallowed. Everything else waits in the queue until the hub
is reached (`connect`, in a thread, bounded). When the hub goes away, each request in flight gets an
error saying the hub restarted, and the relay reaches a new one and re-opens the session there by
replaying the `initialize` (its answer swallowed) and `notifications/initialized`.
"""

from __future__ import annotations

import _thread
import os
import select
import sys
import time

TYPE_CHECKING = False  # `typing` is not imported at run time (nor collections.abc): one per window
if TYPE_CHECKING:
    from collections.abc import Callable

    Connect = Callable[[], "HubEnd"]
    """Reaches the hub (starting it if needed); raises OSError, or ValueError when it refused the window."""
    Fallback = Callable[[OSError], "HubEnd"]
    """When the hub cannot be reached: an in-process `serve` to relay to instead (raises OSError if not)."""

_scan: Callable[[str, int], tuple[object, int]]
try:
    from _json import encode_basestring_ascii as _quote
    from _json import make_scanner as _make_scanner
except ImportError:  # an interpreter without the C accelerator: the module, at its import cost
    from json import JSONDecoder
    from json.encoder import encode_basestring_ascii as _quote

    _scan = JSONDecoder().raw_decode
else:

    class _Context:
        """What the C scanner reads off a decoder: `json.loads`'s defaults."""

        strict = True
        object_hook = None
        object_pairs_hook = None
        array_hook = None
        parse_float = float
        parse_int = int
        parse_constant = float  # NaN, Infinity, -Infinity, as json takes them

    _scan = _make_scanner(_Context())  # pyright: ignore[reportArgumentType] - a decoder's attributes, duck-typed


__all__ = ["LOST", "Greeting", "HubEnd", "Relay", "dumps", "loads", "object_of"]

LOST = "the hub restarted while this call was in flight; call again"
_REPLAY = "omega-attach-replay-"
_CLOSING_SECONDS = 30.0
"""After the client closed stdin, how long its requests still in flight may take to be answered."""
_ENVELOPE = "io.modelcontextprotocol/protocolVersion"
# server/instructions.py's WORKSPACE_MARK and CLIENT_MARK as the greeting's JSON text writes them.
_WORKSPACE_MARK = "\\u0000workspace\\u0000"
_CLIENT_MARK = "\\u0000client\\u0000"
_SPACE = " \t\n\r"


def loads(data: bytes) -> object:
    """The value of one JSON text (as `json.loads`, UTF-8 only).

    Raises:
        ValueError: it is not JSON or not UTF-8, or is nested too deeply.
    """
    text = data.decode("utf-8").strip(_SPACE)
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def object_of(data: bytes) -> dict[str, object] | None:
    """A JSON object, else None."""
    try:
        return _mapping(loads(data))
    except ValueError:
        return None


def _mapping(value: object) -> dict[str, object] | None:
    """`value` when it is a JSON object (typed as one), else None."""
    if not isinstance(value, dict):
        return None
    items: dict[object, object] = value  # pyright: ignore[reportUnknownVariableType]
    return {str(k): v for k, v in items.items()}


def dumps(value: object) -> str:
    """`value` (dicts, lists, strings, numbers, booleans, None) as compact JSON.

    Raises:
        TypeError: it holds something else.
    """
    if isinstance(value, str):
        return _quote(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value) if abs(value) < float("inf") else "null"  # NaN and infinities: no JSON
    if isinstance(value, dict):
        items: dict[object, object] = value  # pyright: ignore[reportUnknownVariableType]
        return "{" + ",".join(f"{_quote(str(k))}:{dumps(v)}" for k, v in items.items()) + "}"
    if isinstance(value, list | tuple):
        elements: list[object] = list(value)  # pyright: ignore[reportUnknownArgumentType]
        return "[" + ",".join(dumps(v) for v in elements) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")


class Greeting:
    """The hub's own answers to a window's opening, as the last hub for this config content wrote them.

    `answers` maps an opening to the JSON text that follows the id in the hub's answer
    (`"result":{...}` or `"error":{...}`): `initialize <version>` for each version the hub accepts
    as asked, `initialize *` for any other, `discover <version>` for each 2026-era version, and
    `discover` for a `server/discover` without the 2026 envelope (which opens the handshake era).
    Their instructions are a template (server/instructions.py) that `for_window` fills in; `window`
    holds the hub's mode, its workspace and the path its windows' trees begin with.
    """

    def __init__(self, answers: dict[str, str], window: object = None) -> None:
        self.answers = answers
        self.window = _mapping(window) or {}

    def for_window(self, window: str, workspace: str | None, mode: str | None) -> Greeting | None:
        """The answers this window gets (its workspace, else the hub's, and its own tree), or None when only
        the hub can tell: another mode than the hub's, or a greeting that does not say."""
        hub_mode, hub_workspace, tree = (self.window.get(k) for k in ("mode", "workspace", "tree"))
        if not (isinstance(hub_mode, str) and isinstance(hub_workspace, str) and isinstance(tree, str)):
            return None
        if mode is not None and mode != hub_mode:
            return None
        fills = ((_WORKSPACE_MARK, workspace or hub_workspace), (_CLIENT_MARK, tree + window))
        answers = dict(self.answers)
        for mark, path in fills:
            text = _quote(path)[1:-1]
            answers = {key: answer.replace(mark, text) for key, answer in answers.items()}
        return Greeting(answers)

    def answer(self, message: dict[str, object]) -> str | None:
        """The answer to this opening request, or None when only the hub can tell."""
        method, params = message.get("method"), _mapping(message.get("params"))
        if method == "initialize":
            if params is None or not _looks_like_initialize(params):
                return None  # the hub's validation has the last word on a malformed one
            version = params.get("protocolVersion")
            return self.answers.get(f"initialize {version}") or self.answers.get("initialize *")
        if method == "server/discover":
            meta = _mapping(params.get("_meta")) if params is not None else None
            if meta is None or _ENVELOPE not in meta:
                return self.answers.get("discover")
            return self.answers.get(f"discover {meta[_ENVELOPE]}")  # another version: only the hub can tell
        return None


def _looks_like_initialize(params: dict[str, object]) -> bool:
    info = _mapping(params.get("clientInfo"))
    return (
        isinstance(params.get("protocolVersion"), str)
        and isinstance(params.get("capabilities"), dict)
        and info is not None
        and isinstance(info.get("name"), str)
        and isinstance(info.get("version"), str)
    )


def _opens_modern(message: dict[str, object]) -> bool:
    params = _mapping(message.get("params"))
    meta = _mapping(params.get("_meta")) if params is not None else None
    return meta is not None and _ENVELOPE in meta and message.get("method") != "initialize"


class HubEnd:
    """Where the relay sends the window's lines: the hub's socket, or an `omega-mcp serve` child on pipes."""

    def __init__(
        self,
        read_fd: int,
        write_fd: int,
        *,
        shut: Callable[[], None],
        close: Callable[[], None],
        serve: bool = False,
    ) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self._shut, self._close = shut, close
        self.serve = serve
        """An `omega-mcp serve` child (the hub could not be used): when it ends, the relay ends."""
        self.shut = False

    def shutdown(self) -> None:
        """No more lines for it: it ends the window once its answers are out."""
        if not self.shut:
            self.shut = True
            try:
                self._shut()
            except OSError:
                pass

    def close(self) -> None:
        self._close()


class Relay:
    """Copies lines between stdin/stdout and the hub, answering the opening from the greeting."""

    def __init__(
        self, connect: Connect, greeting: Greeting | None, end: HubEnd | None = None, fallback: Fallback | None = None
    ) -> None:
        self.connect, self.greeting, self.end, self.fallback = connect, greeting, end, fallback
        self.to_hub = bytearray()
        self.to_client = bytearray()
        self.from_client = bytearray()
        self.from_hub = bytearray()
        self.in_flight: dict[str, str] = {}  # the id as a key -> the id's JSON (the same text)
        self.initialize: dict[str, object] | None = None
        self.initialized: bytes | None = None
        self.swallow: set[str] = set()
        self.initialize_key: str | None = None
        """The id of the client's `initialize` when it was answered here."""
        self.opening: str | None = "first" if greeting is not None else None
        """"first": nothing asked yet; "handshake": a bare server/discover was (an initialize may follow)."""
        self.replays = 0
        self.client_open = True
        self.closing = 0.0
        self.wake_read, self.wake_write = os.pipe()
        self.reached: list[HubEnd | BaseException] = []
        os.set_blocking(0, False)
        os.set_blocking(1, False)
        if end is None:
            self._reach()

    # -- reaching the hub, in a thread: the client's opening is answered meanwhile ------------

    def _reach(self) -> None:
        def reach() -> None:
            try:
                found: HubEnd | BaseException = self.connect()
            except BaseException as exc:  # handed to the loop, which decides
                found = exc
            self.reached.append(found)
            os.write(self.wake_write, b"x")

        _thread.start_new_thread(reach, ())

    def _reached(self) -> None:
        os.read(self.wake_read, 64)
        if not self.reached:
            return
        found = self.reached.pop()
        if isinstance(found, OSError) and self.fallback is not None:
            found = self.fallback(found)
        if isinstance(found, BaseException):
            raise found
        self.end = found

    # -- the lines ----------------------------------------------------------------------------

    def _from_client_line(self, line: bytes) -> None:
        message = object_of(line)
        if message is not None:
            method, key = message.get("method"), message.get("id")
            if method == "initialize":
                self.initialize = message
            elif method == "notifications/initialized":
                self.initialized = line
            if isinstance(method, str) and key is not None and not self._answer_here(message, key):
                self.in_flight[dumps(key)] = dumps(key)
        self.to_hub += line + b"\n"

    def _answer_here(self, message: dict[str, object], key: object) -> bool:
        """Answer an opening request from the greeting; the hub's own answer to it will be swallowed.

        The hub's connection takes its era from the first request, as the SDK's does: an
        `initialize` or a 2026-era `server/discover` settles it, and nothing after is answered here;
        a `server/discover` without the 2026 envelope opens the handshake era, so only an
        `initialize` may still be answered after it.
        """
        if self.greeting is None or self.opening is None:
            return False
        method = message.get("method")
        answer = self.greeting.answer(message) if self.opening == "first" or method == "initialize" else None
        if answer is None:
            self.opening = None
            return False
        self.opening = "handshake" if method == "server/discover" and not _opens_modern(message) else None
        raw = dumps(key)
        self.to_client += b'{"jsonrpc":"2.0","id":%s,%s}\n' % (raw.encode(), answer.encode())
        self.swallow.add(raw)
        if method == "initialize":
            self.initialize_key = raw
        return True

    def _from_hub_line(self, line: bytes) -> None:
        message = object_of(line)
        if message is not None and "method" not in message and "id" in message:
            key = dumps(message.get("id"))
            if key in self.swallow:
                self.swallow.discard(key)
                if key == self.initialize_key and "error" in message:  # the client was told it succeeded
                    _say(f"the hub refused the initialize this window was answered at once: {message.get('error')}")
                return
            self.in_flight.pop(key, None)
        self.to_client += line + b"\n"

    def _lost(self) -> None:
        """The hub went away: fail what was in flight, reach another, re-open the session there."""
        end, self.end = self.end, None
        if end is not None:
            end.close()
        for raw in self.in_flight.values():
            error = b'{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"%s"}}\n' % (
                raw.encode(),
                LOST.encode(),
            )
            self.to_client += error
        self.in_flight.clear()
        self.swallow.clear()
        self.initialize_key = None
        self.to_hub.clear()
        self.from_hub.clear()
        self.opening = None
        _say("the hub went away; attaching to a new one")
        if self.initialize is not None:
            self.replays += 1
            replay_id = f"{_REPLAY}{self.replays}"
            self.swallow.add(dumps(replay_id))
            self.to_hub += dumps({**self.initialize, "id": replay_id}).encode() + b"\n"
            if self.initialized is not None:
                self.to_hub += self.initialized + b"\n"
        self._reach()

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        """Relay until the client has left and its requests are answered; the exit code.

        Raises:
            OSError, ValueError: the hub cannot be reached (again), or refused this window.
        """
        try:
            return self._loop()
        finally:
            if self.end is not None:
                self.end.close()
            os.close(self.wake_read)
            os.close(self.wake_write)

    def _loop(self) -> int:
        poll = select.poll()
        while True:
            if not self.client_open and self._done():
                return 0
            end = self.end
            if not self.client_open and end is not None and not self.to_hub and not self.in_flight:
                end.shutdown()
            wanted: dict[int, int] = {self.wake_read: select.POLLIN}
            if self.client_open:
                wanted[0] = select.POLLIN
            if self.to_client:
                wanted[1] = select.POLLOUT
            if end is not None:
                wanted[end.read_fd] = select.POLLIN
                if self.to_hub and end.write_fd >= 0:
                    wanted[end.write_fd] = wanted.get(end.write_fd, 0) | select.POLLOUT
            for fd, events in wanted.items():
                poll.register(fd, events)
            try:
                ready = poll.poll(None if self.client_open else 1000)
            finally:
                for fd in wanted:
                    poll.unregister(fd)
            for fd, events in ready:
                if fd == self.wake_read:
                    self._reached()
                elif fd == 0:
                    self._read_client()
                elif fd == 1:
                    self._write_client()
                elif end is not None and end is self.end and not self._hub_event(end, fd, events):
                    if end.serve:
                        return 1 if self.client_open else 0
                    if not self.client_open and not self.in_flight:
                        return 0
                    self._lost()
                    break

    def _hub_event(self, end: HubEnd, fd: int, events: int) -> bool:
        """Read or write the hub's end as `events` say; False when it is gone."""
        if fd == end.read_fd and events & (select.POLLIN | select.POLLHUP | select.POLLERR) and not self._read_hub(end):
            return False
        if fd == end.write_fd and events & select.POLLOUT and self.to_hub:
            return self._write_hub(end)
        if fd == end.write_fd and fd != end.read_fd and events & (select.POLLHUP | select.POLLERR):
            return False
        return True

    def _done(self) -> bool:
        """The client left: done once nothing is owed to it (or its requests took too long)."""
        if self.to_client:
            return False
        if not self.in_flight:
            return True
        return time.monotonic() > self.closing

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
            if self.from_client.strip():
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

    def _read_hub(self, end: HubEnd) -> bool:
        try:
            data = os.read(end.read_fd, 1 << 16)
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

    def _write_hub(self, end: HubEnd) -> bool:
        try:
            sent = os.write(end.write_fd, self.to_hub)
        except BlockingIOError:
            return True
        except OSError:
            return False
        del self.to_hub[:sent]
        return True


def _say(text: str) -> None:
    sys.stderr.write(f"omega-mcp attach: {text}\n")
    sys.stderr.flush()
