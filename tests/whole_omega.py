"""The fast suite's rule, kept by construction: a test that starts a whole omega process is `e2e`.

An `omega-mcp` command (`serve`, a hub, `agent`, `tools`, `call`, ...) costs about a second of CPU
before it does anything, so a test that starts one belongs to the end-to-end set that
`dev.py test -m "not e2e"` leaves out. This plugin (the suite's conftest registers it) installs an
audit hook: CPython raises `subprocess.Popen` for every process started through `subprocess`, which
`anyio.open_process` and the SDK's stdio client use too. Each omega command is noted against the test
whose setup, call or teardown runs at the time, and a test not marked `e2e` that started one fails
at its teardown, naming the command and how to mark it. A module-scoped fixture that starts omega
counts against the module's first test: mark the whole module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator

import pytest

__all__ = ["omega_command", "pytest_runtest_setup", "pytest_runtest_teardown"]

_current: str | None = None  # the node id of the test whose setup, call or teardown runs now
_started: dict[str, list[str]] = {}  # node id -> the omega commands it started


def omega_command(argv: object) -> str | None:
    """The omega command `argv` runs (`python -m omega_mcp serve ...`, the `omega-mcp` script), or None."""
    if not isinstance(argv, (list, tuple)):
        return None  # a shell string or a bare program: not how the suite starts omega
    words = [os.fsdecode(word) if isinstance(word, bytes) else str(word) for word in argv]
    for at, word in enumerate(words):
        if os.path.basename(word) == "omega-mcp" or (word == "omega_mcp" and at > 0 and words[at - 1] == "-m"):
            return " ".join(["omega-mcp", *words[at + 1 : at + 2]])
    return None


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event == "subprocess.Popen" and _current is not None:
        command = omega_command(args[1])
        if command is not None:
            _started.setdefault(_current, []).append(command)


sys.addaudithook(_hook)  # once per process (a module is imported once; audit hooks cannot be removed)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _current
    _current = item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    global _current
    done = yield
    _current = None
    started = sorted(set(_started.pop(item.nodeid, [])))
    if started and item.get_closest_marker("e2e") is None:
        pytest.fail(
            f"this test started a whole omega process ({'; '.join(started)}), so it is an end-to-end test: "
            "add its module to E2E_MODULES in tests/conftest.py, or mark it @pytest.mark.e2e",
            pytrace=False,
        )
    return done
