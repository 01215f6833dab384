"""MCP Apps through the aggregator (SPEC "MCP Apps through the aggregator"): servers that use the same
`ui://` URIs each keep their own UI in the namespace, in both client eras and over in-process, stdio
and streamable HTTP downstreams; app-only tools stay listed with their `_meta` but are never found
by `search_tools` nor run through `call_tool`."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters

from cli_support import cli_env, rwx_config
from omega_mcp.proxy.supervisor import Downstreams, DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.server.server import build_server
from omega_mcp.server.tool_search import SessionTools
from omega_mcp.toolbox import Toolbox
from proxy_support import FIXTURES, client, downstream_spec, http_fixture, hub, listed

_spec = importlib.util.spec_from_file_location("app_server_fixture", FIXTURES / "app_server.py")
assert _spec is not None and _spec.loader is not None
_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixture)
UI: str = _fixture.UI
app_server = _fixture.app_server

APP_SERVER = FIXTURES / "app_server.py"
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])


def _html(result: types.ReadResourceResult) -> str:
    block = result.contents[0]
    assert isinstance(block, types.TextResourceContents)
    return block.text


def _in_process(name: str) -> DownstreamSpec:
    return downstream_spec(name, app_server(name)._lowlevel_server)  # pyright: ignore[reportPrivateUsage]


async def _each_tool_opens_its_own_ui(
    omega: Any, mode: str, names: list[str], *, templates: bool = True, prompts: bool = True
) -> None:
    async with client(omega, mode) as c:
        if prompts:
            await _each_prompt_names_its_own_ui(c, names)
        tools = {t.name: t for t in (await c.list_tools()).tools}
        uris = set[str]()
        for name in names:
            show = tools[f"mcp__{name}__show"]
            assert show.meta is not None
            uri = show.meta["ui"]["resourceUri"]
            assert uri.startswith("ui://") and uri != UI
            assert show.meta["ui/resourceUri"] == uri  # the flat form names the same per-server URI
            uris.add(uri)
            read = await c.read_resource(uri)
            assert _html(read) == f"<html><body>widget of {name}</body></html>"
            assert read.contents[0].uri == uri
            refresh = tools[f"mcp__{name}__refresh"]  # app-only: still listed, with its `_meta`
            assert refresh.meta is not None and refresh.meta["ui"]["visibility"] == ["app"]
            assert refresh.meta["ui"]["resourceUri"] == uri
        assert len(uris) == len(names)
        listed = {str(r.uri) for r in (await c.list_resources()).resources}
        assert uris <= listed and UI not in listed
        if not templates:
            return
        listed_templates = [t.uri_template for t in (await c.list_resource_templates()).resource_templates]
        assert len(set(listed_templates)) == len(names) and all(t.startswith("ui://") for t in listed_templates)
        for name in names:
            template = next(t for t in listed_templates if t.startswith(f"ui://{name}/"))
            page = await c.read_resource(template.replace("{page}", "two"))
            assert _html(page) == f"<html><body>page two of {name}</body></html>"


async def _each_prompt_names_its_own_ui(c: Any, names: list[str]) -> None:
    """Each server's `open_widget` prompt names its own UI (the URI its tools list) in its resource link, the
    link's `_meta` and its embedded resource; a `file://` link and the text stay the server's own."""
    tools = {t.name: t for t in (await c.list_tools()).tools}
    for name in names:
        show = tools[f"mcp__{name}__show"]
        assert show.meta is not None
        uri = show.meta["ui"]["resourceUri"]
        prompt = await c.get_prompt(f"{name}__open_widget")
        link, embedded, other, text = (m.content for m in prompt.messages)
        assert isinstance(link, types.ResourceLink) and link.uri == uri
        assert link.meta == {"ui": {"resourceUri": uri}}
        assert isinstance(embedded, types.EmbeddedResource) and embedded.resource.uri == uri
        assert isinstance(other, types.ResourceLink) and other.uri == "file:///notes.txt"
        assert isinstance(text, types.TextContent) and text.text == f"see {UI}"  # the server's words
        assert _html(await c.read_resource(link.uri)) == f"<html><body>widget of {name}</body></html>"


async def _structured_content_stays_the_servers(c: Any, names: list[str]) -> None:
    """`structuredContent` is the server's data as it sent it: its `outputSchema` (which pins the field to
    the server's own form) still holds, the client's check passes, and only `_meta` names the per-server UI."""
    tools = {t.name: t for t in (await c.list_tools()).tools}
    for name in names:
        status = tools[f"mcp__{name}__status"]
        assert status.output_schema is not None and status.meta is not None
        result = await c.call_tool(f"mcp__{name}__status", {})
        assert not result.is_error, result
        assert result.structured_content == {"view": UI, "ready": True}
        assert status.meta["ui"]["resourceUri"] == f"ui://{name}/widget/index.html"


async def _each_result_names_its_own_ui(c: Any, names: list[str]) -> None:
    """Each server's `open` result names its own UI: the URI its tools list, which reads its own HTML."""
    tools = {t.name: t for t in (await c.list_tools()).tools}
    for name in names:
        show = tools[f"mcp__{name}__show"]
        assert show.meta is not None
        uri = show.meta["ui"]["resourceUri"]
        result = await c.call_tool(f"mcp__{name}__open", {})
        assert not result.is_error, result
        link, embedded, other = result.content
        assert isinstance(link, types.ResourceLink) and link.uri == uri
        assert link.meta == {"ui": {"resourceUri": uri}}
        assert isinstance(embedded, types.EmbeddedResource) and embedded.resource.uri == uri
        assert isinstance(other, types.ResourceLink) and other.uri == "file:///notes.txt"  # no app's: the server's own
        assert result.meta is not None
        assert (result.meta["ui"]["resourceUri"], result.meta["ui/resourceUri"]) == (uri, uri)
        assert _html(await c.read_resource(link.uri)) == f"<html><body>widget of {name}</body></html>"
    await _each_prompt_names_its_own_ui(c, names)
    await _structured_content_stays_the_servers(c, names)


@MODES
async def test_two_servers_tool_results_name_each_its_own_ui(rwx_policy: SandboxPolicy, mode: str):
    async with hub(rwx_policy, _in_process("alpha"), _in_process("beta")) as (downstreams, _, omega):
        await downstreams.wait_ready()
        async with client(omega, mode) as c:
            await _each_result_names_its_own_ui(c, ["alpha", "beta"])


@MODES
@pytest.mark.e2e
async def test_through_serve_over_stdio_tool_results_name_each_its_own_ui(tmp_path: Path, mode: str):
    """`serve` over stdio relays calls to stdio servers as plain JSON (fastpath/relay.py): the same rewriting."""
    tables = "".join(
        f'\n[servers.{name}]\ncommand = "{sys.executable}"\nargs = ["{APP_SERVER}", "{name}"]\n'
        for name in ("alpha", "beta")
    )
    config = rwx_config(tmp_path, tables)
    command = ["-m", "omega_mcp", "serve", "--config", str(config)]
    params = StdioServerParameters(command=sys.executable, args=command, env=cli_env(tmp_path), cwd=tmp_path)
    async with mcp.Client(params, mode=mode) as c:
        await listed(c, "mcp__alpha__open", "mcp__beta__open")
        await _each_result_names_its_own_ui(c, ["alpha", "beta"])


@MODES
async def test_two_servers_with_the_same_ui_uri_each_open_their_own_ui(rwx_policy: SandboxPolicy, mode: str):
    async with hub(rwx_policy, _in_process("alpha"), _in_process("beta")) as (downstreams, _, omega):
        await downstreams.wait_ready()
        await _each_tool_opens_its_own_ui(omega, mode, ["alpha", "beta"])


async def test_ten_servers_with_the_same_ui_uri_each_open_their_own_ui(rwx_policy: SandboxPolicy):
    names = [f"s{i}" for i in range(10)]
    async with hub(rwx_policy, *(_in_process(n) for n in names)) as (downstreams, _, omega):
        await downstreams.wait_ready()
        for mode in ("legacy", "auto"):
            await _each_tool_opens_its_own_ui(omega, mode, names)


async def test_stdio_and_http_servers_with_the_same_ui_uri_each_open_their_own_ui(rwx_policy: SandboxPolicy):
    stdio = StdioServerParameters(command=sys.executable, args=[str(APP_SERVER), "local"])
    async with http_fixture(str(APP_SERVER), "remote") as url:
        specs = (DownstreamSpec("local", stdio), DownstreamSpec("remote", url))
        async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, _, omega):
            await downstreams.wait_ready()
            for mode in ("legacy", "auto"):
                await _each_tool_opens_its_own_ui(omega, mode, ["local", "remote"])


async def test_handshake_era_downstreams_keep_their_own_ui_too(rwx_policy: SandboxPolicy):
    specs = [downstream_spec(n, app_server(n)._lowlevel_server, era="handshake") for n in ("alpha", "beta")]  # pyright: ignore[reportPrivateUsage]
    async with hub(rwx_policy, *specs) as (downstreams, _, omega):
        await downstreams.wait_ready()
        for mode in ("legacy", "auto"):
            await _each_tool_opens_its_own_ui(omega, mode, ["alpha", "beta"])


async def test_app_only_tools_are_never_found_by_search_nor_run_through_call_tool(rwx_policy: SandboxPolicy):
    specs = [_in_process("alpha"), _in_process("beta")]
    async with Downstreams(specs, backoff_seconds=0.05) as downstreams, Toolbox(rwx_policy, downstreams) as toolbox:
        omega = build_server(toolbox, catalog=downstreams, tool_search=SessionTools(toolbox, mode="on"))
        await downstreams.wait_ready()
        async with client(omega) as c:
            found = await c.call_tool("search_tools", {"query": "refresh widget data", "limit": 20})
            selected = await c.call_tool("search_tools", {"query": "select:mcp__alpha__refresh,mcp__alpha__show"})
            refused = await c.call_tool("call_tool", {"name": "mcp__alpha__refresh", "arguments": {}})
            shown = await c.call_tool("call_tool", {"name": "mcp__alpha__show", "arguments": {}})
            direct = await c.call_tool("mcp__alpha__refresh", {})  # the host calls it for the app, by name
    assert found.structured_content is not None and selected.structured_content is not None
    assert not any(t["name"].endswith("__refresh") for t in found.structured_content["tools"])
    assert [t["name"] for t in selected.structured_content["tools"]] == ["mcp__alpha__show"]
    assert refused.is_error and "app's interface only" in refused.content[0].text  # type: ignore[union-attr]
    assert not shown.is_error and shown.content[0].text == "shown by alpha"  # type: ignore[union-attr]
    assert not direct.is_error and direct.content[0].text == "refreshed by alpha"  # type: ignore[union-attr]


async def test_a_uri_of_another_scheme_is_the_servers_own(rwx_policy: SandboxPolicy, tmp_path: Path):
    from omega_mcp.proxy import apps

    assert apps.client_uri("s", "file:///x") == "file:///x"
    assert apps.client_uri("s", UI) == "ui://s/widget/index.html"
    assert apps.server_uri("s", "ui://s/widget/index.html") == UI
    assert apps.server_uri("t", "ui://s/widget/index.html") == "ui://s/widget/index.html"
    assert apps.owner_named("ui://S/widget/index.html", ["s"]) == "s"  # a host may lower or raise the authority


def test_a_result_naming_no_ui_uri_is_handed_on_as_the_same_object():
    """The rewriting sits on every call's path: a result with nothing to rewrite is never copied."""
    from omega_mcp.proxy import apps

    plain = {
        "content": [
            {"type": "text", "text": "ui://widget/index.html"},  # text is the server's words, never rewritten
            {"type": "resource_link", "name": "f", "uri": "file:///f"},
            {"type": "resource", "resource": {"uri": "file:///e", "text": "e"}, "_meta": {"vendor": 1}},
        ],
        "structuredContent": {"uri": "ui://widget/index.html"},
        "_meta": {"ui": {"visibility": ["model"]}},
    }
    assert apps.result_for_client("s", plain) is plain
    named = {**plain, "_meta": {"ui/resourceUri": UI}}
    rewritten = apps.result_for_client("s", named)
    assert rewritten["_meta"] == {"ui/resourceUri": "ui://s/widget/index.html"}
    assert rewritten["content"] is plain["content"] and rewritten["structuredContent"] == plain["structuredContent"]
    assert named["_meta"] == {"ui/resourceUri": UI}  # the server's answer itself is left as it came


_EXT_APPS_PACKAGES = ["@modelcontextprotocol/ext-apps@2", "@modelcontextprotocol/server@2", "zod@4"]


@pytest.fixture(scope="module")
def ext_apps_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the official ext-apps SDK installed and the fixture server beside it (skips when
    npm or the registry is unreachable)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node/npm not installed: the ext-apps SDK server cannot be built")
    where = tmp_path_factory.mktemp("ext-apps")
    try:
        installed = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", *_EXT_APPS_PACKAGES],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install of the ext-apps SDK timed out (registry unreachable?)")
    if installed.returncode != 0:
        pytest.skip(f"npm install of the ext-apps SDK failed: {installed.stderr.strip()[-300:]}")
    shutil.copy(FIXTURES / "ext_apps_server.mjs", where)
    return where


async def test_servers_built_with_the_ext_apps_sdk_each_open_their_own_ui(
    rwx_policy: SandboxPolicy, ext_apps_dir: Path
):
    node = shutil.which("node")
    assert node is not None
    script = str(ext_apps_dir / "ext_apps_server.mjs")
    names = ["north", "south"]
    specs = [DownstreamSpec(n, StdioServerParameters(command=node, args=[script, n], cwd=ext_apps_dir)) for n in names]
    async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, _, omega):
        await downstreams.wait_ready()
        statuses = {s.server_name: s.reason for s in downstreams.statuses()}
        assert all(downstreams.connected(n) is not None for n in names), statuses
        for mode in ("legacy", "auto"):
            await _each_tool_opens_its_own_ui(omega, mode, names, templates=False, prompts=False)


def test_a_prompt_naming_no_ui_uri_is_handed_on_as_the_same_object():
    from omega_mcp.proxy import apps

    plain = {
        "messages": [
            {"role": "user", "content": {"type": "text", "text": UI}},
            {"role": "user", "content": {"type": "resource_link", "name": "f", "uri": "file:///f"}},
        ],
        "_meta": {"vendor": 1},
    }
    assert apps.prompt_for_client("s", plain) is plain
    named = {**plain, "_meta": {"ui": {"resourceUri": UI}}}
    rewritten = apps.prompt_for_client("s", named)
    assert rewritten["_meta"] == {"ui": {"resourceUri": "ui://s/widget/index.html"}}
    assert rewritten["messages"] is plain["messages"]
    assert named["_meta"] == {"ui": {"resourceUri": UI}}  # the server's answer itself is left as it came
