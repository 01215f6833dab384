"""Tool results as model input, and the agent's tool catalog."""

from __future__ import annotations

import base64

from mcp import types

from omega_mcp.agent.tools import ToolCatalog, result_parts
from omega_mcp.messages import ImagePart, TextPart, ToolResult


def test_text_blocks_are_kept_and_images_stay_images() -> None:
    png = base64.b64encode(b"\x89PNG....").decode()
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="line 1"),
            types.ImageContent(type="image", data=png, mime_type="image/png"),
            types.TextContent(type="text", text="line 2"),
        ]
    )
    parts = result_parts(result)
    assert parts == (TextPart("line 1"), ImagePart("image/png", png), TextPart("line 2"))
    assert ToolResult("c", "t", parts).text() == "line 1\n[image: image/png, 8 bytes]\nline 2"


def test_other_blocks_are_described_in_one_line() -> None:
    blob = base64.b64encode(b"x" * 300).decode()
    result = types.CallToolResult(
        content=[
            types.AudioContent(type="audio", data=base64.b64encode(b"abcd").decode(), mime_type="audio/wav"),
            types.ResourceLink(type="resource_link", uri="file:///tmp/a.txt", name="a.txt"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="mem://note", text="hello", mime_type="text/plain"),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(uri="mem://bin", blob=blob, mime_type="application/zip"),
            ),
        ]
    )
    texts = [part.text for part in result_parts(result) if isinstance(part, TextPart)]
    assert texts == [
        "[audio: audio/wav, 4 bytes]",
        "[resource link: file:///tmp/a.txt (a.txt)]",
        "[resource mem://note]\nhello",
        "[resource mem://bin: application/zip, 300 bytes]",
    ]


def test_structured_content_is_used_only_when_there_is_no_content() -> None:
    structured = types.CallToolResult(content=[], structured_content={"temperature": 21.5})
    assert result_parts(structured) == (TextPart('{"temperature": 21.5}'),)
    both = types.CallToolResult(content=[types.TextContent(type="text", text="21.5")], structured_content={"t": 1})
    assert result_parts(both) == (TextPart("21.5"),)


def test_an_empty_result_reads_as_no_output() -> None:
    assert ToolResult("c", "t", result_parts(types.CallToolResult(content=[]))).text() == "(no output)"


def test_catalog_keeps_order_descriptions_and_schemas_and_skips_duplicates() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    tools = [
        types.Tool(name="bash", description="Run", input_schema=schema),
        types.Tool(name="mcp__s__t", title="Title only", input_schema=schema),
        types.Tool(name="bash", description="dup", input_schema=schema),
    ]
    catalog = ToolCatalog(tools)
    assert [(s.name, s.description) for s in catalog.specs] == [("bash", "Run"), ("mcp__s__t", "Title only")]
    assert catalog.specs[0].input_schema == schema
    assert catalog.tool_name("bash") == "bash" and catalog.tool_name("nope") is None


def test_names_that_normalize_alike_stay_distinct() -> None:
    tools = [types.Tool(name=n, input_schema={"type": "object"}) for n in ("a.b", "a/b", "a_b")]
    catalog = ToolCatalog(tools)
    names = [s.name for s in catalog.specs]
    assert len(set(names)) == 3
    assert [catalog.tool_name(n) for n in names] == ["a.b", "a/b", "a_b"]
    # Deterministic across runs: a second catalog maps the same way.
    assert [s.name for s in ToolCatalog(tools).specs] == names


def test_a_name_that_already_fits_keeps_it_even_when_a_sanitized_name_comes_first() -> None:
    # "a.b" normalizes to "a_b": it must not take the name of the real "a_b" and push that one
    # to a hashed name, or the model calling "a_b" would reach the wrong tool.
    tools = [types.Tool(name=n, input_schema={"type": "object"}) for n in ("a.b", "a_b")]
    catalog = ToolCatalog(tools)
    assert catalog.tool_name("a_b") == "a_b"
    dotted = next(s.name for s in catalog.specs if catalog.tool_name(s.name) == "a.b")
    assert dotted != "a_b" and dotted.startswith("a_b_")
    assert [catalog.tool_name(s.name) for s in catalog.specs] == ["a.b", "a_b"]  # offered in order
