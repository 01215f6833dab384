"""The write and edit tools called directly on a tmp_path sandbox: contracts, bounds and data safety."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import anyio
import pytest
from mcp import types

from omega_mcp.builtin import write
from omega_mcp.builtin.schemas import EditArgs, WriteArgs
from omega_mcp.builtin.write import edit_file, write_file
from omega_mcp.errors import InvalidArgumentsError, ToolError
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


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

    monkeypatch.setattr(write.os, "fsync", full_disk)
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
    with deadline(1), pytest.raises(ToolError, match="FIFO"):
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
        f.truncate(write.MAX_EDIT_BYTES + 1)
    with pytest.raises(ToolError, match="edit limit"):
        await _edit(policy, target, "a", "b")
    assert target.stat().st_size == write.MAX_EDIT_BYTES + 1


async def test_edit_failure_while_writing_keeps_the_old_file(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = policy.workspace / "keep.txt"
    target.write_text("value = 1\n")

    def broken_rename(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(write.os, "rename", broken_rename)
    with pytest.raises(ToolError, match="not changed"):
        await _edit(policy, target, "1", "2")
    assert target.read_text() == "value = 1\n"
    assert [p.name for p in policy.workspace.iterdir()] == ["keep.txt"]


async def test_concurrent_edits_of_one_file_all_land(policy: SandboxPolicy) -> None:
    target = policy.workspace / "shared.txt"
    target.write_text("".join(f"token{i}\n" for i in range(12)))

    async def one(i: int) -> None:
        await _edit(policy, target, f"token{i}\n", f"done{i}\n")

    with deadline(20):
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
    assert target.read_text() == "".join(f"done{i}\n" for i in range(12))


async def test_edit_of_a_file_changed_while_editing_keeps_the_other_change(
    policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = policy.workspace / "racy.txt"
    target.write_text("x = 1\ny = 1\n")
    real_apply = write.apply_edit
    calls: list[int] = []

    def apply_while_someone_writes(raw: bytes, args: EditArgs, path: Path) -> tuple[bytes, str]:
        calls.append(1)
        if len(calls) == 1:  # another process rewrites the file between our read and our rename
            target.write_text("x = 1\ny = 1\nz = 1\n")
        return real_apply(raw, args, path)

    monkeypatch.setattr(write, "apply_edit", apply_while_someone_writes)
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


@pytest.mark.parametrize("place", ["servers/memory/.npmrc", "servers/git/node_modules/x.js", "sessions/0badc0de.jsonl"])
async def test_what_omega_loads_later_from_its_home_is_never_written(policy: SandboxPolicy, place: str):
    """A confined server's directory and the saved agent sessions are under `$OMEGA_HOME`, which the
    file tools may otherwise write: a planted `.npmrc` would run at the server's next start, a planted
    session line would reach the model on `--resume`."""
    target = policy.home / place
    target.parent.mkdir(parents=True)
    with pytest.raises(ToolError, match="denied"):
        await _write(policy, target, "planted")
    assert not target.exists()
