"""Per-client limits of the HTTP hub: `[hub] max_sessions_per_client` and 8 background shells per client.

One token opened any number of sessions, each with its 8 shells. Now a `[hub.clients]` token holds at
most `max_sessions_per_client` sessions (2 here) and 8 background shells over all of them; a refusal
says which limit and how to raise it. Another client is not affected.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from hub_support import Hub, configured_hub, hub_client

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef0123"


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with configured_hub(
        tmp_path_factory.mktemp("limits"),
        (
            "[sandbox]\nshell_lifetime = 60\n[hub]\nmax_sessions_per_client = 2\n"
            '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\n[hub.clients.bob]\ntoken = "${BOB_TOKEN}"\n'
        ),
        env={"ALICE_TOKEN": ALICE, "BOB_TOKEN": BOB},
    ) as hub:
        yield hub


def _text(result: object) -> str:
    return result.content[0].text  # type: ignore[attr-defined]


@pytest.mark.e2e
async def test_a_client_holds_at_most_max_sessions_per_client(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE), hub_client(hub.url, ALICE):
        with pytest.raises(Exception) as refused:
            async with hub_client(hub.url, ALICE):
                pass
        text = repr(refused.value) + "".join(repr(e) for e in getattr(refused.value, "exceptions", ()))
        assert "max_sessions_per_client" in text, text
        async with hub_client(hub.url, BOB) as bob:  # another client is not affected
            assert not (await bob.call_tool("bash", {"command": "true"})).is_error
    async with hub_client(hub.url, ALICE) as again:  # the ended sessions no longer count
        assert not (await again.call_tool("bash", {"command": "true"})).is_error


@pytest.mark.e2e
async def test_a_client_runs_at_most_8_background_shells_over_all_its_sessions(hub: Hub) -> None:
    background = {"command": "sleep 1000", "run_in_background": True}
    async with hub_client(hub.url, ALICE) as first, hub_client(hub.url, ALICE) as second:
        for _ in range(5):
            assert not (started := await first.call_tool("bash", background)).is_error, _text(started)
        for _ in range(3):
            assert not (started := await second.call_tool("bash", background)).is_error, _text(started)
        refused = await second.call_tool("bash", background)
        assert refused.is_error and "8 per client" in _text(refused), _text(refused)
        async with hub_client(hub.url, BOB) as bob:
            assert not (await bob.call_tool("bash", background)).is_error
        async with hub_client(hub.url, hub.token) as own:  # the hub's own token has its per-session cap only
            assert not (await own.call_tool("bash", background)).is_error


def test_a_bad_max_sessions_per_client_is_a_config_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from omega_mcp.config import load_config
    from omega_mcp.errors import ConfigError

    config = tmp_path / "omega.toml"
    for bad in ("0", '"many"', "-3"):
        config.write_text(f"[hub]\nmax_sessions_per_client = {bad}\n")
        with pytest.raises(ConfigError) as refused:
            load_config(config, environ={"OMEGA_HOME": str(tmp_path)})
        assert "hub.max_sessions_per_client" in str(refused.value)
