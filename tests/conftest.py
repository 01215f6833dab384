from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import whole_omega
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import FACTOR, scaled

E2E_MODULES = frozenset(
    {
        # End-to-end scenarios: real third-party parts (the conformance suite, HAProxy, npm and PyPI
        # servers, a built wheel) or whole CLI sessions. `dev.py test -m "not e2e"` leaves them out.
        "tests/conformance/test_client_conformance.py",
        "tests/conformance/test_server_conformance.py",
        "tests/deploy/test_replicas.py",
        "tests/deploy/test_recipes.py",
        "tests/test_install.py",
        "tests/proxy/test_confined_real_servers.py",
        "tests/agent/test_cli_e2e.py",
        "tests/agent/test_cli_stream_e2e.py",
        "tests/agent/test_interactive_pty.py",
        "tests/proxy/test_era_pairings.py",  # 180 cases over four omega processes and eight servers
        # Whole omega processes (a hub, `serve`, `attach` or a one-shot command per test) driven from outside:
        "tests/server/test_http.py",
        "tests/server/test_ops.py",
        "tests/server/test_profiles.py",
        "tests/security/test_hub_access.py",
        "tests/cli/test_login.py",
        "tests/cli/test_attach.py",
        "tests/cli/test_oneshot.py",
        "tests/cli/test_cli.py",
        "tests/cli/test_team_config.py",
        "tests/cli/test_root_warning.py",
        "tests/cli/test_proxy_cli.py",
        "tests/cli/test_search_cli.py",
        "tests/agent/test_cli_failures.py",
        "tests/proxy/test_pins.py",
        "tests/agent/test_cli_interrupts.py",  # `omega-mcp agent` per test: bounded retries, then SIGINT
        "tests/server/test_process.py",  # `serve` over stdio per test: signals, stdio that is no pipe
        "tests/server/test_first_contact.py",
        "tests/fastpath/test_relay.py",  # `serve` relaying to a stdio server, per test
        "tests/cli/test_config_problems_cli.py",
        # A hub for the whole module (a module-scoped fixture) that every test talks to:
        "tests/server/test_hidden_down.py",
        "tests/server/test_param_headers.py",
        "tests/server/test_profile_offers.py",
        "tests/server/test_session_dirs.py",
        "tests/security/test_client_trees.py",
        # Attacks on whole omega processes (the attacks on a Toolbox, as an unprivileged account, stay fast):
        "tests/security/test_trust.py",
        "tests/security/test_server_confinement.py",
        "tests/security/test_agent_terminal.py",
        "tests/security/test_hostile_lines.py",
        "tests/security/test_message_flood.py",
        "tests/security/test_root_namespace.py",
        "tests/security/test_unprivileged.py",
    }
)
ROOT = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the `e2e` marker and the rule that keeps it (`tests/whole_omega.py`), and scale
    pytest-timeout's bound by the suite's one time factor (`waits.FACTOR`), unless `--timeout` was given."""
    config.addinivalue_line("markers", "e2e: a slow end-to-end scenario (real third-party parts or whole CLI runs)")
    config.pluginmanager.register(whole_omega, "whole_omega")  # a test that starts omega must be e2e
    if config.getoption("timeout", None) is None:
        ini = config.getini("timeout")
        if ini:
            config.option.timeout = scaled(float(ini))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the end-to-end modules, and scale each explicit `timeout` marker like every other bound."""
    for item in items:
        if item.path.relative_to(ROOT).as_posix() in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)
        marker = item.get_closest_marker("timeout")
        if marker is not None and marker.args and FACTOR != 1:
            item.add_marker(pytest.mark.timeout(scaled(float(marker.args[0]))), append=False)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Say once, at the end, the coverage total (`dev.py test` measures it) and why tests were skipped for
    want of the specs beside the checkout."""
    total = _coverage_total(config)
    if total is not None:
        terminalreporter.write_line(
            f"coverage: {total:.1f}% of the statements of src/omega_mcp ran in these tests "
            "(no threshold; per file: .venv/bin/coverage report)"
        )
    skipped = [
        report for report in terminalreporter.stats.get("skipped", []) if "../shared/specs/" in str(report.longrepr)
    ]
    if skipped:
        terminalreporter.write_line(
            f"note: {len(skipped)} provider tests were skipped: they check omega's requests against the providers' "
            "official API specs, which live outside the repository in ../shared/specs/ beside this checkout "
            "(see CONTRIBUTING.md); everything else ran",
            yellow=True,
        )


def _coverage_total(config: pytest.Config) -> float | None:
    """The total of pytest-cov's combined data (every xdist worker's), or None when nothing was measured.

    dev.py asks pytest-cov for no report of its own (`--cov-report=`): a report analyses every source
    file again, which costs more than this one total; its `cov` object is the one its `cov` fixture gives.
    """
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    cov = getattr(controller, "cov", None)
    if cov is None or getattr(config, "workerinput", None) is not None:
        return None
    try:
        return float(cov.report(output_format="total", file=io.StringIO(), ignore_errors=True))
    except Exception:  # coverage's NoDataError (nothing measured) and any other reason not to report
        return None


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
