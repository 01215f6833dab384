"""Run an attack the way a user runs omega: as an unprivileged account (created when the suite runs as root).

`Scenario` runs a short Python program (the attack: a Toolbox under a sandbox policy, tool calls)
in a subprocess, as `omega-sbx-test` when we are root and as ourselves otherwise, in a directory
that account owns, and returns the JSON object the program prints last. The program sees `PLACE`
(that directory: `home`, `ws` and `fakehome` inside) and `call(name, args)` / `policy(...)` helpers
(`PRELUDE`); it uses only APIs that old and new omega share, so the same attack can be run against
an older checkout (`PYTHONPATH` is passed through) to see it succeed there.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

USER = "omega-sbx-test"

PRELUDE = """
import json, os, sys
from pathlib import Path
import anyio
from omega_mcp.calling import CallContext
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox

PLACE = Path(sys.argv[1])
HOME, WS = PLACE / "home", PLACE / "ws"

def policy(**changes):
    base = dict(mode="sandbox", home=HOME, workspace=WS, tmp_dir=Path("/tmp"))
    base.update(changes)
    return SandboxPolicy(**base)

def text(result):
    return "".join(getattr(block, "text", "") for block in result.content)

async def call(box, name, args, owner=None):
    result = await box.call_tool(name, args, CallContext(owner=owner))
    return {"error": bool(result.is_error), "text": text(result)}
"""


def unprivileged() -> pwd.struct_passwd | None:
    """The account to attack as (made once when we are root), or None when we are not root (we are it)."""
    if os.geteuid() != 0:
        return None
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        user = _create()
    require_reach(user)
    return user


def _create() -> pwd.struct_passwd:
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed: cannot create an unprivileged user")
    made = subprocess.run(["useradd", "--create-home", USER], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot create an unprivileged user: {made.stderr.strip()}")
    return pwd.getpwnam(USER)


_reach: dict[int, str] = {}


def require_reach(user: pwd.struct_passwd) -> None:
    """Skip, saying why, when `user` cannot run this interpreter and import omega (a checkout or
    interpreter below a directory only root may enter, such as /root): then every attack run as that
    account would fail before it starts, telling nothing about the sandbox."""
    if user.pw_uid not in _reach:
        try:
            done = subprocess.run(
                [sys.executable, "-c", "import omega_mcp"],
                user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"},
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            _reach[user.pw_uid] = "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]
        except PermissionError as exc:
            _reach[user.pw_uid] = str(exc)
    if _reach[user.pw_uid]:
        pytest.skip(
            f"the unprivileged account {user.pw_name} cannot run {sys.executable} with omega "
            f"({_reach[user.pw_uid]}): put the checkout and its interpreter where other users may enter"
        )


class Scenario:
    """A place owned by the attacking account, and a way to run attack programs there as it."""

    def __init__(self, user: pwd.struct_passwd | None, place: Path) -> None:
        self.user = user
        self.place = place
        self.home = place / "home"
        self.ws = place / "ws"
        self.fakehome = place / "fakehome"

    @property
    def uid(self) -> int:
        return self.user.pw_uid if self.user is not None else os.geteuid()

    def own(self, *paths: Path) -> None:
        """Give `paths` (made by the test) to the attacking account, as if it had made them."""
        if self.user is not None:
            for path in paths:
                os.lchown(path, self.user.pw_uid, self.user.pw_gid)

    def env(self) -> dict[str, str]:
        env = {"HOME": str(self.fakehome), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "USER": USER}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return env

    def run(self, program: str, *, timeout: float = 120) -> dict[str, Any]:
        """Run `PRELUDE` + `program` as the account; the last stdout line is JSON (the program prints it)."""
        options: dict[str, Any] = {}
        if self.user is not None:
            options = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        done = subprocess.run(
            [sys.executable, "-c", PRELUDE + program, str(self.place)],
            env=self.env(), cwd=self.place, capture_output=True, text=True, timeout=timeout, check=False, **options,
        )  # fmt: skip
        lines = done.stdout.strip().splitlines()
        assert done.returncode == 0 and lines, f"the attack program failed:\n{done.stdout}\n{done.stderr}"
        return json.loads(lines[-1])


@contextmanager
def scenario() -> Iterator[Scenario]:
    """A fresh `Scenario` in /tmp (pytest's tmp_path is root's, mode 0700, when we are root)."""
    user = unprivileged()
    place = Path("/tmp") / f"omega-attack-{uuid.uuid4().hex[:12]}"
    place.mkdir()
    try:
        made = Scenario(user, place)
        for sub in (made.home, made.ws, made.fakehome):
            sub.mkdir()
        made.own(place, made.home, made.ws, made.fakehome)
        if user is not None:
            probe = subprocess.run(
                [sys.executable, "-c", "import omega_mcp"], env=made.env(), cwd=place, capture_output=True, check=False,
                user=user.pw_uid, group=user.pw_gid, extra_groups=[],
            )  # fmt: skip
            if probe.returncode != 0:
                pytest.skip(f"this checkout is not readable by other users: {probe.stderr.decode()[-200:]}")
        yield made
    finally:
        shutil.rmtree(place, ignore_errors=True)
