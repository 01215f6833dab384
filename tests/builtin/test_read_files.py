"""The read tool on what is not plain text: images come back as images, other binary files are refused
with their size and type, and control characters never reach the output raw."""

from __future__ import annotations

import base64
import os
import struct
import zlib
from pathlib import Path

import pytest
from mcp import types

from omega_mcp.builtin import read
from omega_mcp.builtin.filetype import sniff
from omega_mcp.builtin.read import read_file
from omega_mcp.builtin.schemas import ReadArgs
from omega_mcp.errors import ToolError
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline


def png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


IMAGES = {
    "png": (png(), "image/png"),
    "jpg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xd9", "image/jpeg"),
    "gif": (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,", "image/gif"),
    "webp": (
        b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00",
        "image/webp",
    ),
}


async def _call(policy: SandboxPolicy, file_path: str | Path) -> types.CallToolResult:
    with deadline(10):
        return await read_file(policy, ReadArgs(file_path=str(file_path)))


@pytest.mark.parametrize("suffix", list(IMAGES))
async def test_read_returns_an_image_as_image_content(policy: SandboxPolicy, suffix: str) -> None:
    data, mime_type = IMAGES[suffix]
    (policy.workspace / f"picture.{suffix}").write_bytes(data)
    result = await _call(policy, f"picture.{suffix}")
    text, image = result.content
    assert isinstance(text, types.TextContent) and isinstance(image, types.ImageContent)
    assert image.mime_type == mime_type and base64.b64decode(image.data) == data
    assert f"{len(data):,} bytes" in text.text and "picture" in text.text


async def test_an_image_is_recognised_by_its_content_not_its_name(policy: SandboxPolicy) -> None:
    (policy.workspace / "screenshot.txt").write_bytes(png())
    image = (await _call(policy, "screenshot.txt")).content[1]
    assert isinstance(image, types.ImageContent) and image.mime_type == "image/png"


async def test_an_image_over_the_limit_is_refused_with_its_size(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read, "MAX_IMAGE_BYTES", 100)
    big = png(64, 64)
    assert len(big) > 100
    (policy.workspace / "big.png").write_bytes(big)
    with pytest.raises(ToolError) as info:
        await _call(policy, "big.png")
    assert f"PNG image of {len(big):,} bytes" in str(info.value) and "at most" in str(info.value)


BINARIES = {
    "doc.pdf": (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n", "PDF document"),
    "report.docx": (b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00[Content_Types].xml", "Word document (ZIP)"),
    "lib.jar": (b"PK\x03\x04\x0a\x00\x00\x08\x00\x00META-INF/", "Java archive (ZIP)"),
    "data.gz": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "gzip compressed data"),
    "prog": (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8, "ELF executable or library"),
    "blob.bin": (bytes(range(256)) * 4, "binary data"),
    "notes.txt": (b"looks like text\x00but has a NUL", "binary data"),
    "photo.heic": (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00", "HEIC image"),
}


@pytest.mark.parametrize("name", list(BINARIES))
async def test_a_binary_file_is_refused_naming_its_size_and_type(policy: SandboxPolicy, name: str) -> None:
    data, description = BINARIES[name]
    (policy.workspace / name).write_bytes(data + b"\x00\x01\x02" * 100)
    with pytest.raises(ToolError) as info:
        await _call(policy, name)
    message = str(info.value)
    assert f"is a binary file ({description}, {len(data) + 300:,} bytes)" in message
    assert "\n" not in message and "bash" in message


@pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="no /proc/self/pagemap here")
async def test_a_binary_file_of_unknown_size_says_at_least(policy: SandboxPolicy) -> None:
    with pytest.raises(ToolError, match=r"binary file \(binary data, at least [\d,]+ bytes\)"):
        await _call(policy, "/proc/self/pagemap")


async def test_control_characters_are_shown_escaped_and_tabs_kept(policy: SandboxPolicy) -> None:
    raw = "plain\ttab\n\x1b[31mred\x1b[0m bell\x07 back\x08 cr\rhere del\x7f c1\u0085 \u009b2J\n".encode()
    (policy.workspace / "log.txt").write_bytes(raw)
    text = (await _call(policy, "log.txt")).content[0].text  # type: ignore[union-attr]
    assert text == (
        "     1\tplain\ttab\n     2\t\\x1b[31mred\\x1b[0m bell\\x07 back\\x08 cr\\x0dhere del\\x7f c1\\x85 \\x9b2J"
    )


async def test_a_nul_after_the_first_8_kib_of_a_text_file_is_shown_escaped(policy: SandboxPolicy) -> None:
    (policy.workspace / "late.txt").write_bytes(b"text\n" * 2000 + b"a\x00b\n")
    result = await read_file(policy, ReadArgs(file_path="late.txt", offset=2001))
    assert result.content[0].text == "  2001\ta\\x00b"  # type: ignore[union-attr]


async def test_latin_1_text_is_still_text(policy: SandboxPolicy) -> None:
    (policy.workspace / "old.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1"))
    text = (await _call(policy, "old.txt")).content[0].text  # type: ignore[union-attr]
    assert text == "     1\tcaf\ufffd cr\ufffdme br\ufffdl\ufffde"


async def test_a_file_name_with_control_characters_is_shown_escaped(policy: SandboxPolicy) -> None:
    (policy.workspace / "evil\x1b]0;pwned\x07.bin").write_bytes(b"\x00" * 10)
    with pytest.raises(ToolError) as info:
        await _call(policy, "evil\x1b]0;pwned\x07.bin")
    assert "\x1b" not in str(info.value) and "\x07" not in str(info.value)
    assert "evil\\x1b]0;pwned\\x07.bin" in str(info.value)


def test_utf16_text_is_named_as_such() -> None:
    kind = sniff("hello\n".encode("utf-16"), Path("x.txt"))
    assert not kind.text and "UTF-16" in kind.description


def test_text_starting_like_a_weak_signature_is_text() -> None:
    assert sniff(b"BM is the start of this line\n", Path("notes.txt")).text
    assert sniff(b"MZ-style heading\n", Path("readme")).text
