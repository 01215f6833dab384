"""The official conformance suite's client scenarios: omega's downstream client, in both eras.

Each scenario's test server is given to the reference client directly (reference_client.py, the
SDK client driving each scenario as the python-sdk's own conformance client does), and to an omega
hub as its one downstream, driven by the same reference client through a shim that undoes omega's
`mcp__ref__` names (omega_client.py; its identity is checked below). The runs are compared check
by check: a check that succeeds directly and does not through omega (fails, becomes a warning, or
is not made at all, which a passing scenario allows) fails the test, unless it is in `KNOWN_GAPS`,
which may only shrink; the scenario lists are written out, so a suite upgrade cannot silently shrink them. Each
of the four runs (two eras, direct and through omega) is one suite invocation running all of its
scenarios at once, each a copy forked from one warm process (warm.py): importing the SDK anew for
every scenario would be most of the time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp import types
from mcp.server.lowlevel import Server
from tests.conformance import suite

pytestmark = pytest.mark.timeout(900)

_AUTH = (
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
)
SCENARIOS: dict[str, tuple[str, ...]] = {
    "2025-11-25": (
        "initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry",
        "json-schema-2020-12-preservation", *_AUTH,
    ),
    "2026-07-28": (
        "tools_call", "request-metadata", "sep-2322-client-request-state", "http-standard-headers",
        "http-custom-headers", "http-invalid-tool-headers", "json-schema-ref-no-deref",
        "json-schema-2020-12-preservation", *_AUTH, "auth/resource-mismatch", "auth/offline-access-scope",
        "auth/offline-access-not-supported", "auth/authorization-server-migration", "auth/iss-supported",
        "auth/iss-not-advertised", "auth/iss-supported-missing", "auth/iss-wrong-issuer", "auth/iss-unexpected",
        "auth/iss-normalized", "auth/metadata-issuer-mismatch",
    ),
}  # fmt: skip
KNOWN_GAPS: dict[str, set[tuple[str, str]]] = {"2025-11-25": set(), "2026-07-28": set()}
"""era -> (scenario, check) pairs that succeed directly and not through omega: none."""
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, suite.Checks]]]:
    suite.install()
    out = tmp_path_factory.mktemp("client-conformance")
    socket_path = Path(tempfile.mkdtemp(prefix="omega-warm-")) / "warm.sock"
    warm = subprocess.Popen(
        [sys.executable, str(HERE / "warm.py"), str(socket_path)], stdout=subprocess.PIPE, cwd=HERE.parents[1]
    )
    try:
        assert warm.stdout is not None and warm.stdout.readline() == b"ready\n"
        command = [sys.executable, "-S", "-I", str(HERE / "warm_client.py"), str(socket_path)]
        checks: dict[str, dict[str, suite.Checks]] = {}
        for who, driver in (("direct", "reference"), ("omega", "omega")):
            for era, scenarios in SCENARIOS.items():
                checks[f"{who}-{era}"] = suite.run_client_suite(
                    [*command, driver], era, out / f"{who}-{era}", scenarios, baseline=checks.get(f"direct-{era}")
                )
        checks["out"] = {str(out): {}}  # where the checks are, for the failure messages
        yield checks
    finally:
        warm.kill()
        warm.wait()
        if warm.stdout is not None:
            warm.stdout.close()
        shutil.rmtree(socket_path.parent, ignore_errors=True)


@pytest.mark.parametrize("era", sorted(SCENARIOS))
def test_the_reference_client_passes_every_client_scenario(runs: dict[str, dict[str, suite.Checks]], era: str):
    checks = runs[f"direct-{era}"]
    missing = set(SCENARIOS[era]) - set(checks)
    assert not missing, f"the suite no longer runs {sorted(missing)} at {era}"
    assert [s for s in SCENARIOS[era] if not suite.passed(checks[s])] == []


@pytest.mark.parametrize("era", sorted(SCENARIOS))
def test_every_client_scenario_passes_with_omega_as_the_client(runs: dict[str, dict[str, suite.Checks]], era: str):
    direct, through = runs[f"direct-{era}"], runs[f"omega-{era}"]
    losses = {(s, c) for s in SCENARIOS[era] for c in suite.lost(direct.get(s), through.get(s))}
    unexpected = sorted(losses - KNOWN_GAPS[era])
    out = Path(next(iter(runs["out"]))) / f"omega-{era}"
    details = [line for s, c in unexpected for line in suite.failures(out, s.split("/")[-1], [c])]
    assert unexpected == [], "\n".join(dict.fromkeys(details))
    healed = sorted(KNOWN_GAPS[era] - losses)
    assert healed == [], f"now the same through omega: remove {healed} from KNOWN_GAPS"


async def test_the_renaming_shim_changes_nothing_but_the_names():
    """The identity control of the client direction: behind the shim, a server named `mcp__ref__x`
    looks exactly like one named `x` (listing, calls, everything else passed through)."""
    sys.path.insert(0, str(HERE))
    import omega_client

    def server(prefix: str) -> Server[Any]:
        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(name=f"{prefix}add", input_schema={"type": "object"})])

        async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(text=f"{params.name} {params.arguments}")])

        return Server("s", on_list_tools=list_tools, on_call_tool=call)

    async with (
        mcp.Client(server(""), mode="legacy") as plain,
        mcp.Client(server(omega_client.PREFIX), mode="legacy") as raw,
    ):
        renamed = omega_client.Renamed(raw)
        assert (await renamed.list_tools()).tools == (await plain.list_tools()).tools
        called = await renamed.call_tool("add", {"a": 1})
        assert called.content == [types.TextContent(text=f"{omega_client.PREFIX}add {{'a': 1}}")]
        assert renamed.session is raw.session  # anything else is the client's own
