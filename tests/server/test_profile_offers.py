"""A profile covers everything a server offers, through a real hub over HTTP.

Two downstreams, alpha and beta (tests/fixtures/offers_server.py: a tool, a prompt, a resource whose
text is a secret, a resource template, completions). Client `alice` may use only alpha's tools, and
only `read` of the built-ins; `carol` may use beta's tools but sees only prompts and resources her
globs allow; `dave` may use both (the control: a client allowed a server gets all it offers). A
hidden prompt or resource is, to a client, an unknown one: the very same error.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import MCPError, types

from hub_support import Hub, configured_hub, hub_client

OFFERS = Path(__file__).parent.parent / "fixtures" / "offers_server.py"
ALICE = "alice-token-0123456789abcdef"
CAROL = "carol-token-0123456789abcdef"
DAVE = "dave-token-0123456789abcdef01"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    servers = "".join(
        f"[servers.{name}]\ncommand = {sys.executable!r}\nargs = [{str(OFFERS)!r}, {name!r}]\n"
        for name in ("alpha", "beta")
    )
    env = {"ALICE_TOKEN": ALICE, "CAROL_TOKEN": CAROL, "DAVE_TOKEN": DAVE}
    with configured_hub(
        tmp_path_factory.mktemp("offers"),
        (
            servers
            + '[hub.clients.alice]\ntoken = "${ALICE_TOKEN}"\ntools = ["read", "mcp__alpha__*"]\n'
            + '[hub.clients.carol]\ntoken = "${CAROL_TOKEN}"\ntools = ["mcp__beta__*"]\n'
            + 'prompts = ["nothing__*"]\nresources = ["res://beta/item/*"]\n'
            + '[hub.clients.dave]\ntoken = "${DAVE_TOKEN}"\n'
        ),
        env=env,
    ) as hub:
        yield hub


async def _offers(hub: Hub, token: str) -> tuple[set[str], set[str], set[str]]:
    async with hub_client(hub.url, token) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        resources = {r.uri for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        return prompts, resources, templates


async def _error(call: object) -> str:
    with pytest.raises(MCPError) as raised:
        await call  # type: ignore[misc]
    return f"{raised.value.error.code} {raised.value.error.message}"


async def test_a_client_sees_only_what_the_servers_it_may_use_offer(hub: Hub) -> None:
    prompts, resources, templates = await _offers(hub, ALICE)
    assert prompts == {"alpha__brief"}
    assert resources == {"res://alpha/secret"}
    assert templates == {"res://alpha/item/{id}"}
    # The control: a client allowed both servers gets everything of both.
    prompts, resources, templates = await _offers(hub, DAVE)
    assert prompts == {"alpha__brief", "beta__brief"}
    assert resources == {"res://alpha/secret", "res://beta/secret"}
    assert templates == {"res://alpha/item/{id}", "res://beta/item/{id}"}


async def test_a_hidden_prompt_or_resource_errors_exactly_like_an_unknown_one(hub: Hub) -> None:
    async with hub_client(hub.url, ALICE) as alice:
        hidden = await _error(alice.get_prompt("beta__brief"))
        unknown = await _error(alice.get_prompt("nosuch__brief"))
        assert hidden == unknown.replace("nosuch__brief", "beta__brief")
        secret = await _error(alice.read_resource("res://beta/secret"))
        nothing = await _error(alice.read_resource("res://nosuch/secret"))
        assert secret == nothing.replace("nosuch", "beta") and "DB_PASSWORD" not in secret
        templated = await _error(alice.read_resource("res://beta/item/7"))
        assert templated == (await _error(alice.read_resource("res://nosuch/item/7"))).replace("nosuch", "beta")
        completion = await _error(
            alice.complete(types.PromptReference(name="beta__brief"), {"name": "topic", "value": "a"})
        )
        assert "Unknown prompt" in completion
        template_ref = types.ResourceTemplateReference(uri="res://beta/item/{id}")
        assert "Unknown resource" in await _error(alice.complete(template_ref, {"name": "id", "value": "1"}))
        with warnings.catch_warnings():  # resources/subscribe is handshake-era only: what this client speaks
            warnings.simplefilter("ignore")
            assert "Unknown resource" in await _error(alice.subscribe_resource("res://beta/secret"))
        # Her own server's work as before.
        own = await alice.read_resource("res://alpha/secret")
        assert "DB_PASSWORD of alpha" in own.contents[0].text  # type: ignore[union-attr]
        got = await alice.get_prompt("alpha__brief", {"topic": "t"})
        assert "alpha brief on t" in got.messages[0].content.text  # type: ignore[union-attr]
        done = await alice.complete(types.PromptReference(name="alpha__brief"), {"name": "topic", "value": "a"})
        assert done.completion.values == ["alpha-a"]


async def test_prompt_and_resource_globs_narrow_further(hub: Hub) -> None:
    prompts, resources, templates = await _offers(hub, CAROL)
    assert prompts == set()
    assert resources == set()  # res://beta/secret is not in her globs
    assert templates == {"res://beta/item/{id}"}  # a glob matches a template as written, too
    async with hub_client(hub.url, CAROL) as carol:
        assert "Unknown prompt" in await _error(carol.get_prompt("beta__brief"))
        assert "Unknown resource" in await _error(carol.read_resource("res://beta/secret"))
        item = await carol.read_resource("res://beta/item/3")
        assert item.contents[0].text == "beta item 3"  # type: ignore[union-attr]
        assert "Unknown resource" in await _error(carol.read_resource("res://alpha/item/3"))


def test_bad_prompt_and_resource_globs_are_config_errors(tmp_path: Path) -> None:
    from omega_mcp.config import load_config
    from omega_mcp.errors import ConfigError

    config = tmp_path / "omega.toml"
    for bad in ('prompts = "x"', "resources = [1]", 'prompts = [""]'):
        config.write_text(f'[hub.clients.eve]\ntoken = "${{EVE}}"\n{bad}\n')
        with pytest.raises(ConfigError) as refused:
            load_config(config, environ={"EVE": "eve-token-0123456789abcdef", "OMEGA_HOME": str(tmp_path)})
        key = bad.split()[0]
        assert f"hub.clients.eve.{key}" in str(refused.value), str(refused.value)
