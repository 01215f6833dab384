"""Adversarial containment of the file tools: `..`, prefixes, symlinks, hard links, the blocklist, races.

Every write test runs twice: with openat2 (RESOLVE_BENEATH) and with the fallback component walk.
A denied case asserts `denied` in the message and that nothing was written anywhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from omega_mcp.builtin import write
from omega_mcp.builtin.read import read_file
from omega_mcp.builtin.schemas import EditArgs, ReadArgs, WriteArgs
from omega_mcp.builtin.write import edit_file, write_file
from omega_mcp.errors import PathDeniedError, ToolError
from omega_mcp.sandbox import beneath
from omega_mcp.sandbox.policy import SandboxPolicy

MODES = ("sandbox", "rx", "rwx")


@pytest.fixture(params=["openat2", "walk"], autouse=True)
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2":
        if not beneath.have_openat2():
            pytest.skip("openat2 is not available here")
        monkeypatch.setattr(beneath, "_openat2_usable", True)
    else:
        monkeypatch.setattr(beneath, "_openat2_usable", False)
    return str(request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("original")
    return d


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under root (files with content), to prove nothing changed."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return out


def _exists(path: str) -> bool:
    return os.path.lexists(path)


async def _denied_write(policy: SandboxPolicy, file_path: str | Path, *, watch: Path) -> str:
    before = _tree(watch)
    with pytest.raises(PathDeniedError) as info:
        await write_file(policy, WriteArgs(file_path=str(file_path), content="pwned"))
    message = str(info.value)
    assert "denied" in message
    assert _tree(watch) == before
    return message


async def _write(policy: SandboxPolicy, file_path: str | Path, content: str = "new") -> None:
    result = await write_file(policy, WriteArgs(file_path=str(file_path), content=content))
    assert not result.is_error


# ---------------------------------------------------------------- lexical escapes


async def test_dotdot_escape_from_the_workspace_is_denied(policy: SandboxPolicy, tmp_path: Path, outside: Path) -> None:
    message = await _denied_write(policy, "../outside/pwn.txt", watch=tmp_path)
    assert str(outside / "pwn.txt") in message
    assert str(policy.workspace) in message  # names the allowed roots


async def test_deep_dotdot_escape_is_denied(policy: SandboxPolicy, tmp_path: Path, outside: Path) -> None:
    await _denied_write(policy, "a/b/../../../../" + str(outside)[1:] + "/pwn.txt", watch=tmp_path)


async def test_absolute_path_outside_the_roots_is_denied(policy: SandboxPolicy, tmp_path: Path, outside: Path) -> None:
    await _denied_write(policy, outside / "pwn.txt", watch=tmp_path)


async def test_sibling_with_the_workspace_as_prefix_is_denied(policy: SandboxPolicy, tmp_path: Path) -> None:
    evil = tmp_path / "ws-evil"
    evil.mkdir()
    await _denied_write(policy, evil / "pwn.txt", watch=tmp_path)
    await _denied_write(policy, str(policy.workspace) + "-evil/pwn.txt", watch=tmp_path)


# ---------------------------------------------------------------- symlinks


async def test_write_to_a_symlink_to_an_outside_file_replaces_the_link_only(
    policy: SandboxPolicy, outside: Path
) -> None:
    link = policy.workspace / "link.txt"
    link.symlink_to(outside / "secret.txt")
    await _write(policy, link, "new")
    assert (outside / "secret.txt").read_text() == "original"
    assert not link.is_symlink()
    assert link.read_text() == "new"


async def test_edit_through_a_symlink_to_an_outside_file_is_refused(policy: SandboxPolicy, outside: Path) -> None:
    (policy.workspace / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        await edit_file(policy, EditArgs(file_path="link.txt", old_string="original", new_string="pwned"))
    assert (outside / "secret.txt").read_text() == "original"


async def test_write_through_a_symlinked_directory_to_outside_is_denied(
    policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    (policy.workspace / "dir").symlink_to(outside)
    await _denied_write(policy, "dir/pwn.txt", watch=tmp_path)
    await _denied_write(policy, "dir/new/sub/pwn.txt", watch=tmp_path)


async def test_relative_symlinked_directory_escaping_the_root_is_denied(
    policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    (policy.workspace / "dir").symlink_to("../outside")
    await _denied_write(policy, "dir/pwn.txt", watch=tmp_path)


async def test_symlinked_parent_directory_deeper_in_the_path_is_denied(
    policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    (policy.workspace / "a").mkdir()
    (policy.workspace / "a" / "b").symlink_to(outside)
    await _denied_write(policy, "a/b/c/d.txt", watch=tmp_path)


async def test_dangling_symlink_to_outside_is_replaced_not_followed(policy: SandboxPolicy, outside: Path) -> None:
    link = policy.workspace / "dangling.txt"
    link.symlink_to(outside / "created-by-attacker.txt")
    await _write(policy, link, "new")
    assert not (outside / "created-by-attacker.txt").exists()
    assert link.read_text() == "new"


async def test_dangling_symlinked_directory_to_outside_is_denied(
    policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    (policy.workspace / "gone").symlink_to(outside / "missing-dir")
    await _denied_write(policy, "gone/pwn.txt", watch=tmp_path)
    assert not (outside / "missing-dir").exists()


async def test_symlinked_directory_staying_inside_the_root_is_followed_with_openat2(
    policy: SandboxPolicy, resolver: str
) -> None:
    (policy.workspace / "real").mkdir()
    (policy.workspace / "alias").symlink_to("real")
    if resolver == "walk":  # the fallback refuses every symlinked component: safe, if stricter
        await _denied_write(policy, "alias/x.txt", watch=policy.workspace)
    else:
        await _write(policy, "alias/x.txt", "ok")
        assert (policy.workspace / "real" / "x.txt").read_text() == "ok"


async def test_magic_proc_links_are_not_followed(policy: SandboxPolicy, tmp_path: Path) -> None:
    (policy.workspace / "cwd").symlink_to("/proc/self/cwd")
    await _denied_write(policy, "cwd/pwn.txt", watch=tmp_path)


# ---------------------------------------------------------------- hard links


async def test_write_to_a_hard_link_of_an_outside_file_leaves_it_unchanged(
    policy: SandboxPolicy, outside: Path
) -> None:
    os.link(outside / "secret.txt", policy.workspace / "hl.txt")
    await _write(policy, "hl.txt", "new")
    assert (outside / "secret.txt").read_text() == "original"
    assert (policy.workspace / "hl.txt").read_text() == "new"


async def test_edit_of_a_hard_link_of_an_outside_file_leaves_it_unchanged(policy: SandboxPolicy, outside: Path) -> None:
    os.link(outside / "secret.txt", policy.workspace / "hl.txt")
    await edit_file(policy, EditArgs(file_path="hl.txt", old_string="original", new_string="edited"))
    assert (outside / "secret.txt").read_text() == "original"
    assert (policy.workspace / "hl.txt").read_text() == "edited"


# ---------------------------------------------------------------- the blocklist


@pytest.fixture
def pwn_name() -> Iterator[str]:
    """A unique file name for system-directory probes, removed afterwards should a regression create it."""
    name = f"omega-pwn-{os.getpid()}-{time.monotonic_ns()}"
    yield name
    for leftover in (f"/etc/{name}", f"/usr/local/{name}", f"/dev/{name}"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)
    if os.path.isfile("/dev/sdz9") and not os.path.islink("/dev/sdz9"):  # a regular file there would be ours
        os.unlink("/dev/sdz9")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", ["/etc/{}", "/usr/local/{}", "/proc/self/{}", "/dev/{}", "/dev/sdz9"])
async def test_system_paths_are_denied_in_every_mode(
    policy: SandboxPolicy, mode: str, target: str, pwn_name: str
) -> None:
    path = target.format(pwn_name)
    with pytest.raises(PathDeniedError, match="denied"):
        await write_file(replace(policy, mode=mode), WriteArgs(file_path=path, content="x"))  # pyright: ignore[reportArgumentType]
    assert not _exists(path)


@pytest.mark.parametrize("mode", MODES)
async def test_dev_null_is_writable_in_every_mode(policy: SandboxPolicy, mode: str) -> None:
    await _write(replace(policy, mode=mode), "/dev/null", "discard me")  # pyright: ignore[reportArgumentType]
    assert _exists("/dev/null")


def _protected(policy: SandboxPolicy, tmp_path: Path) -> SandboxPolicy:
    config = tmp_path / "cfg" / "omega.toml"
    config.parent.mkdir()
    config.write_text("[sandbox]\n")
    (policy.home / "servers.toml").write_text("[servers]\n")
    (policy.home / "token").write_text("s3cret-token\n")
    (policy.state_dir / "sessions").mkdir(parents=True)
    return replace(policy, config_path=config, write_roots=(config.parent,))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("which", ["config", "servers", "token", "state_new", "state_deep"])
async def test_omega_config_and_state_are_denied_in_every_mode(
    policy: SandboxPolicy, tmp_path: Path, mode: str, which: str
) -> None:
    pol = replace(_protected(policy, tmp_path), mode=mode)  # pyright: ignore[reportArgumentType]
    assert pol.config_path is not None
    target = {
        "config": pol.config_path,
        "servers": pol.home / "servers.toml",
        "token": pol.token_file,
        "state_new": pol.state_dir / "new.json",
        "state_deep": pol.state_dir / "x" / "y" / "z.json",
    }[which]
    await _denied_write(pol, target, watch=tmp_path)


@pytest.mark.parametrize("mode", MODES)
async def test_omega_config_is_denied_through_a_dotdot_path(policy: SandboxPolicy, tmp_path: Path, mode: str) -> None:
    pol = replace(_protected(policy, tmp_path), mode=mode)  # pyright: ignore[reportArgumentType]
    await _denied_write(pol, "../home/state/../servers.toml", watch=tmp_path)
    await _denied_write(pol, str(pol.home) + "/./state/sessions/../x.json", watch=tmp_path)


@pytest.mark.parametrize("mode", MODES)
async def test_omega_config_behind_a_symlink_or_hard_link_is_untouched(
    policy: SandboxPolicy, tmp_path: Path, mode: str
) -> None:
    pol = replace(_protected(policy, tmp_path), mode=mode)  # pyright: ignore[reportArgumentType]
    servers = pol.home / "servers.toml"
    (pol.workspace / "sym.toml").symlink_to(servers)
    os.link(servers, pol.workspace / "hard.toml")
    with pytest.raises(ToolError, match="symbolic link"):
        await edit_file(pol, EditArgs(file_path="sym.toml", old_string="[servers", new_string="[evil"))
    await edit_file(pol, EditArgs(file_path="hard.toml", old_string="[servers", new_string="[evil"))
    await _write(pol, "sym.toml", "[servers.evil]\n")
    await _write(pol, "hard.toml", "[servers.evil]\n")
    assert servers.read_text() == "[servers]\n"


@pytest.mark.parametrize("mode", MODES)
async def test_omega_state_behind_a_symlinked_directory_is_denied(
    policy: SandboxPolicy, tmp_path: Path, mode: str
) -> None:
    pol = replace(_protected(policy, tmp_path), mode=mode)  # pyright: ignore[reportArgumentType]
    (pol.workspace / "h").symlink_to(pol.home)
    await _denied_write(pol, "h/servers.toml", watch=tmp_path)
    await _denied_write(pol, "h/state/new/dir/x.json", watch=tmp_path)


@pytest.mark.parametrize("mode", MODES)
async def test_a_config_file_inside_the_workspace_is_denied(policy: SandboxPolicy, tmp_path: Path, mode: str) -> None:
    config = policy.workspace / "servers.toml"
    config.write_text("[servers]\n")
    pol = replace(policy, mode=mode, config_path=config)  # pyright: ignore[reportArgumentType]
    await _denied_write(pol, "servers.toml", watch=tmp_path)
    with pytest.raises(PathDeniedError, match="denied"):
        await edit_file(pol, EditArgs(file_path="servers.toml", old_string="[servers]", new_string="[x]"))
    assert config.read_text() == "[servers]\n"


async def test_a_config_path_spelled_through_a_symlink_is_still_protected(
    policy: SandboxPolicy, tmp_path: Path
) -> None:
    (tmp_path / "ws-alias").symlink_to(policy.workspace)
    config = policy.workspace / "omega.toml"
    config.write_text("[sandbox]\n")
    pol = replace(policy, config_path=tmp_path / "ws-alias" / "omega.toml")
    await _denied_write(pol, "omega.toml", watch=tmp_path)


async def test_names_that_merely_start_like_protected_ones_are_writable(policy: SandboxPolicy, tmp_path: Path) -> None:
    pol = _protected(policy, tmp_path)
    pol = replace(pol, write_roots=(*pol.write_roots, pol.home))  # the file tools' own corner is the client's tree
    await _write(pol, pol.home / "servers.toml.bak")
    await _write(pol, pol.home / "state-notes" / "x.txt")
    assert (pol.home / "servers.toml").read_text() == "[servers]\n"


async def test_rwx_mode_writes_outside_the_roots(policy: SandboxPolicy, outside: Path) -> None:
    pol = replace(policy, mode="rwx")
    await _write(pol, outside / "new" / "file.txt", "ok")
    assert (outside / "new" / "file.txt").read_text() == "ok"


async def test_rwx_mode_follows_directory_symlinks_but_checks_the_real_location(
    policy: SandboxPolicy, tmp_path: Path, pwn_name: str
) -> None:
    pol = replace(_protected(policy, tmp_path), mode="rwx")
    (pol.workspace / "etc").symlink_to("/etc")
    await _denied_write(pol, f"etc/{pwn_name}", watch=tmp_path)
    assert not _exists(f"/etc/{pwn_name}")


# ---------------------------------------------------------------- reads


@pytest.mark.parametrize(
    "target",
    ["/proc/self/environ", "/proc/thread-self/environ", "/proc/{pid}/environ", "/proc/{pid}/task/{pid}/environ"],
)
async def test_reading_process_environ_is_denied(policy: SandboxPolicy, target: str) -> None:
    with pytest.raises(PathDeniedError, match="denied"):
        await read_file(policy, ReadArgs(file_path=target.format(pid=os.getpid())))


async def test_reading_environ_through_a_symlink_is_denied(policy: SandboxPolicy) -> None:
    (policy.workspace / "env").symlink_to("/proc/self/environ")
    (policy.workspace / "proc").symlink_to("/proc/self")
    for name in ("env", "proc/environ"):
        with pytest.raises(PathDeniedError, match="denied"):
            await read_file(policy, ReadArgs(file_path=name))


async def test_reading_the_token_is_denied_directly_and_through_links(policy: SandboxPolicy, tmp_path: Path) -> None:
    pol = _protected(policy, tmp_path)
    (pol.workspace / "sym").symlink_to(pol.token_file)
    os.link(pol.token_file, pol.workspace / "hard")
    for name in (str(pol.token_file), "sym", "hard", "../home/token"):
        with pytest.raises(PathDeniedError, match="denied"):
            await read_file(pol, ReadArgs(file_path=name))
    with pytest.raises(PathDeniedError, match="denied"):
        await edit_file(pol, EditArgs(file_path="hard", old_string="s3cret", new_string="x"))
    assert pol.token_file.read_text() == "s3cret-token\n"


async def test_other_files_next_to_the_token_stay_readable(policy: SandboxPolicy, tmp_path: Path) -> None:
    pol = _protected(policy, tmp_path)
    (pol.home / "notes.txt").write_text("mine\n")
    result = await read_file(pol, ReadArgs(file_path=str(pol.home / "notes.txt")))
    assert not result.is_error


# ---------------------------------------------------------------- the race


@pytest.fixture
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def skip_fsync(fd: int) -> None:  # containment, not durability, is under test
        pass

    monkeypatch.setattr(write.os, "fsync", skip_fsync)
    yield


async def test_swapping_a_directory_for_an_outside_symlink_never_writes_outside(
    policy: SandboxPolicy, outside: Path, no_fsync: None
) -> None:
    target_dir = policy.workspace / "d"
    parked = policy.workspace / "d.parked"
    target_dir.mkdir()
    stop = threading.Event()
    swaps = 0
    problems: list[OSError] = []

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            try:
                os.rename(target_dir, parked)
                os.symlink(outside, target_dir)
                os.unlink(target_dir)
                os.rename(parked, target_dir)
                swaps += 1
            except OSError as exc:  # the writer recreated `d` in the gap: drop it and put the parked one back
                problems.append(exc)
                with contextlib.suppress(OSError):
                    if target_dir.is_symlink():
                        target_dir.unlink()
                    elif target_dir.is_dir() and parked.is_dir():
                        shutil.rmtree(target_dir)
                    if parked.is_dir() and not target_dir.exists():
                        os.rename(parked, target_dir)

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    written = refused = 0
    deadline = time.monotonic() + 2.0
    try:
        for i in range(2000):
            if time.monotonic() > deadline:
                break
            try:
                await write_file(policy, WriteArgs(file_path=f"d/f{i}.txt", content="x"))
                written += 1
            except ToolError:
                refused += 1
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert _tree(outside) == {"secret.txt": b"original"}
    assert swaps > 0
    assert written + refused > 0


async def test_a_servers_toml_in_the_server_cwd_cannot_be_created_by_the_file_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # omega would load ./servers.toml on its next start: a model must not be able to plant one.
    from omega_mcp.config import Config

    cwd = tmp_path / "ws"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    config = Config(home=tmp_path / "home")
    policy = SandboxPolicy.from_settings(config.sandbox, config.place, workspace=cwd)
    await _denied_write(policy, "servers.toml", watch=tmp_path)
    assert not (cwd / "servers.toml").exists()


async def test_reading_omegas_state_files_is_denied_directly_and_through_a_symlink(
    policy: SandboxPolicy, tmp_path: Path
) -> None:
    pol = _protected(policy, tmp_path)
    secret = pol.state_dir / "sessions" / "s1.json"
    secret.write_text('{"grant": "x"}')
    (pol.workspace / "state-link").symlink_to(pol.state_dir)
    for name in (str(secret), "state-link/sessions/s1.json", "../home/state/sessions/s1.json"):
        with pytest.raises(PathDeniedError, match="state"):
            await read_file(pol, ReadArgs(file_path=name))


# ---------------------------------------------------------------- roots moved after start


async def test_a_write_root_swapped_for_a_symlink_after_start_is_not_followed(
    policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    # Sandboxed bash may write the tmp dir: it can rename a root lying there and leave a link to anywhere.
    root = policy.tmp_dir / "extra"
    root.mkdir()
    pol = replace(policy, write_roots=(root,))
    root.rename(policy.tmp_dir / "extra.old")
    root.symlink_to(outside)
    await _denied_write(pol, root / "pwn.txt", watch=tmp_path)
    await _denied_write(pol, root / "secret.txt", watch=tmp_path)
    await _denied_write(pol, outside / "pwn.txt", watch=tmp_path)


async def test_the_workspace_swapped_for_a_symlink_after_start_is_not_followed(
    policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    workspace = policy.tmp_dir / "project"
    workspace.mkdir()
    pol = replace(policy, workspace=workspace)
    workspace.rename(policy.tmp_dir / "project.old")
    workspace.symlink_to(outside)
    await _denied_write(pol, "pwn.txt", watch=tmp_path)
    with pytest.raises(PathDeniedError):
        await edit_file(pol, EditArgs(file_path="secret.txt", old_string="original", new_string="pwned"))
    assert (outside / "secret.txt").read_text() == "original"


async def test_a_missing_write_root_later_created_as_a_symlink_is_not_followed(
    policy: SandboxPolicy, tmp_path: Path, outside: Path
) -> None:
    root = policy.tmp_dir / "later"
    pol = replace(policy, write_roots=(root,))
    root.symlink_to(outside)
    await _denied_write(pol, root / "pwn.txt", watch=tmp_path)


async def test_a_write_root_that_is_a_symlink_at_start_is_followed(policy: SandboxPolicy, tmp_path: Path) -> None:
    real = tmp_path / "real-ws"
    real.mkdir()
    link = tmp_path / "link-ws"
    link.symlink_to(real)
    pol = replace(policy, workspace=link)
    await _write(pol, "a.txt")
    await _write(pol, real / "b.txt")
    assert (real / "a.txt").read_text() == "new" and (real / "b.txt").read_text() == "new"


async def test_a_missing_write_root_is_created_as_a_real_directory(policy: SandboxPolicy, tmp_path: Path) -> None:
    root = policy.tmp_dir / "new" / "root"
    pol = replace(policy, write_roots=(root,))
    await _write(pol, root / "a.txt")
    assert (root / "a.txt").read_text() == "new" and not root.is_symlink()
