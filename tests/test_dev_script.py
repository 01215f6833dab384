"""`dev.py` reads its command before it installs anything: help and typos cost no pip run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEV = Path(__file__).parents[1] / "dev.py"


@pytest.mark.parametrize(("argv", "code"), [(["--help"], 0), (["-h"], 0), (["bogus"], 2), (["--verbose"], 2)])
def test_dev_py_answers_help_and_unknown_commands_without_installing(tmp_path: Path, argv: list[str], code: int):
    shutil.copy(DEV, tmp_path / "dev.py")  # a checkout without .venv (and without a pyproject to install)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "dev.py"), *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == code, done.stderr
    usage = done.stdout if code == 0 else done.stderr
    assert "python3 dev.py test  [pytest args]" in usage and "Traceback" not in done.stderr
    assert not (tmp_path / ".venv").exists()
