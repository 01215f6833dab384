"""A downstream that writes a 300 MiB line cannot make omega grow: that answer fails its call only.

One real `omega-mcp serve` (an SDK client over stdio, default `[hub] max_message_mb` = 64) runs the
flood fixture (tests/fixtures/flood_server.py) confined and unconfined, and the echo fixture. Each
flood server answers a call with a 300 MiB line; before the bound, omega buffered all of it (and
copies) and its peak RSS grew by 1.8 GiB within a minute. Now each such call is an isError naming the bound, the
line is dropped as it is read (through the stdio relay here), the server keeps answering, so does the
echo server, and omega's peak RSS (VmHWM) grows by less than the bound and change.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import mcp
import pytest
from mcp import StdioServerParameters, types

from proxy_support import listed
from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")

FIXTURES = Path(__file__).parents[1] / "fixtures"
_MIB = 1 << 20
_GROWTH_BOUND = 128 * _MIB  # 64 MiB of buffer and what Python keeps around it; the old code took 1.8 GiB


def _server(name: str, script: str, sandbox: str | None) -> str:
    lines = [f"[servers.{name}]", 'command = "${OMEGA_PYTHON}"', f"args = {json.dumps([str(FIXTURES / script)])}"]
    lines += [f"sandbox = {sandbox}"] if sandbox is not None else []
    return "\n".join(lines) + "\n"


def _omega_pid(config: Path) -> int:
    """The `omega-mcp serve` of this test (its command line names the test's own config file)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and str(config).encode() in argv:
                return int(entry.name)
    raise AssertionError("omega-mcp serve is not running")


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_a_300_mib_answer_fails_its_call_and_omega_stays_small(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "servers.toml"
    config.write_text(
        f'[sandbox]\nmode = "rwx"\nworkspace = "{ws}"\nservers = "confined"\n'
        + _server("confined", "flood_server.py", None)
        + _server("unconfined", "flood_server.py", '"none"')
        + _server("ok", "echo_server.py", '"none"')
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "omega_mcp", "serve", "--config", str(config), "--log-level", "error"],
        env={"OMEGA_HOME": str(tmp_path / "home"), "OMEGA_PYTHON": sys.executable, "PATH": os.environ["PATH"]},
        cwd=tmp_path,
    )
    with deadline(180):
        async with mcp.Client(params, mode="legacy") as client:
            await listed(client, "mcp__confined__flood", "mcp__unconfined__flood", "mcp__ok__echo")
            pid = _omega_pid(config)
            small = await client.call_tool("mcp__confined__flood", {"mb": 1})
            baseline = _peak_rss(pid)
            results: dict[str, types.CallToolResult] = {}
            with anyio.move_on_after(60):  # the old code was still busy with the first line after that
                for name in ("confined", "unconfined"):
                    results[name] = await client.call_tool(f"mcp__{name}__flood", {"mb": 300})
            growth = _peak_rss(pid) - baseline
            assert growth < _GROWTH_BOUND, f"omega's peak RSS grew by {growth / _MIB:.0f} MiB"
            echoed = await client.call_tool("mcp__ok__echo", {"text": "still here"})
            again = {name: await client.call_tool(f"mcp__{name}__flood", {"mb": 1}) for name in results}
    assert not small.is_error and len(_text(small)) == _MIB
    assert list(results) == ["confined", "unconfined"]
    for name, result in results.items():
        assert result.is_error, name
        assert _text(result) == (
            f"the result of flood from server {name} is longer than max_message_mb (64 MiB) and was dropped "
            "(raise max_message_mb in [hub] for larger results)"
        )
        assert not again[name].is_error and len(_text(again[name])) == _MIB, name
    assert not echoed.is_error and _text(echoed) == "still here"
