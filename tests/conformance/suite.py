"""The official conformance suite, installed from the npm registry, and the processes it tests.

`install()` puts node 22 (the `node` package ships the binary) and the suite under
`~/.cache/omega-mcp/conformance/<version>` once; it skips the calling test with a clear reason
only when the npm registry cannot be reached. `run_server_suite` runs every scenario of one
protocol era against a URL and returns each scenario's checks (id -> status); `passed` is the
suite's own verdict (a FAILURE check fails it, warnings do not) and `lost` what a run through omega
must not have: a check that succeeded directly and did not through omega.
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


Checks = dict[str, str]
"""One scenario's checks: check id -> its status (the worst of its occurrences; INFO lines left out)."""
_RANK = {"SUCCESS": 0, "SKIPPED": 1, "INFO": 2, "WARNING": 3, "FAILURE": 4}


def results(out_dir: Path) -> dict[str, Checks]:
    """Each scenario's checks from the suite's result files (not those of a second run, `_again`)."""
    found: dict[str, Checks] = {}
    for checks in out_dir.rglob("checks.json"):
        if AGAIN in checks.relative_to(out_dir).parts:
            continue
        where = checks.parent.relative_to(out_dir).as_posix()  # client scenarios: `auth/NAME-...` too
        match = _DIR_NAME.match(where)
        assert match is not None, where
        statuses: Checks = {}
        for c in json.loads(checks.read_text()):
            status = str(c.get("status"))
            if status == "INFO" or not c.get("id"):  # the suite's traffic log, no requirement
                continue
            previous = statuses.get(c["id"])
            if previous is None or _RANK.get(status, 4) > _RANK.get(previous, 4):
                statuses[c["id"]] = status
        found[match["name"]] = statuses
    return found


def passed(checks: Checks | None) -> bool:
    """A scenario's verdict as the suite gives it: it ran some check and none failed (warnings do not)."""
    return bool(checks) and all(status != "FAILURE" for status in (checks or {}).values())


def lost(direct: Checks | None, through: Checks | None) -> list[str]:
    """The checks that succeeded directly and did not through omega (worse, or not made at all): a
    scenario can still pass with fewer checks, or with a success turned into a warning."""
    through = through or {}
    return sorted(c for c, status in (direct or {}).items() if status == "SUCCESS" and through.get(c) != "SUCCESS")


def failures(out_dir: Path, scenario: str, checks: Sequence[str] = ()) -> list[str]:
    """The failed checks of one scenario (and those named in `checks`), one line each with the suite's
    message (for assertion messages): of its second run when it had one (`_again`)."""
    again = out_dir / AGAIN
    if any(again.glob(f"**/*{scenario}-*/checks.json")):
        out_dir = again
    lines: list[str] = []
    for path in out_dir.glob(f"**/*{scenario}-*/checks.json"):  # `auth/` scenarios are one level down
        for c in json.loads(path.read_text()):
            if c.get("status") == "FAILURE" or (c.get("id") in checks and c.get("status") not in ("SUCCESS", "INFO")):
                lines.append(f"{scenario}: {c.get('id')}: {c.get('status')}: {str(c.get('errorMessage'))[:300]}")
    seen = {line.split(": ")[1] for line in lines}
    lines += [f"{scenario}: {c}: not made (or as INFO only)" for c in checks if c not in seen]
    return lines


def run_server_suite(
    url: str, era: str, out_dir: Path, expected: Sequence[str] = (), baseline: dict[str, Checks] | None = None
) -> dict[str, Checks]:
    """Every server scenario of `era` against `url`: each scenario's checks (see `_again` for `baseline`)."""
    entry = install()
    base = [str(entry), "server", "--url", url, "--spec-version", era]
    subprocess.run(
        [*base, "--suite", "all", "-o", str(out_dir)], env=node_env(), capture_output=True, timeout=600
    )  # its exit status says whether anything failed; the checks are read from its files
    return _again(base, results(out_dir), expected, out_dir, baseline)


def _again(
    base: list[str],
    found: dict[str, Checks],
    expected: Sequence[str],
    out_dir: Path,
    baseline: dict[str, Checks] | None,
) -> dict[str, Checks]:
    """Each scenario that failed, left no checks, or (given the direct run's `baseline`) lost a check
    run once more, alone, into `out_dir/_again`.

    The suite starts a whole era's scenarios at once with fixed timeouts (some checks wait 500 ms
    for a stream); on a 2-core machine busy with other tests (the suite runs in several workers)
    one of them can time out for want of CPU. Alone it gets the machine: a real failure or loss
    happens again, a starved one does not.
    """

    def again_needed(scenario: str) -> bool:
        checks = found.get(scenario)
        return not passed(checks) or (baseline is not None and bool(lost(baseline.get(scenario), checks)))

    for scenario in sorted(s for s in {*found, *expected} if again_needed(s)):
        again = out_dir / AGAIN
        subprocess.run(
            [*base, "--scenario", scenario, "-o", str(again)], env=node_env(), capture_output=True, timeout=300
        )
        second = results(again).get(scenario)
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


def run_client_suite(
    command: list[str], era: str, out_dir: Path, expected: Sequence[str] = (), baseline: dict[str, Checks] | None = None
) -> dict[str, Checks]:
    """Every client scenario of one era against `command` (the suite appends its test server's URL):
    each scenario's checks (see `_again` for `baseline`).

    The suite starts all of an era's scenarios at once; two such runs side by side overload a
    2-core machine (scenarios then time out), so callers run them one after the other.
    """
    entry = install()
    base = [str(entry), "client", "--command", " ".join(command), "--timeout", "60000", "--spec-version", era]
    subprocess.run(
        [*base, "--suite", "all", "-o", str(out_dir)], env=node_env(), capture_output=True, timeout=600
    )  # its exit status says whether anything failed; the checks are read from its files
    return _again(base, results(out_dir), expected, out_dir, baseline)
