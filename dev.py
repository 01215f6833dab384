#!/usr/bin/env python3
"""Developer entry point that needs nothing but Python 3.11+ and pip.

    python3 dev.py serve [omega-mcp serve flags]   # make .venv, install, run the hub on ./servers.toml (stdio)
    python3 dev.py test  [pytest args]             # make .venv, install, run the whole test suite (4 workers; -n 0: one)
    python3 dev.py lint                            # ruff check, ruff format --check, pyright
    python3 dev.py docs                            # mkdocs build --strict of docs/ (into a temporary directory)
    python3 dev.py --help                          # this text (installs nothing)

The virtual environment is created once in .venv and reinstalled only when pyproject.toml changes.
The command is checked before anything is installed. `test` measures the coverage of src/omega_mcp
and prints its total before pytest's summary, with no threshold (`--no-cov`: not measured); the
data stays in .coverage for `.venv/bin/coverage report`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".omega-installed"


def _say(message: str) -> None:
    print(f"dev.py: {message}", file=sys.stderr, flush=True)


def ensure_venv() -> None:
    """Create .venv and install the package with its dev extras when needed."""
    if not PYTHON.exists():
        _say(f"creating {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    _say("installing omega-mcp and its dev extras into .venv (once)")
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(wanted)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _workers(args: list[str]) -> list[str]:
    """Four test workers unless the arguments choose (`-n 0` runs in one process): most tests wait on
    subprocesses, so four keep two cores busy. Whole files go to one worker, so a module's
    fixtures (the conformance suite's servers) start once."""
    if any(a.startswith(("-n", "--numprocesses", "--dist")) for a in args) or "no:xdist" in args:
        return []
    return ["-n", os.environ.get("OMEGA_TEST_WORKERS", "4"), "--dist", "loadfile"]


def _coverage(args: list[str]) -> list[str]:
    """Coverage of the package in the test processes (xdist's workers too; not the subprocesses a test
    starts), reported as one total line by tests/conftest.py; arguments that choose otherwise win."""
    if any(a.startswith(("--cov", "--no-cov")) for a in args) or "no:pytest_cov" in args or "no:cov" in args:
        return []
    return ["--cov=omega_mcp", "--cov-report="]


def _test_env(env: dict[str, str]) -> dict[str, str]:
    """The tests' environment writes bytecode caches even where PYTHONDONTWRITEBYTECODE is set: pytest keeps
    its assert-rewritten test modules there, and without them every worker rewrites and compiles all ~190
    test modules again at each run (about 5 s of CPU each, twice that under coverage). The caches are the
    `__pycache__` directories git ignores."""
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


LINTERS = {
    "ruff check": ["-m", "ruff", "check", "src", "tests", "bench"],
    "ruff format --check": ["-m", "ruff", "format", "--check", "src", "tests", "bench"],
    "pyright": ["-m", "pyright"],
}


def lint(env: dict[str, str]) -> int:
    """Run every linter (even after one fails) and name the ones that failed."""
    codes = {
        name: subprocess.run([str(PYTHON), *args], cwd=ROOT, env=env, check=False).returncode
        for name, args in LINTERS.items()
    }
    failed = [f"{name} (exit {code})" for name, code in codes.items() if code]
    if failed:
        _say(f"lint failed: {', '.join(failed)}")
    return max(codes.values())


def docs(env: dict[str, str]) -> int:
    """Build the site as CI does (`--strict`: a broken link or anchor fails), into a directory that is
    removed afterwards: the check is the build, not its output."""
    env = {**env, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about its successor, on every build
    with tempfile.TemporaryDirectory(prefix="omega-docs-") as site:
        build = [str(PYTHON), "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", site]
        code = subprocess.run(build, cwd=ROOT, env=env, check=False).returncode
    if code:
        _say(f"docs failed: mkdocs build --strict (exit {code})")
    return code


COMMANDS = ("serve", "test", "lint", "docs")
USAGE = "\n\n".join((__doc__ or "").strip().split("\n\n")[:2])


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("test", [])
    # The command is checked before anything is installed: a typo or --help costs no minute of pip.
    if command in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    if command not in COMMANDS:
        _say(f"unknown command {command!r}; use serve, test, lint or docs")
        print(USAGE, file=sys.stderr)
        return 2
    try:
        ensure_venv()
    except subprocess.CalledProcessError as exc:
        _say(f"installation failed (exit {exc.returncode})")
        return 2
    env = _env()
    if command == "serve":
        _say("starting the omega-mcp hub on stdio with ./servers.toml (an MCP client speaks on stdin; Ctrl-C stops)")
        args = [str(BIN / "omega-mcp"), "serve", "--config", str(ROOT / "servers.toml"), *rest]
    elif command == "test":
        args = [str(PYTHON), "-m", "pytest", *_workers(rest), *_coverage(rest), *rest]
        env = _test_env(env)
    elif command == "docs":
        return docs(env)
    else:
        return lint(env)
    try:
        return subprocess.run(args, cwd=ROOT, env=env, check=False).returncode
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # `python3 dev.py --help | head`
        sys.exit(0)
