"""Era bridging in all four pairings (SPEC "Transparency"): a handshake-era client (2025-11-25, as Claude
Code and Codex are) and a 2026-07-28 client, each through a real omega (`serve` over stdio and `serve
--http`), to a server that speaks only the handshake and to one that speaks only 2026-07-28, each over
stdio and over streamable HTTP (tests/fixtures/era_server.py). Every pairing carries tools, resources,
prompts, resource subscriptions (`resources/updated`), elicitation and sampling as a direct connection
would. One omega per front end and client era serves the whole module (every downstream at once)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp import types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.subscriptions import ToolsListChanged

from cli_support import cli_env
from hub_support import Hub, free_port, hub_client, start_hub
from proxy_support import FIXTURES, listed
from waits import deadline, until, until_sync

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

ERA_SERVER = FIXTURES / "era_server.py"
SERVERS = {  # servers.toml key: (the one era it speaks, how omega reaches it)
    "hs_stdio": ("handshake", "stdio"),
    "hs_http": ("handshake", "http"),
    "modern_stdio": ("modern", "stdio"),
    "modern_http": ("modern", "http"),
}
MODES = {"handshake": "legacy", "modern": "2026-07-28"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope: the module's omega clients live across its tests


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("eras")


@pytest.fixture(scope="module")
def http_servers(place: Path) -> Iterator[dict[str, str]]:
    """The two HTTP fixture servers, listening: their URLs by servers.toml key."""
    urls: dict[str, str] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, (era, transport) in SERVERS.items():
            if transport != "http":
                continue
            port = free_port()
            argv = [sys.executable, str(ERA_SERVER), "--era", era, "--name", name, "--http", str(port)]
            with (place / f"{name}.log").open("wb") as log:
                procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
            until_sync(lambda port=port: _listening(port), f"{name} to listen", seconds=30, interval=0.05)
            urls[name] = f"http://127.0.0.1:{port}/mcp"
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def config(place: Path, http_servers: dict[str, str]) -> Path:
    ws = place / "ws"
    ws.mkdir(exist_ok=True)
    tables = [f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\n']
    for name, (era, transport) in SERVERS.items():
        if transport == "http":
            tables.append(f'[servers.{name}]\nurl = "{http_servers[name]}"\n')
        else:
            args = ", ".join(f'"{a}"' for a in [str(ERA_SERVER), "--era", era, "--name", name])
            tables.append(f'[servers.{name}]\ncommand = "{sys.executable}"\nargs = [{args}]\n')
    path = place / "servers.toml"
    path.write_text("\n".join(tables))
    return path


@pytest.fixture(scope="module")
def http_omega(place: Path, config: Path) -> Iterator[Hub]:
    hub = start_hub(place, "--config", str(config))
    try:
        yield hub
    finally:
        hub.stop()


@dataclass
class Peer:
    """What the client answers when asked (a name, a model's words) and the updates it hears of."""

    updates: list[str] = field(default_factory=list)
    logs: list[tuple[str, str | None, Any]] = field(default_factory=list)
    heard: anyio.Event = field(default_factory=anyio.Event)
    tools_changed: anyio.Event = field(default_factory=anyio.Event)

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if params.message == "decline?":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((params.level, params.logger, params.data))

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="hi"), model="scripted")

    async def message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updates.append(str(message.params.uri))
            self.heard.set()
        elif isinstance(message, types.ToolListChangedNotification):
            self.tools_changed.set()

    def callbacks(self, era: str) -> dict[str, Any]:
        """What a client of `era` is made with (a 2026-era client asks for logs with each request)."""
        logs: dict[str, Any] = {"logging_callback": self.log}
        if era == "modern":
            logs["log_level"] = "info"
        return {
            "elicitation_callback": self.elicit,
            "sampling_callback": self.sample,
            "message_handler": self.message,
            **logs,
        }


@dataclass
class Omega:
    client: mcp.Client
    peer: Peer
    client_era: str


@pytest.fixture(scope="module", params=[(f, e) for f in ("stdio", "http") for e in MODES], ids=lambda p: "-".join(p))
async def omega(request: pytest.FixtureRequest, place: Path, config: Path, http_omega: Hub) -> AsyncIterator[Omega]:
    """A client of the era asked for, connected to omega over the front end asked for, every server listed."""
    front, era = request.param
    peer = Peer()
    async with AsyncExitStack() as stack:
        if front == "stdio":
            command = ["-m", "omega_mcp", "serve", "--config", str(config)]
            params = StdioServerParameters(command=sys.executable, args=command, env=cli_env(place), cwd=place)
            client = await stack.enter_async_context(mcp.Client(params, mode=MODES[era], **peer.callbacks(era)))
        else:
            connected = hub_client(http_omega.url, http_omega.token, mode=MODES[era], **peer.callbacks(era))
            client = await stack.enter_async_context(connected)
        assert client.protocol_version == ("2025-11-25" if era == "handshake" else "2026-07-28")
        await listed(client, *(f"mcp__{name}__echo" for name in SERVERS), seconds=60)
        if era == "handshake":
            await client.set_logging_level("info")
        yield Omega(client, peer, era)


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


SERVER = pytest.mark.parametrize("server", list(SERVERS))


@SERVER
async def test_tools_are_listed_and_called_across_the_eras(omega: Omega, server: str):
    era = SERVERS[server][0]
    tools = {t.name: t for t in (await omega.client.list_tools()).tools}
    assert {f"mcp__{server}__{t}" for t in ("echo", "touch", "ask", "sample")} <= set(tools)
    assert tools[f"mcp__{server}__echo"].description == "Echo the text back."
    assert _text(await omega.client.call_tool(f"mcp__{server}__echo", {"text": "hi"})) == f"{era}:hi"


@SERVER
async def test_resources_and_prompts_pass_across_the_eras(omega: Omega, server: str):
    era, uri = SERVERS[server][0], f"res://{server}/note"
    assert uri in [str(r.uri) for r in (await omega.client.list_resources()).resources]
    read = await omega.client.read_resource(uri)
    block = read.contents[0]
    assert isinstance(block, types.TextResourceContents) and block.text == f"note of {era}"
    templates = [t.uri_template for t in (await omega.client.list_resource_templates()).resource_templates]
    assert f"res://{server}/items/{{item}}" in templates
    read = await omega.client.read_resource(f"res://{server}/items/seven")
    block = read.contents[0]
    assert isinstance(block, types.TextResourceContents) and block.text == f"item seven of {era}"
    assert f"{server}__greet" in [p.name for p in (await omega.client.list_prompts()).prompts]
    prompt = await omega.client.get_prompt(f"{server}__greet", {"name": "Bo"})
    content = prompt.messages[0].content
    assert isinstance(content, types.TextContent) and content.text == f"Greet Bo from {era}."


@SERVER
async def test_elicitation_reaches_the_client_across_the_eras(omega: Omega, server: str):
    with deadline(30):
        assert _text(await omega.client.call_tool(f"mcp__{server}__ask", {})) == "Hello, Ada!"


@SERVER
async def test_a_declined_elicitation_reaches_the_server_as_declined_across_the_eras(omega: Omega, server: str):
    with deadline(30):
        assert _text(await omega.client.call_tool(f"mcp__{server}__ask", {"question": "decline?"})) == "decline"


@SERVER
async def test_progress_and_logs_of_a_call_reach_its_client_across_the_eras(omega: Omega, server: str):
    era, steps = SERVERS[server][0], list[tuple[float, float | None, str | None]]()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append((progress, total, message))

    omega.peer.logs.clear()
    with deadline(30):
        called = await omega.client.call_tool(f"mcp__{server}__progress", {}, progress_callback=on_progress)
        assert _text(called) == "done"
        assert _text(await omega.client.call_tool(f"mcp__{server}__log", {})) == "logged"
    assert steps == [(1, 2, "half"), (2, 2, "all")]
    assert omega.peer.logs == [("info", "era", {"from": era})]


@SERVER
async def test_sampling_reaches_the_client_across_the_eras(omega: Omega, server: str):
    with deadline(30):
        assert _text(await omega.client.call_tool(f"mcp__{server}__sample", {})) == "model said: hi"


@SERVER
async def test_a_read_and_a_prompt_that_ask_for_input_are_answered_across_the_eras(omega: Omega, server: str):
    """A server may ask during `resources/read` and `prompts/get` too (mid-request, or in a 2026 round)."""
    with deadline(30):
        read = await omega.client.read_resource(f"res://{server}/asks/tea")
        prompt = await omega.client.get_prompt(f"{server}__introduce", {})
    block, content = read.contents[0], prompt.messages[0].content
    assert isinstance(block, types.TextResourceContents) and block.text == "tea for Ada"
    assert isinstance(content, types.TextContent) and content.text == "Introduce Ada."


@SERVER
async def test_a_call_that_asks_twice_is_answered_twice_across_the_eras(omega: Omega, server: str):
    """A handshake server's two requests during one call, or a 2026 server's two rounds, each reach the client."""
    with deadline(30):
        assert _text(await omega.client.call_tool(f"mcp__{server}__both", {})) == "Ada; model said: hi"


@SERVER
async def test_a_tool_added_while_serving_reaches_the_client_across_the_eras(omega: Omega, server: str):
    c, peer = omega.client, omega.peer
    if omega.client_era == "handshake":
        peer.tools_changed = anyio.Event()
        added = _text(await c.call_tool(f"mcp__{server}__grow", {}))
        with deadline(30):
            await peer.tools_changed.wait()
        await listed(c, f"mcp__{server}__{added}")
        return
    async with c.listen(tools_list_changed=True) as stream:
        assert stream.honored.tools_list_changed
        added = _text(await c.call_tool(f"mcp__{server}__grow", {}))
        with deadline(30):
            while f"mcp__{server}__{added}" not in [t.name for t in (await c.list_tools()).tools]:
                event = await stream.__anext__()  # a change was announced: list again
                assert isinstance(event, ToolsListChanged), event


@SERVER
async def test_a_subscribed_client_hears_of_updates_across_the_eras(omega: Omega, server: str):
    uri, c, peer = f"res://{server}/note", omega.client, omega.peer
    peer.updates.clear()
    peer.heard = anyio.Event()
    if omega.client_era == "handshake":
        await c.subscribe_resource(uri)
        with deadline(30):
            while not peer.heard.is_set():  # until the downstream's side of the subscription is in place
                assert _text(await c.call_tool(f"mcp__{server}__touch", {})) == "touched"
                with anyio.move_on_after(0.2):
                    await peer.heard.wait()
        await c.unsubscribe_resource(uri)
        assert set(peer.updates) == {uri}
        return
    async with c.listen(resource_subscriptions=[uri]) as stream:
        assert stream.honored.resource_subscriptions == [uri]
        event = None
        with deadline(30):
            while event is None:  # until the server's listen filter names the URI
                assert _text(await c.call_tool(f"mcp__{server}__touch", {})) == "touched"
                with anyio.move_on_after(0.2):
                    event = await stream.__anext__()
    assert getattr(event, "uri", None) == uri


@SERVER
async def test_clients_of_both_eras_follow_one_resource_at_once_and_leave_it_apart(http_omega: Hub, server: str):
    """One downstream resource, a handshake-era subscriber and a 2026-era listener on the one hub: each hears of
    the update, and the subscriber's leaving does not end the listener's stream."""
    uri, old, new = f"res://{server}/note", Peer(), Peer()
    async with (
        hub_client(http_omega.url, http_omega.token, mode="legacy", **old.callbacks("handshake")) as subscriber,
        hub_client(http_omega.url, http_omega.token, mode="2026-07-28", **new.callbacks("modern")) as listener,
        listener.listen(resource_subscriptions=[uri]) as stream,
    ):
        await subscriber.subscribe_resource(uri)

        async def touched_until(heard: Callable[[], Awaitable[bool]]) -> None:
            with deadline(30):
                while True:  # until each side's subscription is in place downstream
                    assert _text(await listener.call_tool(f"mcp__{server}__touch", {})) == "touched"
                    if await heard():
                        return

        async def both() -> bool:
            with anyio.move_on_after(0.2):
                await stream.__anext__()
                with anyio.move_on_after(1):
                    await old.heard.wait()
            return old.heard.is_set()

        await touched_until(both)
        await subscriber.unsubscribe_resource(uri)

        async def listener_alone() -> bool:
            with anyio.move_on_after(0.2):
                await stream.__anext__()
                return True
            return False

        await touched_until(listener_alone)
    assert set(old.updates) == {uri}


@SERVER
async def test_a_call_the_client_gives_up_on_is_cancelled_downstream_across_the_eras(omega: Omega, server: str):
    c = omega.client

    async def waits() -> dict[str, int]:
        return json.loads(_text(await c.call_tool(f"mcp__{server}__waits", {})))

    before = await waits()
    async with anyio.create_task_group() as calling:
        calling.start_soon(c.call_tool, f"mcp__{server}__wait", {})

        async def started() -> bool:
            return (await waits())["started"] > before["started"]

        await until(started, "the call to reach the server", seconds=30, interval=0.05)
        calling.cancel_scope.cancel()  # the client gives up on it

    async def cancelled() -> bool:
        return (await waits())["cancelled"] > before["cancelled"]

    await until(cancelled, "the server to see the call cancelled", seconds=30, interval=0.05)
