"""`omega-mcp login`/`logout` and every other command print no SDK traceback for an SSE event handed to a
stream omega already closed (issue 34: `login` printed `Error parsing SSE message ... BrokenResourceError`);
a real parse failure is still logged."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator

import anyio
import pytest


@pytest.fixture
def configured(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        # The module, not the package's `main` function of the same name.
        importlib.import_module("omega_mcp.cli.main")._setup_logging("warning")
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def _log_failure(exc: Exception) -> None:
    try:
        raise exc
    except Exception:
        logging.getLogger("mcp.client.streamable_http").exception("Error parsing SSE message")


def test_an_event_for_a_closed_stream_prints_no_traceback(configured: None, capsys: pytest.CaptureFixture[str]):
    _log_failure(anyio.BrokenResourceError())
    _log_failure(anyio.ClosedResourceError())
    assert capsys.readouterr().err == ""


def test_a_real_parse_failure_is_still_logged(configured: None, capsys: pytest.CaptureFixture[str]):
    _log_failure(ValueError("bad json"))
    err = capsys.readouterr().err
    assert "Error parsing SSE message" in err and "bad json" in err
