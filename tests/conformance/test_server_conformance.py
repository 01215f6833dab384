"""The official conformance suite's server scenarios, against the reference server directly and
through omega, in both protocol eras, over HTTP and stdio downstreams (SPEC "Transparency").

omega exports the reference server's tools and prompts as `ref__<name>` (`--names short`); the
renaming proxy (renamer.py) undoes exactly that, and its identity run (no prefix, in front of the
reference server itself) shows it changes nothing else. The runs are compared check by check: a
check that succeeds directly and does not through omega (fails, turns into a warning, or is not
made at all, which a passing scenario allows) fails the test, unless it is in `KNOWN_GAPS` (work
still open, listed honestly); a gap that is closed fails the test too, so the list only shrinks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conformance import suite

pytestmark = pytest.mark.timeout(600)

# Written out so that a suite upgrade cannot silently shrink what is measured.
SCENARIOS: dict[str, tuple[str, ...]] = {
    "2025-11-25": (
        "server-initialize", "server-session-lifecycle", "logging-set-level", "ping", "completion-complete",
        "tools-list", "tools-call-simple-text", "tools-call-image", "tools-call-audio",
        "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-with-logging", "tools-call-error",
        "tools-call-with-progress", "tools-call-sampling", "tools-call-elicitation", "json-schema-2020-12",
        "elicitation-sep1034-defaults", "server-sse-polling", "server-sse-multiple-streams",
        "elicitation-sep1330-enums", "resources-list", "resources-read-text", "resources-read-binary",
        "resources-templates-read", "resources-subscribe", "resources-unsubscribe", "prompts-list",
        "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
        "dns-rebinding-protection",
    ),
    "2026-07-28": (
        "server-stateless", "completion-complete", "tools-list", "tools-call-simple-text", "tools-call-image",
        "tools-call-audio", "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
        "tools-call-with-progress", "json-schema-2020-12", "server-sse-multiple-streams", "resources-list",
        "resources-read-text", "resources-read-binary", "resources-templates-read", "sep-2164-resource-not-found",
        "prompts-list", "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource",
        "prompts-get-with-image", "dns-rebinding-protection", "caching", "http-header-validation",
        "http-custom-header-server-validation", "input-required-result-basic-elicitation",
        "input-required-result-basic-sampling", "input-required-result-basic-list-roots",
        "input-required-result-request-state", "input-required-result-multiple-input-requests",
        "input-required-result-multi-round", "input-required-result-missing-input-response",
        "input-required-result-non-tool-request", "input-required-result-result-type",
        "input-required-result-unsupported-methods", "input-required-result-tampered-state",
        "input-required-result-capability-check", "input-required-result-ignore-extra-params",
        "input-required-result-validate-input",
    ),
}  # fmt: skip

# (era, downstream transport) -> (scenario, check) pairs that succeed directly and not through omega.
KNOWN_GAPS: dict[tuple[str, str], set[tuple[str, str]]] = {
    ("2025-11-25", "http"): set(),
    ("2025-11-25", "stdio"): set(),
    ("2026-07-28", "http"): set(),
    ("2026-07-28", "stdio"): set(),
}
# server-sse-polling (SEP-1699) has the reference's tool close its stream mid-call (a stdio server cannot:
# omega never learns of it); the hub closes a call's stream by itself once it runs this long unanswered
# (`[hub] sse_poll_seconds`), well before the tool's 200 ms are up, so the client resumes from omega's events.
POLL_SECONDS = 0.1
TOKEN = "conformance-test-token-0123456789"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    suite.install()
    port = suite.free_port()
    with suite.reference(port, tmp_path_factory.mktemp("reference") / "log"):
        yield f"http://localhost:{port}/mcp"


_direct: dict[str, dict[str, suite.Checks]] = {}


def direct(reference: str, era: str, out: Path) -> dict[str, suite.Checks]:
    if era not in _direct:
        _direct[era] = suite.run_server_suite(reference, era, out / f"direct-{era}", SCENARIOS[era])
    return _direct[era]


@pytest.mark.parametrize("era", sorted(SCENARIOS))
def test_the_reference_passes_every_scenario_and_the_renamer_changes_nothing(
    reference: str, era: str, tmp_path: Path
) -> None:
    checks = direct(reference, era, tmp_path)
    missing = set(SCENARIOS[era]) - set(checks)
    assert not missing, f"the suite no longer runs {sorted(missing)} at {era}"
    assert [s for s in SCENARIOS[era] if not suite.passed(checks[s])] == []
    port = suite.free_port()
    with suite.renamer(port, reference, tmp_path / "renamer.log"):
        url = f"http://localhost:{port}/mcp"
        through = suite.run_server_suite(url, era, tmp_path / "identity", SCENARIOS[era], baseline=checks)
    assert [s for s in SCENARIOS[era] if not suite.passed(through.get(s))] == []
    assert {s: suite.lost(checks[s], through.get(s)) for s in SCENARIOS[era]} == {s: [] for s in SCENARIOS[era]}


def _omega_config(home: Path, transport: str, reference: str) -> Path:
    config = home / "servers.toml"
    if transport == "http":
        entry = f'url = "{reference}"'
    else:
        entry = (
            f'command = "{suite.PYTHON}"\nargs = ["{suite.HERE / "reference_server.py"}", "--stdio"]\nsandbox = "none"'
        )
    config.write_text(f"[hub]\nsse_poll_seconds = {POLL_SECONDS}\n\n[servers.ref]\n{entry}\n")
    return config


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("era", sorted(SCENARIOS))
def test_every_scenario_passes_through_omega_as_it_does_directly(
    reference: str, era: str, transport: str, tmp_path: Path
) -> None:
    reference_checks = direct(reference, era, tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    config = _omega_config(home, transport, reference)
    omega_port, renamer_port = suite.free_port(), suite.free_port()
    env = {**suite.node_env(), "OMEGA_HOME": str(home), "OMEGA_TOKEN": TOKEN}
    args = [suite.PYTHON, "-m", "omega_mcp", "serve", "--http", "--port", str(omega_port), "--names", "short"]
    args += ["--config", str(config), "--workspace", str(tmp_path / "ws")]
    with (
        suite.process(args, omega_port, tmp_path / "omega.log", env=env),
        suite.renamer(
            renamer_port, f"http://127.0.0.1:{omega_port}/mcp", tmp_path / "renamer.log", prefix="ref__", token=TOKEN
        ),
    ):
        suite.wait_connected(tmp_path / "omega.log", "ref")
        url = f"http://localhost:{renamer_port}/mcp"
        checks = suite.run_server_suite(url, era, tmp_path / "omega", SCENARIOS[era], baseline=reference_checks)
    gaps = KNOWN_GAPS[(era, transport)]
    losses = {(s, c) for s in SCENARIOS[era] for c in suite.lost(reference_checks.get(s), checks.get(s))}
    unexpected = sorted(losses - gaps)
    details = [line for s, c in unexpected for line in suite.failures(tmp_path / "omega", s, [c])]
    assert unexpected == [], "\n".join(dict.fromkeys(details))
    healed = sorted(gaps - losses)
    assert healed == [], f"now the same through omega: remove {healed} from KNOWN_GAPS"
