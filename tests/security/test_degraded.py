"""Degrade clearly, never break: where the kernel gives less, bash runs with the layers that hold or fails closed.

Each machine is simulated by a seccomp filter installed before omega starts (tests/seccomp_wrap.py):
user namespaces refused (Docker's default profile), user namespaces without mount rights (Ubuntu
24.04's AppArmor default), Landlock absent. In the first two bash still runs under Landlock (a write
outside the write roots is denied) and `tools --json` reports the namespace layers off; without
Landlock, bash in sandbox mode fails closed with one line naming what is missing and what to do.
Never a traceback. (Before, without mount rights the probe took the namespaces as usable and every
bash call failed with `mount /: Operation not permitted`.)
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() != "x86_64",
    reason="the seccomp wrapper's filter is written for Linux on x86_64",
)

WRAP = Path(__file__).parents[1] / "seccomp_wrap.py"


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside every write root and outside /tmp (which bash may see privately)."""
    if not os.path.isdir("/var/tmp"):
        pytest.skip("needs /var/tmp")
    made = Path(tempfile.mkdtemp(prefix="omega-degraded-", dir="/var/tmp"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _omega(tmp_path: Path, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    env = {**os.environ, "OMEGA_HOME": str(tmp_path / "home")}
    env.pop("OMEGA_CONFIG", None)
    argv = [sys.executable, str(WRAP), mode, "--", sys.executable, "-m", "omega_mcp", *args, "--workspace", str(ws)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)


def _layers(tmp_path: Path, mode: str) -> dict[str, str]:
    done = _omega(tmp_path, mode, "tools", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)["sandbox"]["layers"]


@pytest.mark.parametrize("mode", ["nouserns", "nomount"])
@pytest.mark.e2e
def test_without_namespaces_bash_runs_under_landlock_and_the_rest_is_reported_off(
    tmp_path: Path, outside: Path, mode: str
) -> None:
    target = outside / "planted"
    command = f"echo hi; echo x > {target} && echo WROTE"
    done = _omega(tmp_path, mode, "call", "bash", json.dumps({"command": command}))
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "hi" in done.stdout.splitlines(), done.stdout + done.stderr
    assert "WROTE" not in done.stdout and not target.exists(), done.stdout
    layers = _layers(tmp_path, mode)
    assert layers["landlock"].startswith("on"), layers
    assert layers["pid_namespace"].startswith("off"), layers
    why = {"nouserns": "unshare", "nomount": "mount"}[mode]  # what the probe found missing, said where it is off
    assert why in layers["pid_namespace"] and "Operation not permitted" in layers["pid_namespace"], layers


@pytest.mark.e2e
def test_without_landlock_sandbox_bash_fails_closed_with_one_line_saying_what_to_do(
    tmp_path: Path, outside: Path
) -> None:
    target = outside / "planted"
    done = _omega(tmp_path, "nolandlock", "call", "bash", json.dumps({"command": f"echo x > {target}; echo RAN"}))
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.returncode != 0 and "RAN" not in done.stdout and not target.exists(), done.stdout
    refusal = [line for line in done.stdout.splitlines() if "Landlock" in line]
    assert len(refusal) == 1 and "require_os_sandbox = false" in refusal[0], done.stdout
    assert _layers(tmp_path, "nolandlock")["landlock"].startswith("off")


def test_the_wrapper_itself_takes_the_feature_away(tmp_path: Path) -> None:
    """The simulation is real: unshare fails under nouserns, and works without the filter (the control)."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    refused = subprocess.run(
        [sys.executable, str(WRAP), "nouserns", "--", "unshare", "-U", "true"], capture_output=True, timeout=30
    )
    assert refused.returncode != 0
    allowed = subprocess.run(["unshare", "-U", "true"], capture_output=True, timeout=30, check=False)
    if allowed.returncode != 0:
        pytest.skip("user namespaces are unavailable here anyway")
