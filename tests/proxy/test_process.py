"""The aggregator with real stdio downstream processes: mcp-server-time, and fixture servers that
hang, crash or refuse to start; restarts, reasons, and no process left behind."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from omega_mcp.config import load_config
from omega_mcp.proxy.supervisor import Downstreams, DownstreamSpec
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox
from proxy_support import Notifications, alive, child_pids, client, hub, read_pid, stdio_fixture, wait_until
from waits import deadline

REPO = Path(__file__).parents[2]


def uncommented_example(tmp_path: Path) -> Path:
    """The example servers.toml with its `[servers.time]` block uncommented, as its comment tells a user to."""
    lines = (REPO / "servers.toml").read_text().splitlines()
    start = lines.index("# [servers.time]")
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("# "))
    lines[start:end] = [line.removeprefix("# ") for line in lines[start:end]]
    path = tmp_path / "servers.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_the_example_time_server_once_uncommented_exports_its_tools_and_answers(
    rwx_policy: SandboxPolicy, tmp_path: Path
):
    example = load_config(REPO / "servers.toml", environ={"HOME": str(Path.home())})
    assert list(example.servers) == []  # shipped commented out: it needs `pip install mcp-server-time`
    config = load_config(uncommented_example(tmp_path), environ={"HOME": str(Path.home())})  # no OMEGA_PYTHON
    assert config.servers["time"].command == sys.executable
    async with Downstreams.from_config(config.for_servers) as downstreams, Toolbox(rwx_policy, downstreams) as toolbox:
        names = [t.name for t in await toolbox.list_tools()]
        result = await toolbox.call_tool("mcp__time__get_current_time", {"timezone": "UTC"})
    assert {"mcp__time__get_current_time", "mcp__time__convert_time"} <= set(names)
    assert not result.is_error
    assert result.structured_content is not None and result.structured_content["timezone"] == "UTC"


async def test_a_server_hanging_on_initialize_is_skipped_while_the_others_work(
    rwx_policy: SandboxPolicy, tmp_path: Path
):
    pid_file = tmp_path / "hang.pid"
    specs = (
        DownstreamSpec("hang", stdio_fixture("--hang-init", "--pid-file", str(pid_file)), connect_timeout_seconds=1),
        DownstreamSpec("ok", stdio_fixture()),
    )
    async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, toolbox, _):
        names = [t.name for t in await toolbox.list_tools()]
        echoed = await toolbox.call_tool("mcp__ok__echo", {"text": "still here"})
        down = await toolbox.call_tool("mcp__hang__echo", {"text": "x"})
        status = {s.server_name: s for s in downstreams.statuses()}
        hung_pid = read_pid(pid_file)
        assert not alive(hung_pid)  # the attempt that timed out was killed, not left hanging
    assert "mcp__ok__echo" in names and not any(n.startswith("mcp__hang__") for n in names)
    assert echoed.content[0].text == "still here"  # type: ignore[union-attr]
    assert status["hang"].state == "failed" and "connect_timeout (1 s)" in (status["hang"].reason or "")
    text = down.content[0].text  # type: ignore[union-attr]
    assert down.is_error and text.startswith("server hang is down: no answer within connect_timeout")
    assert "omega will retry in" in text


async def test_a_server_that_cannot_start_is_reported_with_its_reason(rwx_policy: SandboxPolicy):
    from mcp.client.stdio import StdioServerParameters

    specs = (
        DownstreamSpec("missing", StdioServerParameters(command="/nonexistent/mcp-server")),
        DownstreamSpec("refuses", stdio_fixture("--exit-at-start", "2")),
    )
    async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        status = {s.server_name: s for s in downstreams.statuses()}
    assert status["missing"].state == "failed"
    assert status["missing"].reason == "cannot start '/nonexistent/mcp-server': No such file or directory"
    assert status["refuses"].state == "failed"
    assert "exit status 2: fixture: refusing to start" in (status["refuses"].reason or "")


async def test_a_missing_cwd_is_named_not_the_program(rwx_policy: SandboxPolicy, tmp_path: Path):
    from mcp.client.stdio import StdioServerParameters

    gone, file = tmp_path / "gone", tmp_path / "file"
    file.write_text("")
    specs = (
        DownstreamSpec("a", StdioServerParameters(command=sys.executable, cwd=gone)),
        DownstreamSpec("b", StdioServerParameters(command=sys.executable, cwd=file)),
    )
    async with hub(rwx_policy, *specs, backoff_seconds=60) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        status = {s.server_name: s.reason for s in downstreams.statuses()}
    assert status["a"] == f"cannot start: its working directory {gone} does not exist (servers.a.cwd)"
    assert status["b"] == f"cannot start: its working directory {file} is not a directory (servers.b.cwd)"


async def test_a_failed_server_shows_the_stderr_lines_that_say_why(rwx_policy: SandboxPolicy):
    from mcp.client.stdio import StdioServerParameters

    uv = [  # what uvx says behind a TLS-inspecting proxy: the last line is the hint, the error is above it
        "  \u00d7 Failed to fetch: `https://pypi.org/simple/mcp-server-fetch/`",
        "  \u251c\u2500\u25b6 Request failed after 3 retries",
        "  \u2570\u2500\u25b6 invalid peer certificate: UnknownIssuer",
        "  help: Consider enabling use of system TLS certificates with the `--native-tls` command-line flag",
    ]
    script = f"import sys; sys.stderr.write({chr(10).join(uv)!r} + '\\n'); sys.exit(2)"
    spec = DownstreamSpec("fetch", StdioServerParameters(command=sys.executable, args=["-c", script]))
    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        (status,) = downstreams.statuses()
    assert status.reason is not None and "exit status 2: " in status.reason
    assert "Failed to fetch" in status.reason and "invalid peer certificate: UnknownIssuer" in status.reason
    assert "--native-tls" in status.reason and "after 3 retries" not in status.reason


async def test_a_crash_mid_session_is_an_is_error_and_the_restart_brings_the_tools_back(
    rwx_policy: SandboxPolicy, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="omega_mcp")
    notes = Notifications()
    async with hub(rwx_policy, DownstreamSpec("flaky", stdio_fixture()), backoff_seconds=0.2) as (ds, _, server):
        await ds.wait_ready()
        async with client(server, message_handler=notes) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            first_pid = (await c.call_tool("mcp__flaky__pid", {})).content[0].text  # type: ignore[union-attr]
            crashed = await c.call_tool("mcp__flaky__crash", {})
            while "mcp__flaky__pid" in names:  # the tools go away (list_changed) ...
                await notes.next()
                names = [t.name for t in (await c.list_tools()).tools]
            during = await c.call_tool("mcp__flaky__echo", {"text": "x"})
            while "mcp__flaky__pid" not in names:  # ... and come back after the restart (list_changed)
                await notes.next()
                names = [t.name for t in (await c.list_tools()).tools]
            second_pid = (await c.call_tool("mcp__flaky__pid", {})).content[0].text  # type: ignore[union-attr]
    assert crashed.is_error and "server flaky went away" in crashed.content[0].text  # type: ignore[union-attr]
    assert during.is_error and "server flaky is down" in during.content[0].text  # type: ignore[union-attr]
    assert second_pid != first_pid
    assert notes.tools >= 2
    assert "exit status 3: fixture: crashing on request" in caplog.text  # the reason, with the stderr tail
    assert "[flaky]: fixture: crashing on request" in caplog.text  # the server's stderr reaches our log


async def test_shutdown_leaves_no_downstream_process_behind(rwx_policy: SandboxPolicy, tmp_path: Path):
    before = child_pids()
    files = [tmp_path / f"s{i}.pid" for i in range(3)]
    specs = [DownstreamSpec(f"s{i}", stdio_fixture("--pid-file", str(f), "--spawn-child")) for i, f in enumerate(files)]
    async with hub(rwx_policy, *specs) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        assert [s.state for s in downstreams.statuses()] == ["connected"] * 3
        pids = [read_pid(f) for f in files] + [read_pid(f"{f}.child") for f in files]
        assert all(alive(pid) for pid in pids)
    assert not [pid for pid in pids if alive(pid)]
    assert child_pids() <= before


async def test_a_downstream_that_lists_more_tools_later_is_followed(rwx_policy: SandboxPolicy, tmp_path: Path):
    flag = tmp_path / "more"
    spec = DownstreamSpec("grow", stdio_fixture("--list-changed-file", str(flag)))
    async with hub(rwx_policy, spec) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        before = downstreams.version
        flag.touch()
        await toolbox.call_tool("mcp__grow__pid", {})  # the fixture notices the flag on its next request
        await wait_until(lambda: downstreams.version != before)
        names = [t.name for t in await toolbox.list_tools()]
    assert "mcp__grow__extra" in names


async def test_every_downstream_connects_in_parallel(rwx_policy: SandboxPolicy, tmp_path: Path):
    # Each fixture answers initialize only once all four have been asked: connecting them one
    # after the other would leave the first waiting past its connect timeout.
    barrier = ["--barrier", str(tmp_path), "4"]
    specs = [DownstreamSpec(f"s{i}", stdio_fixture(*barrier), connect_timeout_seconds=15) for i in range(4)]
    async with hub(rwx_policy, *specs) as (downstreams, toolbox, _):
        await toolbox.list_tools()
        assert [s.state for s in downstreams.statuses()] == ["connected"] * 4


async def test_tools_no_client_could_use_are_skipped_and_the_rest_are_exported(
    rwx_policy: SandboxPolicy, caplog: pytest.LogCaptureFixture
):
    spec = DownstreamSpec("odd", stdio_fixture("--bad-tools"))
    async with hub(rwx_policy, spec, backoff_seconds=60) as (downstreams, toolbox, _):
        tools = [t for t in await toolbox.list_tools() if t.name.startswith("mcp__odd__")]
        echoed = await toolbox.call_tool("mcp__odd__echo", {"text": "still works"})
        status = downstreams.statuses()[0]
    names = [t.name for t in tools]
    assert status.state == "connected"
    assert names == [f"mcp__odd__{n}" for n in ("echo", "crash", "pid", "rich", "progress", "refuse", "sleep")]
    assert tools[0].description == "Echo the text back."  # a name listed twice: the first one wins
    assert echoed.content[0].text == "still works"  # type: ignore[union-attr]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'broken'" in w and "inputSchema" in w for w in warnings)
    assert any("'schemaless'" in w and "inputSchema" in w for w in warnings)
    assert any("twice" in w and "'echo'" in w for w in warnings)


async def test_initialize_is_bounded_by_the_servers_request_timeout():
    spec = DownstreamSpec("hang", stdio_fixture("--hang-init"), timeout_seconds=0.5, connect_timeout_seconds=60)
    async with Downstreams([spec], one_shot=True) as downstreams:
        with deadline(20):  # far below connect_timeout: the 0.5 s request timeout must end it
            await downstreams.wait_ready()
        (status,) = downstreams.statuses()
    assert status.state == "failed"
    assert status.reason == "no answer to initialize within timeout (0.5 s)"


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        (
            [
                "Traceback (most recent call last):",
                '  File "<frozen runpy>", line 198',
                "ModuleNotFoundError: No module",
            ],
            "ModuleNotFoundError: No module",
        ),
        (
            [
                "npm error code E404",
                "npm error 404 Not Found - GET https://registry.npmjs.org/nope - Not found",
                "npm error 404 tarball, folder, http url, or git url.",
                "npm error A complete log of this run can be found in: /root/.npm/_logs/x-debug-0.log",
            ],
            "npm error 404 Not Found - GET https://registry.npmjs.org/nope - Not found",
        ),
        (["starting", "listening on stdio"], "listening on stdio"),
        ([], ""),
    ],
)
def test_the_decisive_stderr_lines_are_the_errors_not_the_log_pointer(lines: list[str], why: str):
    from omega_mcp.proxy.stdio import decisive_lines

    assert decisive_lines(lines) == why
