"""Saved agent sessions: one JSON-lines file per conversation under `$OMEGA_HOME/sessions/`.

Line 1 is a header (`omega_session`, `id`, `created`, `provider`, `model`, `first_prompt`,
`workspace`); every further line is one neutral message (`messages.message_to_record`, lossless),
so a resumed session sends the same messages and the provider the same bytes. A finished turn is
appended whole, in one write, so the file never ends inside a turn (a tool call without its
result); a cancelled or failed turn is not saved. The directory is 0700, the files 0600, and
nothing about the provider's credentials (key, headers, base URL) is written. Ids are 8 random
lowercase hex digits and are checked before they become a file name, so `--resume` cannot be
pointed at another path.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omega_mcp.errors import ConfigError
from omega_mcp.messages import AssistantMessage, Message, message_from_json, message_to_record
from omega_mcp.narrow import as_str, object_or_none

__all__ = ["SessionInfo", "SessionRecorder", "SessionStore", "format_sessions"]

_ID = re.compile(r"[0-9a-f]{8}")
_SUFFIX = ".jsonl"
_HEADER_BYTES = 64 * 1024  # a listing reads no more than this of each file
_PROMPT_CHARS = 200  # of the first prompt, in the header
_LISTED_CHARS = 60  # of the first prompt, in `--sessions`
_FORMAT = 1


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One saved session as its header describes it; `updated` is the file's last change (epoch seconds)."""

    id: str
    created: str
    updated: float
    provider: str
    model: str
    first_prompt: str
    workspace: str
    path: Path


class SessionStore:
    """The session files under `home/sessions`: create, append whole turns, list, find and load."""

    def __init__(self, home: Path) -> None:
        self.directory = home / "sessions"

    def _ensure_directory(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(self.directory)
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(f"{self.directory} is not a directory")
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(self.directory, 0o700)  # an older or hand-made directory: sessions are private

    def create(self, *, provider: str, model: str, first_prompt: str, workspace: Path | str) -> SessionInfo:
        """A new session file holding only its header.

        Raises:
            OSError: the directory or the file cannot be created.
        """
        self._ensure_directory()
        created = datetime.now(UTC).isoformat(timespec="seconds")
        prompt = first_prompt[:_PROMPT_CHARS]
        for _ in range(16):
            session_id = secrets.token_hex(4)
            path = self.directory / f"{session_id}{_SUFFIX}"
            header: dict[str, Any] = {
                "omega_session": _FORMAT,
                "id": session_id,
                "created": created,
                "provider": provider,
                "model": model,
                "first_prompt": prompt,
                "workspace": str(workspace),
            }
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue
            try:
                os.fchmod(fd, 0o600)  # exactly 0600 whatever the umask
                _write_all(fd, _line(header))
            finally:
                os.close(fd)
            return SessionInfo(
                session_id, created, os.stat(path).st_mtime, provider, model, prompt, str(workspace), path
            )
        raise OSError(f"cannot create a new session file in {self.directory} (id collisions)")

    def append(self, session: SessionInfo, messages: Sequence[Message]) -> None:
        """Add the messages of one finished turn, in one write.

        Raises:
            OSError: the file cannot be written.
        """
        if not messages:
            return
        data = b"".join(_line(message_to_record(message)) for message in messages)
        fd = os.open(session.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)

    def save(self, session: SessionInfo, before: Sequence[Message], after: Sequence[Message]) -> None:
        """Record a finished turn that took the conversation from `before` to `after`.

        Appended when `after` extends `before`; otherwise (the loop elided older tool results to fit
        the context window) the file is replaced atomically, so a resumed run sends what this one did.

        Raises:
            OSError: the file cannot be written.
        """
        if tuple(after[: len(before)]) == tuple(before):
            self.append(session, after[len(before) :])
            return
        header = _read_private(session.path, _HEADER_BYTES).split(b"\n", 1)[0] + b"\n"
        data = header + b"".join(_line(message_to_record(message)) for message in after)
        temp = self.directory / f".{session.id}-{secrets.token_hex(4)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.fchmod(fd, 0o600)
                _write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(temp, session.path)
        except BaseException:
            with suppress(OSError):
                os.unlink(temp)
            raise

    def saved(self) -> list[SessionInfo]:
        """Every readable session, the most recently changed first."""
        found = [info for path in self._files() if (info := _read_header(path)) is not None]
        found.sort(key=lambda info: (info.updated, info.created), reverse=True)
        return found

    def latest(self) -> SessionInfo | None:
        sessions = self.saved()
        return sessions[0] if sessions else None

    def find(self, session_id: str) -> SessionInfo:
        """The session with this id.

        Raises:
            ConfigError: not an id omega makes, or no such session (the message says how to list them).
        """
        hint = "`omega-mcp agent --sessions` lists the saved sessions"
        if not _ID.fullmatch(session_id):
            raise ConfigError(f"{session_id!r} is not a session id (8 hex digits); {hint}", key="--resume")
        path = self.directory / f"{session_id}{_SUFFIX}"
        info = _read_header(path)
        if info is None:
            raise ConfigError(f"no saved session {session_id} in {self.directory}; {hint}", key="--resume")
        return info

    def load(self, session: SessionInfo) -> tuple[Message, ...]:
        """The saved conversation, cut after its last complete turn (a final answer).

        Raises:
            ConfigError: the file cannot be read or a line is not a message.
        """
        try:
            raw = _read_private(session.path)
        except OSError as exc:
            raise ConfigError(f"cannot read the session: {exc.strerror or exc}", path=str(session.path)) from None
        lines = raw.split(b"\n")
        complete = raw.endswith(b"\n")
        messages: list[Message] = []
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                messages.append(message_from_json(json.loads(line)))
            except ValueError as exc:
                if number == len(lines) and not complete:
                    break  # a write cut short by a crash: that turn was never finished
                raise ConfigError(f"line {number} is not a message ({exc})", path=str(session.path)) from None
        return _complete_turns(messages)

    def recorder(
        self, *, resume: str | None, continue_latest: bool, workspace: Path | str, warn: Callable[[str], None]
    ) -> SessionRecorder:
        """The recorder of a run: a new session, `resume` (an id), or the latest one (`continue_latest`).

        Raises:
            ConfigError: an unknown or unreadable session, or none to continue.
        """
        if resume is not None:
            session = self.find(resume)
        elif continue_latest:
            latest = self.latest()
            if latest is None:
                raise ConfigError(f"no saved session to continue in {self.directory}", key="--continue")
            session = latest
        else:
            return SessionRecorder(self, workspace=workspace, warn=warn)
        history = self.load(session)
        return SessionRecorder(self, workspace=workspace, warn=warn, session=session, history=history)

    def _files(self) -> Iterator[Path]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if name.endswith(_SUFFIX) and _ID.fullmatch(name.removesuffix(_SUFFIX)):
                yield self.directory / name


class SessionRecorder:
    """Saves one run's prompts: the file is created at the first prompt (one-shot or interactive) or
    is the resumed one, and each finished turn is recorded whole. A failed save is a warning: the
    run itself goes on."""

    def __init__(
        self,
        store: SessionStore,
        *,
        workspace: Path | str,
        warn: Callable[[str], None],
        session: SessionInfo | None = None,
        history: Sequence[Message] = (),
    ) -> None:
        self.store = store
        self.session = session
        self.history: tuple[Message, ...] = tuple(history)
        """The conversation so far: the next prompt continues it."""
        self.workspace = workspace
        """What the header names as the workspace (set once the toolbox knows it)."""
        self._warn = warn
        self._warned = False

    def record(self, prompt: str, *, provider: str, model: str, conversation: Sequence[Message] | None) -> None:
        """One prompt ended: `conversation` is the whole conversation after it, None if the turn failed."""
        try:
            if self.session is None:
                self.session = self.store.create(
                    provider=provider, model=model, first_prompt=prompt, workspace=self.workspace
                )
            if conversation is not None:
                self.store.save(self.session, self.history, conversation)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                self._warn(f"warning: cannot save the session in {self.store.directory}: {exc.strerror or exc}")
        if conversation is not None:
            self.history = tuple(conversation)


def format_sessions(sessions: Sequence[SessionInfo]) -> list[str]:
    """`--sessions` lines: id, local time of the last change, provider, model, the first prompt."""
    lines: list[str] = []
    for info in sessions:
        when = datetime.fromtimestamp(info.updated).strftime("%Y-%m-%d %H:%M")
        prompt = " ".join(info.first_prompt.split())
        if len(prompt) > _LISTED_CHARS:
            prompt = prompt[: _LISTED_CHARS - 1] + "…"
        lines.append(f"{info.id}  {when}  {info.provider}  {info.model}  {prompt}")
    return lines


def _complete_turns(messages: list[Message]) -> tuple[Message, ...]:
    """The conversation up to its last final answer: anything after it could be a call without its result."""
    for end in range(len(messages), 0, -1):
        message = messages[end - 1]
        if isinstance(message, AssistantMessage) and not message.tool_calls:
            return tuple(messages[:end])
    return ()


def _line(data: dict[str, Any]) -> bytes:
    # ASCII escapes: a lone surrogate in a tool's output survives the round trip instead of failing to encode.
    return (json.dumps(data, separators=(",", ":")) + "\n").encode("ascii")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_private(path: Path, limit: int | None = None) -> bytes:
    """A regular file's bytes (at most `limit`), never through a symbolic link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit - size)):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                break
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_header(path: Path) -> SessionInfo | None:
    """The session's header, or None when the file is missing, unreadable or not a session."""
    try:
        updated = os.lstat(path).st_mtime
        first = _read_private(path, _HEADER_BYTES).split(b"\n", 1)[0]
        header = object_or_none(json.loads(first))
    except (OSError, ValueError):
        return None
    if header is None or header.get("omega_session") != _FORMAT:
        return None
    session_id = as_str(header.get("id"))
    if session_id is None or f"{session_id}{_SUFFIX}" != path.name:
        return None
    return SessionInfo(
        id=session_id,
        created=as_str(header.get("created")) or "",
        updated=updated,
        provider=as_str(header.get("provider")) or "?",
        model=as_str(header.get("model")) or "?",
        first_prompt=str(header.get("first_prompt") or ""),
        workspace=str(header.get("workspace") or ""),
        path=path,
    )
