"""Fixtures of the agent tests."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers sit next to the tests (importlib mode)

from agent_cli_support import Fake, Reply, start_fake, stop_fakes


@pytest.fixture
def fake_provider() -> Iterator[Callable[[str, list[Reply]], Fake]]:
    """`fake_provider(provider, replies)` starts a scripted provider on 127.0.0.1 for this test."""
    servers: list[Any] = []
    yield lambda provider, replies: start_fake(servers, provider, replies)
    stop_fakes(servers)
