"""The fast suite's rule (`tests/whole_omega.py`): a test that starts a whole omega process must be e2e."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from whole_omega import omega_command

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ([sys.executable, "-m", "omega_mcp", "serve", "--http"], "omega-mcp serve"),
        ([sys.executable, "-P", "-m", "omega_mcp", "hub", "serve"], "omega-mcp hub"),
        (("/venv/bin/omega-mcp", "tools"), "omega-mcp tools"),
        ([b"/venv/bin/omega-mcp"], "omega-mcp"),
        ([Path("/venv/bin/omega-mcp"), "call", "bash"], "omega-mcp call"),
        ([sys.executable, "-c", "import omega_mcp"], None),  # a Toolbox in a subprocess: not a whole omega
        ([sys.executable, "-m", "mcp_server_time"], None),
        ([sys.executable, "/tests/omega_mcp"], None),
        ("omega-mcp serve", None),  # a shell string: not how the suite starts omega
    ],
)
def test_the_commands_that_start_a_whole_omega_are_recognised(argv: object, command: str | None) -> None:
    assert omega_command(argv) == command


SAMPLE = """
import subprocess, sys
import pytest

def test_starts_omega_unmarked():
    subprocess.run([sys.executable, "-m", "omega_mcp", "--version"], check=True, capture_output=True)

@pytest.mark.e2e
def test_starts_omega_marked():
    subprocess.run([sys.executable, "-m", "omega_mcp", "--version"], check=True, capture_output=True)

def test_starts_something_else():
    subprocess.run([sys.executable, "-c", "import omega_mcp"], check=True)
"""


def test_a_test_outside_e2e_that_starts_omega_fails_naming_the_command_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "whole_omega", "-p", "no:cacheprovider", "-o", "markers=e2e: slow",
         "-rA", "test_sample.py"],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TESTS)}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PASSED test_sample.py::test_starts_omega_marked" in done.stdout
    assert "PASSED test_sample.py::test_starts_something_else" in done.stdout
    assert "ERROR test_sample.py::test_starts_omega_unmarked" in done.stdout
    assert "started a whole omega process (omega-mcp --version)" in done.stdout
    assert "E2E_MODULES in tests/conftest.py, or mark it @pytest.mark.e2e" in done.stdout
    assert "3 passed, 1 error" in done.stdout  # its call passed; the rule fails it at teardown
