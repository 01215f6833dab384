from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from omega_mcp.sandbox.policy import SandboxPolicy


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once, at the end, why tests were skipped for want of the specs beside the checkout."""
    skipped = [
        report for report in terminalreporter.stats.get("skipped", []) if "../shared/specs/" in str(report.longrepr)
    ]
    if skipped:
        terminalreporter.write_line(
            f"note: {len(skipped)} provider tests were skipped: they check omega's requests against the providers' "
            "official API specs, which live outside the repository in ../shared/specs/ beside this checkout "
            "(see README, Development); everything else ran",
            yellow=True,
        )


@pytest.fixture
def policy(tmp_path: Path) -> SandboxPolicy:
    """A sandbox-mode policy confined to tmp_path (home, workspace and tmp dir all inside it)."""
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    tmp_dir = tmp_path / "tmp"
    for d in (home, workspace, tmp_dir):
        d.mkdir()
    return SandboxPolicy(mode="sandbox", home=home, workspace=workspace, tmp_dir=tmp_dir)


@pytest.fixture
def rwx_policy(policy: SandboxPolicy) -> SandboxPolicy:
    from dataclasses import replace

    return replace(policy, mode="rwx")


@pytest.fixture
async def toolbox(rwx_policy: SandboxPolicy) -> AsyncIterator[object]:
    from omega_mcp.toolbox import Toolbox

    async with Toolbox(rwx_policy) as box:
        yield box
