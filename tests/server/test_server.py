"""The MCP front-end driven by the SDK's own Client, in-process, in both protocol eras."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import mcp
import pytest
from mcp.shared.exceptions import MCPError

from omega_mcp.server.server import build_server
from omega_mcp.toolbox import Toolbox

BUILTIN_ORDER = ["bash", "read", "write", "edit", "bash_output", "kill_shell"]


@pytest.fixture(params=["legacy", "auto"])
async def client(request: pytest.FixtureRequest, toolbox: Toolbox) -> AsyncIterator[mcp.Client]:
    async with mcp.Client(build_server(toolbox), mode=request.param) as c:
        yield c


async def test_both_protocol_eras_are_answered(toolbox: Toolbox):
    async with mcp.Client(build_server(toolbox), mode="legacy") as legacy:
        assert legacy.protocol_version == "2025-11-25"
        assert legacy.server_info is not None and legacy.server_info.name == "omega"
    async with mcp.Client(build_server(toolbox), mode="auto") as modern:
        assert modern.protocol_version == "2026-07-28"


async def test_tools_are_listed_in_stable_order_with_annotations(client: mcp.Client):
    tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == BUILTIN_ORDER
    by_name = {t.name: t for t in tools}
    assert by_name["read"].annotations and by_name["read"].annotations.read_only_hint is True
    assert by_name["write"].annotations and by_name["write"].annotations.destructive_hint is True
    assert by_name["edit"].annotations and by_name["edit"].annotations.destructive_hint is True
    assert by_name["bash"].annotations and by_name["bash"].annotations.open_world_hint is True
    assert by_name["read"].input_schema["required"] == ["file_path"]
    assert set(by_name["edit"].input_schema["required"]) == {"file_path", "old_string", "new_string"}
    for tool in tools:
        assert tool.description and len(tool.description) > 40
        assert "title" not in str(tool.input_schema["properties"])


async def test_unknown_tool_is_an_error_naming_the_closest_tools(client: mcp.Client):
    with pytest.raises(MCPError) as info:
        await client.call_tool("baash", {"command": "true"})
    assert "Unknown tool" in info.value.message
    assert "bash" in info.value.message


async def test_builtin_names_match_case_insensitively(client: mcp.Client):
    result = await client.call_tool("BASH", {"command": "echo hi"})
    assert not result.is_error
    assert result.content[0].text.strip() == "hi"  # type: ignore[union-attr]


async def test_invalid_arguments_are_an_is_error_result_naming_the_field(client: mcp.Client):
    result = await client.call_tool("read", {"path": "x"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "file_path" in text and "path" in text
    result = await client.call_tool("bash", {"command": "true", "timeout": 601})
    assert result.is_error and "timeout" in result.content[0].text  # type: ignore[union-attr]


async def test_write_read_edit_round_trip_through_the_server(client: mcp.Client, toolbox: Toolbox):
    written = await client.call_tool("write", {"file_path": "notes/a.txt", "content": "alpha\nbeta\n"})
    assert not written.is_error and "11 bytes" in written.content[0].text  # type: ignore[union-attr]
    assert (toolbox.policy.workspace / "notes" / "a.txt").read_text() == "alpha\nbeta\n"
    edited = await client.call_tool("edit", {"file_path": "notes/a.txt", "old_string": "beta", "new_string": "gamma"})
    assert not edited.is_error
    read = await client.call_tool("read", {"file_path": "notes/a.txt"})
    assert not read.is_error
    text = read.content[0].text  # type: ignore[union-attr]
    assert "alpha" in text and "gamma" in text and "beta" not in text


async def test_bash_failure_is_an_is_error_result_not_a_protocol_error(client: mcp.Client):
    result = await client.call_tool("bash", {"command": "echo oops >&2; exit 7"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "oops" in text and "7" in text


async def test_a_denied_write_is_an_is_error_result_naming_the_path(policy, tmp_path):
    async with Toolbox(policy) as box, mcp.Client(build_server(box)) as c:
        target = tmp_path / "outside" / "x.txt"
        result = await c.call_tool("write", {"file_path": str(target), "content": "no"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "denied" in text and str(target) in text
    assert not target.exists()


async def test_read_over_mcp_returns_images_refuses_binaries_and_escapes_controls(client: mcp.Client, toolbox: Toolbox):
    workspace = toolbox.policy.workspace
    png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 17
    (workspace / "a.png").write_bytes(png)
    (workspace / "a.zip").write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    (workspace / "a.log").write_bytes(b"\x1b[1mbold\x1b[0m\r\n")
    image = await client.call_tool("read", {"file_path": "a.png"})
    archive = await client.call_tool("read", {"file_path": "a.zip"})
    log = await client.call_tool("read", {"file_path": "a.log"})
    assert not image.is_error and [block.type for block in image.content] == ["text", "image"]
    assert image.content[1].mime_type == "image/png"  # type: ignore[union-attr]
    assert base64.b64decode(image.content[1].data) == png  # type: ignore[union-attr]
    assert archive.is_error and "binary file (ZIP archive, 64 bytes)" in archive.content[0].text  # type: ignore[union-attr]
    assert log.content[0].text == "     1\t\\x1b[1mbold\\x1b[0m"  # type: ignore[union-attr]


async def test_builtin_arguments_are_strict_no_string_is_taken_for_a_number(client: mcp.Client, toolbox: Toolbox):
    (toolbox.policy.workspace / "a.txt").write_text("one\ntwo\n")
    timeout = await client.call_tool("bash", {"command": "echo hi", "timeout": "5"})
    background = await client.call_tool("bash", {"command": "echo hi", "run_in_background": "true"})
    offset = await client.call_tool("read", {"file_path": "a.txt", "offset": "2"})
    whole = await client.call_tool("read", {"file_path": "a.txt", "offset": 2.0})
    assert timeout.is_error and '`timeout`: Input should be a valid number, got "5"' in timeout.content[0].text  # type: ignore[union-attr]
    assert background.is_error and "`run_in_background`" in background.content[0].text  # type: ignore[union-attr]
    assert offset.is_error and "`offset`" in offset.content[0].text  # type: ignore[union-attr]
    assert not whole.is_error and whole.content[0].text == "     2\ttwo"  # type: ignore[union-attr]
