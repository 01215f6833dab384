"""The official conformance suite, installed from the npm registry, and the processes it tests.

`install()` puts node 22 (the `node` package ships the binary) and the suite under
`~/.cache/omega-mcp/conformance/<version>` once; it skips the calling test with a clear reason
only when the npm registry cannot be reached. `run_server_suite` runs every scenario of one
protocol era against a URL and returns each scenario's verdict (a FAILURE check fails it;
warnings do not).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

AGAIN = "_again"
"""Where a failed scenario's second run writes its results (see `_again`)."""
SUITE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE = "node@22"
HERE = Path(__file__).parent
PYTHON = sys.executable
_DIR_NAME = re.compile(r"^(?:server-)?(?P<name>.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


def install() -> Path:
    """The suite's entry point (installing it on first use); skips when npm cannot be reached."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("the conformance suite needs npm (not installed)")
    prefix = Path.home() / ".cache" / "omega-mcp" / "conformance" / SUITE.rsplit("@", 1)[1]
    entry = prefix / "node_modules" / ".bin" / "conformance"
    prefix.mkdir(parents=True, exist_ok=True)
    # Test workers (pytest-xdist) may install at once: one installs, the others wait for it.
    with (prefix.parent / f"{prefix.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (entry.exists() and (prefix / "node_modules" / "node" / "bin" / "node").exists()):
            _npm_install(npm, prefix)
    return entry


def _npm_install(npm: str, prefix: Path) -> None:
    """`npm install` the suite and its node 22 into `prefix`; skips when the registry is unreachable."""
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), NODE, SUITE],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        if re.search(r"ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|network", done.stderr):
            pytest.skip(f"the npm registry is unreachable, cannot install {SUITE}: {done.stderr.strip()[-200:]}")
        raise RuntimeError(f"npm install {SUITE} failed:\n{done.stderr[-2000:]}")


def node_env() -> dict[str, str]:
    """An environment whose `node` is the node 22 the suite was installed with."""
    node_bin = install().parent.parent / "node" / "bin"
    return {**os.environ, "PATH": f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen[bytes], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port} after {seconds} s")


@contextmanager
def process(args: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run `args` until the block ends, waiting for it to listen on `port` first."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            try:
                wait_listening(port, proc)
            except (RuntimeError, TimeoutError) as exc:
                raise RuntimeError(f"{exc}:\n{log.read_text(errors='replace')[-3000:]}") from None
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def reference(port: int, log: Path, *, modern_only: bool = False) -> AbstractContextManager[None]:
    args = [PYTHON, str(HERE / "reference_server.py"), "--port", str(port)]
    return process([*args, "--modern-only"] if modern_only else args, port, log)


def renamer(
    port: int, upstream: str, log: Path, *, prefix: str = "", token: str | None = None
) -> AbstractContextManager[None]:
    args = [PYTHON, str(HERE / "renamer.py"), "--port", str(port), "--upstream", upstream, "--prefix", prefix]
    return process([*args, "--token", token] if token else args, port, log)


def verdicts(out_dir: Path) -> dict[str, bool]:
    """Each scenario's verdict from the suite's result files: False when a check failed."""
    found: dict[str, bool] = {}
    for checks in out_dir.rglob("checks.json"):
        if AGAIN in checks.relative_to(out_dir).parts:
            continue
        where = checks.parent.relative_to(out_dir).as_posix()  # client scenarios: `auth/NAME-...` too
        match = _DIR_NAME.match(where)
        assert match is not None, where
        items = json.loads(checks.read_text())
        found[match["name"]] = bool(items) and all(c.get("status") != "FAILURE" for c in items)
    return found


def failures(out_dir: Path, scenario: str) -> list[str]:
    """The failed checks of one scenario, one line each (for assertion messages): of its second run
    when it had one (`_again`)."""
    again = out_dir / AGAIN
    if any(again.glob(f"**/*{scenario}-*/checks.json")):
        out_dir = again
    lines: list[str] = []
    for checks in out_dir.glob(f"**/*{scenario}-*/checks.json"):  # `auth/` scenarios are one level down
        for c in json.loads(checks.read_text()):
            if c.get("status") == "FAILURE":
                lines.append(f"{scenario}: {c.get('id')}: {str(c.get('errorMessage'))[:300]}")
    return lines


def run_server_suite(url: str, era: str, out_dir: Path, expected: Sequence[str] = ()) -> dict[str, bool]:
    entry = install()
    base = [str(entry), "server", "--url", url, "--spec-version", era]
    subprocess.run(
        [*base, "--suite", "all", "-o", str(out_dir)], env=node_env(), capture_output=True, timeout=600
    )  # its exit status says whether anything failed; the verdicts are read from its files
    return _again(base, verdicts(out_dir), expected, out_dir)


def _again(base: list[str], found: dict[str, bool], expected: Sequence[str], out_dir: Path) -> dict[str, bool]:
    """Each scenario that failed (or left no verdict) run once more, alone, into `out_dir/_again`.

    The suite starts a whole era's scenarios at once with fixed timeouts; on a 2-core machine
    busy with other tests (the suite runs in several workers) one of them can time out for want
    of CPU. Alone it gets the machine: a real failure fails again, a starved one passes.
    """
    for scenario in sorted({s for s, ok in found.items() if not ok} | (set(expected) - set(found))):
        again = out_dir / AGAIN
        subprocess.run(
            [*base, "--scenario", scenario, "-o", str(again)], env=node_env(), capture_output=True, timeout=300
        )
        second = verdicts(again).get(scenario)
        if second is not None:
            found[scenario] = second
    return found


def wait_connected(log: Path, server: str, seconds: float = 30.0) -> None:
    """Until omega's log says `server` connected (its tools are then listed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if f"server {server} connected" in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise TimeoutError(
        f"server {server} did not connect within {seconds} s:\n{log.read_text(errors='replace')[-2000:]}"
    )


def run_client_suite(command: list[str], era: str, out_dir: Path, expected: Sequence[str] = ()) -> dict[str, bool]:
    """Every client scenario of one era against `command` (the suite appends its test server's URL).

    The suite starts all of an era's scenarios at once; two such runs side by side overload a
    2-core machine (scenarios then time out), so callers run them one after the other.
    """
    entry = install()
    base = [str(entry), "client", "--command", " ".join(command), "--timeout", "60000", "--spec-version", era]
    subprocess.run(
        [*base, "--suite", "all", "-o", str(out_dir)], env=node_env(), capture_output=True, timeout=600
    )  # its exit status says whether anything failed; the verdicts are read from its files
    return _again(base, verdicts(out_dir), expected, out_dir)
