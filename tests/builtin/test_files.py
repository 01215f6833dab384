"""The read/write/edit tools called directly on a tmp_path sandbox: contracts, bounds and data safety."""

from __future__ import annotations

import errno
import os
import re
import stat
import tracemalloc
from pathlib import Path

import anyio
import pytest
from mcp import types

from omega_mcp.builtin import files
from omega_mcp.builtin.files import edit_file, read_file, write_file
from omega_mcp.builtin.schemas import EditArgs, ReadArgs, WriteArgs
from omega_mcp.errors import InvalidArgumentsError, ToolError
from omega_mcp.sandbox.policy import SandboxPolicy


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def _read(policy: SandboxPolicy, file_path: str | Path, **kwargs: int) -> str:
    with anyio.fail_after(10):
        return _text(await read_file(policy, ReadArgs(file_path=str(file_path), **kwargs)))


async def _write(policy: SandboxPolicy, file_path: str | Path, content: str) -> str:
    return _text(await write_file(policy, WriteArgs(file_path=str(file_path), content=content)))


async def _edit(policy: SandboxPolicy, file_path: str | Path, old: str, new: str, *, replace_all: bool = False) -> str:
    args = EditArgs(file_path=str(file_path), old_string=old, new_string=new, replace_all=replace_all)
    return _text(await edit_file(policy, args))


def _umask() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError("no Umask line")


# ---------------------------------------------------------------- read


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


async def test_read_keeps_a_multibyte_character_split_across_chunks(policy: SandboxPolicy) -> None:
    first = b"a" * (files._CHUNK_BYTES - 2) + b"\n"  # line 2 starts one byte before the chunk boundary
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
        f.write(b"".join(b"line %d\n" % i for i in range(1, 11)))
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
        f.truncate(64 * 1024 * 1024)  # 64 MiB of NULs, no newline at all
    tracemalloc.start()
    try:
        text = await _read(policy, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.startswith("     1\t" + "\0" * 2000 + " [... line cut")
    assert f"{64 * 1024 * 1024} bytes" in text
    assert peak < 4 * 1024 * 1024


async def test_read_stops_scanning_an_endless_line_and_says_so(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /proc/self/pagemap or a huge binary: a line without end must not keep read busy for minutes.
    monkeypatch.setattr(files, "_SCAN_BUDGET_BYTES", 1024 * 1024)
    (policy.workspace / "a.bin").write_bytes(b"first\n" + b"\0" * (3 * 1024 * 1024) + b"\nlast\n")
    text = await _read(policy, "a.bin")
    lines = text.split("\n")
    assert lines[0] == "     1\tfirst"
    assert lines[1].startswith("     2\t" + "\0" * 2000 + " [... line cut")
    assert "reading stopped" in text and "bash" in text
    assert "last" not in text


async def test_read_gives_up_skipping_to_an_offset_beyond_the_scan_budget(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_SCAN_BUDGET_BYTES", 1024 * 1024)
    (policy.workspace / "a.txt").write_text("line\n" * 1_000_000)
    with pytest.raises(ToolError, match="offset") as info:
        await _read(policy, "a.txt", offset=900_000)
    assert "bash" in str(info.value)


async def test_read_stops_at_the_time_limit_with_what_it_has(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_READ_SECONDS", 0.0)
    (policy.workspace / "a.bin").write_bytes(b"\0" * (3 * files._CHUNK_BYTES))
    text = await _read(policy, "a.bin")
    assert text.startswith("     1\t" + "\0" * 2000 + " [... line cut")
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
    with anyio.fail_after(1), pytest.raises(ToolError, match=r"not a regular file: .* is a directory"):
        await read_file(policy, ReadArgs(file_path=str(policy.workspace)))


async def test_read_of_a_fifo_is_refused_without_blocking(policy: SandboxPolicy) -> None:
    os.mkfifo(policy.workspace / "pipe")
    with anyio.fail_after(1), pytest.raises(ToolError, match="FIFO"):
        await read_file(policy, ReadArgs(file_path="pipe"))


async def test_read_of_a_character_device_is_refused(policy: SandboxPolicy) -> None:
    with anyio.fail_after(1), pytest.raises(ToolError, match="character device"):
        await read_file(policy, ReadArgs(file_path="/dev/zero"))


async def test_read_of_a_symlink_to_a_device_is_refused(policy: SandboxPolicy) -> None:
    (policy.workspace / "zero").symlink_to("/dev/zero")
    with anyio.fail_after(1), pytest.raises(ToolError, match="character device"):
        await read_file(policy, ReadArgs(file_path="zero"))


async def test_read_of_a_missing_file_is_a_clear_error(policy: SandboxPolicy) -> None:
    with anyio.fail_after(1), pytest.raises(ToolError, match="file does not exist"):
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


# ---------------------------------------------------------------- write


async def test_write_creates_parent_directories_and_reports_bytes(policy: SandboxPolicy) -> None:
    text = await _write(policy, "deep/er/new.txt", "héllo\n")
    target = policy.workspace / "deep" / "er" / "new.txt"
    assert target.read_text() == "héllo\n"
    assert text == f"Wrote 7 bytes to {target} (created)"


async def test_write_replaces_an_existing_file_and_says_updated(policy: SandboxPolicy) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("old content that is longer")
    text = await _write(policy, target, "new")
    assert target.read_text() == "new"
    assert text == f"Wrote 3 bytes to {target} (updated)"


async def test_write_keeps_the_mode_of_an_existing_file(policy: SandboxPolicy) -> None:
    target = policy.workspace / "run.sh"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    await _write(policy, target, "#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


async def test_write_drops_set_id_bits_of_the_replaced_file(policy: SandboxPolicy) -> None:
    target = policy.workspace / "tool"
    target.write_text("old")
    target.chmod(0o6755)
    await _write(policy, target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


async def test_write_gives_new_files_the_umask_default_mode(policy: SandboxPolicy) -> None:
    await _write(policy, "fresh.txt", "x")
    assert stat.S_IMODE((policy.workspace / "fresh.txt").stat().st_mode) == 0o666 & ~_umask()


async def test_write_leaves_no_temporary_files(policy: SandboxPolicy) -> None:
    await _write(policy, "a.txt", "one")
    await _write(policy, "a.txt", "two")
    assert sorted(p.name for p in policy.workspace.iterdir()) == ["a.txt"]


async def test_write_failure_keeps_the_old_file_and_removes_the_temp(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = policy.workspace / "keep.txt"
    target.write_text("precious")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    with pytest.raises(ToolError, match="disk is full"):
        await _write(policy, target, "replacement")
    assert target.read_text() == "precious"
    assert [p.name for p in policy.workspace.iterdir()] == ["keep.txt"]


async def test_write_to_a_directory_is_refused(policy: SandboxPolicy) -> None:
    (policy.workspace / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await _write(policy, "d", "x")
    assert (policy.workspace / "d").is_dir()


async def test_write_to_a_fifo_is_refused_without_blocking(policy: SandboxPolicy) -> None:
    os.mkfifo(policy.workspace / "pipe")
    with anyio.fail_after(1), pytest.raises(ToolError, match="FIFO"):
        await _write(policy, "pipe", "x")
    assert stat.S_ISFIFO((policy.workspace / "pipe").lstat().st_mode)


async def test_write_with_a_lone_surrogate_is_an_invalid_argument(policy: SandboxPolicy) -> None:
    with pytest.raises(InvalidArgumentsError, match="surrogate"):
        await _write(policy, "a.txt", "bad \ud800")
    assert not (policy.workspace / "a.txt").exists()


async def test_write_and_edit_with_an_overlong_file_name_are_clear_errors(policy: SandboxPolicy) -> None:
    with pytest.raises(ToolError, match="longer than 255 bytes"):
        await _write(policy, "n" * 300, "x")
    with pytest.raises(ToolError, match="longer than 255 bytes"):
        await _edit(policy, "n" * 300, "a", "b")
    assert list(policy.workspace.iterdir()) == []


async def test_write_below_a_regular_file_is_a_clear_error(policy: SandboxPolicy) -> None:
    (policy.workspace / "file").write_text("keep")
    with pytest.raises(ToolError, match="not a directory"):
        await _write(policy, "file/child.txt", "x")
    assert (policy.workspace / "file").read_text() == "keep"


async def test_write_of_empty_content_creates_an_empty_file(policy: SandboxPolicy) -> None:
    assert "Wrote 0 bytes" in await _write(policy, "empty.txt", "")
    assert (policy.workspace / "empty.txt").read_bytes() == b""


async def test_write_replaces_a_hard_link_without_touching_the_other_name(policy: SandboxPolicy) -> None:
    original = policy.workspace / "original.txt"
    original.write_text("shared")
    os.link(original, policy.workspace / "alias.txt")
    await _write(policy, "alias.txt", "changed")
    assert original.read_text() == "shared"
    assert (policy.workspace / "alias.txt").read_text() == "changed"


# ---------------------------------------------------------------- edit


async def test_edit_replaces_the_first_occurrence_and_reports_the_count(policy: SandboxPolicy) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("x = 1\nx = 1\nx = 1\n")
    text = await _edit(policy, target, "x = 1", "x = 2")
    assert target.read_text() == "x = 2\nx = 1\nx = 1\n"
    assert text.startswith(f"Replaced 1 of 3 occurrences in {target}")


async def test_edit_replace_all_replaces_every_occurrence(policy: SandboxPolicy) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("foo bar foo baz foo")
    text = await _edit(policy, target, "foo", "qux", replace_all=True)
    assert target.read_text() == "qux bar qux baz qux"
    assert text == f"Replaced all 3 occurrences in {target}"


async def test_edit_of_a_unique_string_reports_one_occurrence(policy: SandboxPolicy) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("hello world")
    assert await _edit(policy, target, "world", "there") == f"Replaced 1 of 1 occurrence in {target}"
    assert target.read_text() == "hello there"


@pytest.mark.parametrize("replacement", ["$&", "\\1", "\\g<0>", "$1 and \\\\"])
async def test_edit_inserts_the_replacement_literally(policy: SandboxPolicy, replacement: str) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("(abc) (abc)")
    await _edit(policy, target, "(abc)", replacement, replace_all=True)
    assert target.read_text() == f"{replacement} {replacement}"


async def test_edit_keeps_crlf_line_endings(policy: SandboxPolicy) -> None:
    target = policy.workspace / "win.txt"
    target.write_bytes(b"first\r\nsecond\r\nthird\r\n")
    await _edit(policy, target, "first\nsecond", "one\ntwo\nthree")
    assert target.read_bytes() == b"one\r\ntwo\r\nthree\r\nthird\r\n"


async def test_edit_keeps_a_utf8_bom(policy: SandboxPolicy) -> None:
    target = policy.workspace / "bom.txt"
    target.write_bytes(b"\xef\xbb\xbfname = old\n")
    await _edit(policy, target, "old", "new")
    assert target.read_bytes() == b"\xef\xbb\xbfname = new\n"


async def test_edit_never_rewrites_undecodable_bytes(policy: SandboxPolicy) -> None:
    target = policy.workspace / "mixed.bin"
    target.write_bytes(b"\xff\xfe head \x80\x81 value=1 tail \xc3(\n")
    await _edit(policy, target, "value=1", "value=2")
    assert target.read_bytes() == b"\xff\xfe head \x80\x81 value=2 tail \xc3(\n"


async def test_edit_keeps_the_file_mode(policy: SandboxPolicy) -> None:
    target = policy.workspace / "run.sh"
    target.write_text("echo a\n")
    target.chmod(0o750)
    await _edit(policy, target, "a", "b")
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.read_text() == "echo b\n"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [("", "x", "must not be empty"), ("same", "same", "identical")],
)
async def test_edit_rejects_empty_or_identical_strings(policy: SandboxPolicy, old: str, new: str, message: str) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("same text")
    with pytest.raises(InvalidArgumentsError, match=message):
        await _edit(policy, target, old, new)
    assert target.read_text() == "same text"


async def test_edit_of_a_missing_file_is_an_error(policy: SandboxPolicy) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await _edit(policy, "missing.txt", "a", "b")
    assert not (policy.workspace / "missing.txt").exists()


async def test_edit_with_old_string_not_found_leaves_the_file_unchanged(policy: SandboxPolicy) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("def f():\n    return 1\n")
    with pytest.raises(ToolError, match="not found") as info:
        await _edit(policy, target, "return 2", "return 3")
    assert "unchanged" in str(info.value)
    assert target.read_text() == "def f():\n    return 1\n"


async def test_edit_not_found_hints_at_a_whitespace_only_difference(policy: SandboxPolicy) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("def f():\n\treturn 1\n")
    with pytest.raises(ToolError, match="whitespace is ignored"):
        await _edit(policy, target, "def f():\n    return 1", "x")
    assert target.read_text() == "def f():\n\treturn 1\n"


async def test_edit_not_found_hints_at_a_line_ending_difference(policy: SandboxPolicy) -> None:
    target = policy.workspace / "a.txt"
    target.write_text("one\ntwo\n")
    with pytest.raises(ToolError, match="line endings"):
        await _edit(policy, target, "one\r\ntwo", "x")
    assert target.read_text() == "one\ntwo\n"


async def test_edit_refuses_a_symbolic_link(policy: SandboxPolicy) -> None:
    real = policy.workspace / "real.txt"
    real.write_text("abc")
    (policy.workspace / "link.txt").symlink_to(real)
    with pytest.raises(ToolError, match="symbolic link"):
        await _edit(policy, "link.txt", "abc", "xyz")
    assert real.read_text() == "abc"
    assert (policy.workspace / "link.txt").is_symlink()


async def test_edit_refuses_files_over_the_size_limit(policy: SandboxPolicy) -> None:
    target = policy.workspace / "big.bin"
    with target.open("wb") as f:
        f.truncate(files.MAX_EDIT_BYTES + 1)
    with pytest.raises(ToolError, match="edit limit"):
        await _edit(policy, target, "a", "b")
    assert target.stat().st_size == files.MAX_EDIT_BYTES + 1


async def test_edit_failure_while_writing_keeps_the_old_file(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = policy.workspace / "keep.txt"
    target.write_text("value = 1\n")

    def broken_rename(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files.os, "rename", broken_rename)
    with pytest.raises(ToolError, match="not changed"):
        await _edit(policy, target, "1", "2")
    assert target.read_text() == "value = 1\n"
    assert [p.name for p in policy.workspace.iterdir()] == ["keep.txt"]


async def test_concurrent_edits_of_one_file_all_land(policy: SandboxPolicy) -> None:
    target = policy.workspace / "shared.txt"
    target.write_text("".join(f"token{i}\n" for i in range(12)))

    async def one(i: int) -> None:
        await _edit(policy, target, f"token{i}\n", f"done{i}\n")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
    assert target.read_text() == "".join(f"done{i}\n" for i in range(12))


async def test_edit_of_a_file_changed_while_editing_keeps_the_other_change(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = policy.workspace / "racy.txt"
    target.write_text("x = 1\ny = 1\n")
    real_apply = files.apply_edit
    calls: list[int] = []

    def apply_while_someone_writes(raw: bytes, args: EditArgs, path: Path) -> tuple[bytes, str]:
        calls.append(1)
        if len(calls) == 1:  # another process rewrites the file between our read and our rename
            target.write_text("x = 1\ny = 1\nz = 1\n")
        return real_apply(raw, args, path)

    monkeypatch.setattr(files, "apply_edit", apply_while_someone_writes)
    await _edit(policy, target, "x = 1", "x = 2")
    assert target.read_text() == "x = 2\ny = 1\nz = 1\n"


async def test_write_to_a_path_ending_in_a_slash_is_refused(policy: SandboxPolicy) -> None:
    # `notes/` names a directory: creating a file called `notes` is not what was asked for.
    with pytest.raises(InvalidArgumentsError, match="directory"):
        await _write(policy, "notes/", "text")
    assert not (policy.workspace / "notes").exists()


async def test_write_to_a_symlink_to_a_directory_is_refused_and_keeps_the_link(policy: SandboxPolicy) -> None:
    (policy.workspace / "real").mkdir()
    (policy.workspace / "link").symlink_to("real")
    with pytest.raises(ToolError, match="directory"):
        await _write(policy, "link", "text")
    assert (policy.workspace / "link").is_symlink()
