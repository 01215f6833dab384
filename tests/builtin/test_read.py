"""The read tool called directly on a tmp_path sandbox: contracts, bounds and data safety."""

from __future__ import annotations

import os
import re
import tracemalloc
from pathlib import Path

import pytest
from mcp import types

from omega_mcp.builtin import read
from omega_mcp.builtin.read import read_file
from omega_mcp.builtin.schemas import ReadArgs
from omega_mcp.errors import InvalidArgumentsError, ToolError
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline

CHUNK_BYTES = 4096
"""The read chunk size the chunk-boundary tests set (above one 2,000-character line)."""


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def _read(policy: SandboxPolicy, file_path: str | Path, **kwargs: int) -> str:
    with deadline(10):
        return _text(await read_file(policy, ReadArgs(file_path=str(file_path), **kwargs)))


async def test_read_numbers_lines_like_cat_n(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("alpha\nbeta\n\tgamma\n")
    assert await _read(policy, "a.txt") == "     1\talpha\n     2\tbeta\n     3\t\tgamma"


async def test_read_last_line_without_newline_is_returned(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("one\ntwo")
    assert await _read(policy, "a.txt") == "     1\tone\n     2\ttwo"


async def test_read_offset_and_limit_select_lines(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    assert await _read(policy, "a.txt", offset=10, limit=3) == "    10\tline 10\n    11\tline 11\n    12\tline 12"


async def test_read_offset_deep_into_a_multi_chunk_file(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 100_001)))
    assert await _read(policy, "a.txt", offset=77_777, limit=2) == " 77777\tline 77777\n 77778\tline 77778"
    assert await _read(policy, "a.txt", offset=100_000) == "100000\tline 100000"
    assert "has 100000 lines" in await _read(policy, "a.txt", offset=100_001)


async def test_read_offset_counts_a_last_line_without_newline(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("1\n2\n3")
    assert await _read(policy, "a.txt", offset=3) == "     3\t3"
    assert "has 3 lines" in await _read(policy, "a.txt", offset=4)


async def test_read_default_limit_is_2000_lines(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("x\n" * 2500)
    lines = (await _read(policy, "a.txt")).split("\n")
    numbered = [line for line in lines if re.fullmatch(r" *\d+\tx", line)]
    assert len(numbered) == 2000
    assert numbered[-1] == "  2000\tx"


async def test_read_stopped_by_the_default_limit_says_the_file_goes_on(policy: SandboxPolicy) -> None:
    # Without the notice a model takes the first 2000 lines for the whole file (and may write it back).
    (policy.workspace / "a.txt").write_text("x\n" * 2001)
    text = await _read(policy, "a.txt")
    assert text.splitlines()[-1] == "[the file goes on after line 2000; use offset=2001 to read more]"
    (policy.workspace / "b.txt").write_text("x\n" * 2000)
    assert (await _read(policy, "b.txt")).endswith("  2000\tx")


async def test_read_strips_carriage_return_of_crlf_lines(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_bytes(b"one\r\ntwo\r\n")
    assert await _read(policy, "a.txt") == "     1\tone\n     2\ttwo"


async def test_read_cuts_long_lines_with_a_marker(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("a" * 5000 + "\nshort\n" + "é" * 3000 + "\n")
    first, second, third = (await _read(policy, "a.txt")).split("\n")
    assert first.startswith("     1\t" + "a" * 2000 + " [")
    assert "a" * 2001 not in first
    assert "line cut at 2000 characters" in first
    assert "5000 characters" in first
    assert second == "     2\tshort"
    assert third.startswith("     3\t" + "é" * 2000 + " [")
    assert "é" * 2001 not in third


async def test_read_replaces_undecodable_bytes(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.bin").write_bytes(b"ok \xff\xfe end\n")
    assert await _read(policy, "a.bin") == "     1\tok \ufffd\ufffd end"


async def test_read_keeps_a_multibyte_character_split_across_chunks(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read, "_CHUNK_BYTES", CHUNK_BYTES)
    first = b"a" * (CHUNK_BYTES - 2) + b"\n"  # line 2 starts one byte before the chunk boundary
    (policy.workspace / "a.txt").write_bytes(first + "é\n".encode())
    assert await _read(policy, "a.txt", offset=2) == "     2\té"


async def test_read_truncates_large_output_with_honest_totals(policy: SandboxPolicy) -> None:
    body = "".join(f"{i:05d} " + "x" * 94 + "\n" for i in range(1, 1001))  # 100-char lines
    (policy.workspace / "big.txt").write_text(body)
    text = await _read(policy, "big.txt", limit=1000)
    full = "\n".join(f"{i:6d}\t{i:05d} " + "x" * 94 for i in range(1, 1001))
    shown, notice = text.split("\n\n[", 1)
    assert len(shown) <= 50_000
    assert full.startswith(shown)
    assert "output truncated" in notice
    match = re.search(r"showing (\d+) of (\d+) characters \(lines 1-(\d+) of lines 1-1000", notice)
    assert match is not None
    assert int(match[1]) == len(shown)
    assert int(match[2]) == len(full)
    next_line = int(match[3]) + 1
    assert f"use offset={next_line} to continue" in notice
    assert shown.endswith(f"{next_line - 1:05d} " + "x" * 94)


async def test_read_truncation_counts_only_the_requested_range(policy: SandboxPolicy) -> None:
    (policy.workspace / "big.txt").write_text(("y" * 1000 + "\n") * 3000)
    text = await _read(policy, "big.txt", offset=101, limit=60)
    full = "\n".join(f"{i:6d}\t" + "y" * 1000 for i in range(101, 161))
    match = re.search(r"showing (\d+) of (\d+) characters \(lines 101-(\d+) of lines 101-160", text)
    assert match is not None
    assert int(match[2]) == len(full)


async def test_read_of_a_huge_file_with_small_limit_is_bounded_in_memory(policy: SandboxPolicy) -> None:
    path = policy.workspace / "huge.log"
    with path.open("wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(1, 2001)))  # text beyond the 8 KiB read judges
        f.truncate(200 * 1024 * 1024)  # sparse: instant to create, 200 MB to read
    tracemalloc.start()
    try:
        text = await _read(policy, path, limit=5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.split("\n") == [f"{i:6d}\tline {i}" for i in range(1, 6)]
    assert peak < 4 * 1024 * 1024


async def test_read_of_a_huge_single_line_keeps_memory_bounded(policy: SandboxPolicy) -> None:
    path = policy.workspace / "one-line.bin"
    with path.open("wb") as f:
        f.write(b"x" * 8192)  # text where read judges the file type, then NULs: no newline at all
        f.truncate(64 * 1024 * 1024)
    tracemalloc.start()
    try:
        text = await _read(policy, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.startswith("     1\t" + "x" * 2000 + " [... line cut")
    assert f"{64 * 1024 * 1024} bytes" in text
    assert peak < 4 * 1024 * 1024


async def test_read_stops_scanning_an_endless_line_and_says_so(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /proc/self/pagemap or a huge binary: a line without end must not keep read busy for minutes.
    monkeypatch.setattr(read, "_SCAN_BUDGET_BYTES", 1024 * 1024)
    (policy.workspace / "a.bin").write_bytes(b"first\n" + b"x" * (3 * 1024 * 1024) + b"\nlast\n")
    text = await _read(policy, "a.bin")
    lines = text.split("\n")
    assert lines[0] == "     1\tfirst"
    assert lines[1].startswith("     2\t" + "x" * 2000 + " [... line cut")
    assert "reading stopped" in text and "bash" in text
    assert "last" not in text


async def test_read_gives_up_skipping_to_an_offset_beyond_the_scan_budget(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read, "_SCAN_BUDGET_BYTES", 1024 * 1024)
    (policy.workspace / "a.txt").write_text("line\n" * 1_000_000)
    with pytest.raises(ToolError, match="offset") as info:
        await _read(policy, "a.txt", offset=900_000)
    assert "bash" in str(info.value)


async def test_read_stops_at_the_time_limit_with_what_it_has(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read, "_READ_SECONDS", 0.0)
    monkeypatch.setattr(read, "_CHUNK_BYTES", CHUNK_BYTES)
    (policy.workspace / "a.txt").write_bytes(b"x" * (3 * CHUNK_BYTES))
    text = await _read(policy, "a.txt")
    assert text.startswith("     1\t" + "x" * 2000 + " [... line cut")
    assert "reading stopped" in text


async def test_read_of_an_empty_file_says_it_is_empty(policy: SandboxPolicy) -> None:
    (policy.workspace / "empty.txt").write_bytes(b"")
    assert "file is empty" in await _read(policy, "empty.txt")


async def test_read_offset_past_the_end_reports_the_line_count(policy: SandboxPolicy) -> None:
    (policy.workspace / "a.txt").write_text("1\n2\n3\n")
    for offset in (4, 50):
        text = await _read(policy, "a.txt", offset=offset)
        assert f"offset {offset} is past the end" in text
        assert "has 3 lines" in text


async def test_read_of_a_directory_is_a_clear_error(policy: SandboxPolicy) -> None:
    with deadline(1), pytest.raises(ToolError, match=r"not a regular file: .* is a directory"):
        await read_file(policy, ReadArgs(file_path=str(policy.workspace)))


async def test_read_of_a_fifo_is_refused_without_blocking(policy: SandboxPolicy) -> None:
    os.mkfifo(policy.workspace / "pipe")
    with deadline(1), pytest.raises(ToolError, match="FIFO"):
        await read_file(policy, ReadArgs(file_path="pipe"))


async def test_read_of_a_character_device_is_refused(policy: SandboxPolicy) -> None:
    with deadline(1), pytest.raises(ToolError, match="character device"):
        await read_file(policy, ReadArgs(file_path="/dev/zero"))


async def test_read_of_a_symlink_to_a_device_is_refused(policy: SandboxPolicy) -> None:
    (policy.workspace / "zero").symlink_to("/dev/zero")
    with deadline(1), pytest.raises(ToolError, match="character device"):
        await read_file(policy, ReadArgs(file_path="zero"))


async def test_read_of_a_missing_file_is_a_clear_error(policy: SandboxPolicy) -> None:
    with deadline(1), pytest.raises(ToolError, match="file does not exist"):
        await read_file(policy, ReadArgs(file_path="nope.txt"))


async def test_read_of_a_sizeless_proc_file_works(policy: SandboxPolicy) -> None:
    text = await _read(policy, "/proc/self/status")
    assert text.startswith("     1\tName:")
    assert "Pid:" in text


async def test_read_follows_symlinks(policy: SandboxPolicy, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("seen\n")
    (policy.workspace / "link").symlink_to(tmp_path / "outside.txt")
    assert await _read(policy, "link") == "     1\tseen"


async def test_read_expands_a_leading_tilde_to_the_user_home(
    policy: SandboxPolicy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_home = tmp_path / "user"
    user_home.mkdir()
    (user_home / "notes.txt").write_text("hi\n")
    monkeypatch.setenv("HOME", str(user_home))
    assert await _read(policy, "~/notes.txt") == "     1\thi"


@pytest.mark.parametrize("bad", ["a\0b", "/" + "x" * 5000])
async def test_read_rejects_nul_bytes_and_overlong_paths(policy: SandboxPolicy, bad: str) -> None:
    with pytest.raises(InvalidArgumentsError, match=r"NUL|too long"):
        await read_file(policy, ReadArgs(file_path=bad))
