"""`dev.py` reads its command before it installs anything: help and typos cost no pip run."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

DEV = Path(__file__).parents[1] / "dev.py"


def _dev_module() -> ModuleType:
    """dev.py as a module (importing it runs nothing: its work is in main())."""
    spec = importlib.util.spec_from_file_location("dev_script", DEV)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorder(ran: list[list[str]], code: int) -> Callable[..., subprocess.CompletedProcess[str]]:
    """A stand-in for subprocess.run that records each command and answers with `code`."""

    def run(args: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        ran.append(args)
        return subprocess.CompletedProcess(args, code)

    return run


@pytest.mark.parametrize(("argv", "code"), [(["--help"], 0), (["-h"], 0), (["bogus"], 2), (["--verbose"], 2)])
def test_dev_py_answers_help_and_unknown_commands_without_installing(tmp_path: Path, argv: list[str], code: int):
    shutil.copy(DEV, tmp_path / "dev.py")  # a checkout without .venv (and without a pyproject to install)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "dev.py"), *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == code, done.stderr
    usage = done.stdout if code == 0 else done.stderr
    assert "python3 dev.py test  [pytest args]" in usage and "Traceback" not in done.stderr
    assert "python3 dev.py docs" in usage  # the docs build is one of the commands, listed with the others
    assert not (tmp_path / ".venv").exists()


def test_an_unknown_command_names_every_command(tmp_path: Path):
    shutil.copy(DEV, tmp_path / "dev.py")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "dev.py"), "doc"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "use serve, test, lint or docs" in done.stderr


def test_the_tests_measure_coverage_unless_the_arguments_choose():
    dev = _dev_module()
    assert dev._coverage([]) == ["--cov=omega_mcp", "--cov-report="]
    assert dev._coverage(["-p", "no:cacheprovider", "-m", "not e2e"]) == ["--cov=omega_mcp", "--cov-report="]
    for chosen in (["--no-cov"], ["--cov=omega_mcp.sandbox"], ["--cov-report=term-missing"], ["-p", "no:pytest_cov"]):
        assert dev._coverage(chosen) == [], chosen


def test_pytest_arguments_pass_through_after_the_ones_dev_py_adds(monkeypatch: pytest.MonkeyPatch):
    """`dev.py test -p no:cacheprovider -x FILE` reaches pytest as written, after the workers and coverage."""
    dev = _dev_module()
    ran: list[list[str]] = []
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev.subprocess, "run", _recorder(ran, 0))
    monkeypatch.delenv("OMEGA_TEST_WORKERS", raising=False)
    rest = ["-p", "no:cacheprovider", "-x", "tests/test_dev_script.py"]
    assert dev.main(["test", *rest]) == 0
    (argv,) = ran
    assert argv[1:3] == ["-m", "pytest"]
    assert argv[3:] == ["-n", "4", "--dist", "loadfile", "--cov=omega_mcp", "--cov-report=", *rest]
    ran.clear()
    assert dev.main(["test", "-n", "0", "--no-cov"]) == 0
    assert ran[0][3:] == ["-n", "0", "--no-cov"]


def test_the_tests_write_bytecode_caches_even_where_the_environment_says_not_to(monkeypatch: pytest.MonkeyPatch):
    """pytest caches its assert-rewritten test modules as bytecode: without the cache each worker rewrites
    every test module again at every run. Only the test command drops the setting."""
    dev = _dev_module()
    envs: list[dict[str, str]] = []

    def run(args: list[str], env: dict[str, str], **_: object) -> subprocess.CompletedProcess[str]:
        envs.append(env)
        return subprocess.CompletedProcess(args, 0)

    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev.subprocess, "run", run)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert dev.main(["test", "-n", "0", "tests/test_names.py"]) == 0
    assert "PYTHONDONTWRITEBYTECODE" not in envs[0]
    assert dev.main(["serve"]) == 0
    assert envs[1]["PYTHONDONTWRITEBYTECODE"] == "1"


def test_dev_py_docs_builds_the_site_strictly_into_a_directory_it_removes(monkeypatch: pytest.MonkeyPatch):
    dev = _dev_module()
    ran: list[list[str]] = []
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev.subprocess, "run", _recorder(ran, 1))
    assert dev.main(["docs"]) == 1  # mkdocs' failure is dev.py's (and so CI's)
    (argv,) = ran
    assert argv[1:5] == ["-m", "mkdocs", "build", "--strict"]
    site = Path(argv[argv.index("--site-dir") + 1])
    assert not site.exists()
