"""OAuth for remote servers, on disk: where a server's record lives, the record, and what it says.

One JSON record per server, `$OMEGA_HOME/state/oauth/<server>.json` (0600, in a 0700 directory,
replaced atomically), bound to the URL it was made for; `oauth.py` keeps the tokens in it. What
the CLI and the status lines read of it without the flow: the loopback port a login registered
(`registered_port`), and a scope step-up a hub recorded (`step_up_needed`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import tempfile
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp.shared.auth import AuthorizationCodeResult

from omega_mcp.errors import LoginRequiredError
from omega_mcp.narrow import as_list, as_object
from omega_mcp.sandbox.policy import STATE_DIR_NAME

__all__ = [
    "OAUTH_DIR_NAME",
    "Interactive",
    "OAuthSettings",
    "TokenFile",
    "registered_port",
    "step_up_needed",
    "token_file",
]

logger = logging.getLogger(__name__)

OAUTH_DIR_NAME = "oauth"
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def token_file(home: Path, server_name: str) -> Path:
    """Where the record of `server_name` lives: `$OMEGA_HOME/state/oauth/<server>.json`.

    Raises:
        ValueError: the name is no server key (it could point outside the directory).
    """
    if not _SERVER_NAME.match(server_name):
        raise ValueError(f"{server_name!r} is not a server name (letters, digits, '-' and '_')")
    return home / STATE_DIR_NAME / OAUTH_DIR_NAME / f"{server_name}.json"


@dataclass(frozen=True, slots=True)
class Interactive:
    """How `omega-mcp login` takes a person through the flow (cli/login.py builds these)."""

    redirect_uri: str
    """The loopback callback the browser is sent back to, e.g. `http://127.0.0.1:PORT/callback`."""
    redirect: Callable[[str], Awaitable[None]]
    """Show the authorization URL (print it, open the browser)."""
    callback: Callable[[], Awaitable[AuthorizationCodeResult]]
    """Wait (bounded) for the browser to come back with the code."""


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """`auth = "oauth"` of one `[servers.NAME]`, where its record is, and who can be asked."""

    server_name: str
    url: str
    record: Path
    client_id: str | None = None
    scopes: tuple[str, ...] = ()
    client_metadata_url: str | None = None
    client_secret_env: str | None = None
    """The environment variable holding the pre-registered client's secret."""
    interactive: Interactive | None = None
    """None: never ask anyone (serve, tools, call, agent)."""


class TokenFile:
    """One server's record on disk (a few KiB of JSON, read and written synchronously)."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.url = url

    def stamp(self) -> tuple[int, int] | None:
        """Which version of the file is on disk (inode and mtime: every write renames a new file over
        it), None when there is none: a replica re-reads the record when another one changed it."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    @contextlib.contextmanager
    def locked(self) -> Generator[None]:
        """Hold the record's lock (`flock` on a sibling `.lock` file), so that several omega processes
        on one $OMEGA_HOME (hub replicas) read, refresh and write it one at a time. Blocking: take it
        in a worker thread."""
        directory = self.path.parent
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def read(self) -> dict[str, Any]:
        """The record; empty when there is none, it cannot be read, or it was made for another URL."""
        try:
            data = as_object(json.loads(self.path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("ignoring the OAuth record %s: %s", self.path, exc)
            return {}
        return data if data.get("url") == self.url else {}

    def write(self, record: dict[str, Any]) -> None:
        """Replace the record atomically: a 0600 file written beside it in the 0700 directory, renamed over it."""
        directory = self.path.parent
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # `state`, when omega makes it
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        fd, temporary = tempfile.mkstemp(prefix=f".{self.path.stem}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({**record, "url": self.url}, out, indent=2)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def forget(self) -> bool:
        """Delete the record (whatever URL it was for); False when there was none."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True


def registered_port(settings: OAuthSettings) -> int | None:
    """The loopback port of the last registration's redirect URI: a login there needs no new registration."""
    client = as_object(TokenFile(settings.record, settings.url).read().get("client"))
    for uri in as_list(client.get("redirect_uris")):
        parts = urlsplit(uri) if isinstance(uri, str) else None
        if parts is not None and parts.hostname == "127.0.0.1" and parts.path == "/callback" and parts.port:
            return parts.port
    return None


def step_up_needed(settings: OAuthSettings) -> str | None:
    """The `needs login` status of a server that asked for more scope than was granted, or None."""
    scope = TokenFile(settings.record, settings.url).read().get("step_up")
    return str(LoginRequiredError(settings.server_name, scope=scope)) if isinstance(scope, str) and scope else None
