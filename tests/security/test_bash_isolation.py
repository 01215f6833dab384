"""The trust boundary around bash: no network in sandbox mode, no host UNIX sockets, no secrets.

Each command runs as the bash tool runs it (through the bash zygote, `launch_support`: new session,
stdin /dev/null, stderr into stdout). Servers the tests start run on the host, outside bash's namespaces; sockets
meant to be "outside the write roots" live in a directory under /var/tmp, which no policy here
makes writable (tmp_path is under /tmp, so it is not used for them).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import launch_support
from omega_mcp.builtin.read import read_file
from omega_mcp.builtin.schemas import ReadArgs
from omega_mcp.config import load_config
from omega_mcp.errors import ConfigError, PathDeniedError
from omega_mcp.sandbox import probe
from omega_mcp.sandbox.launch import bash_launch, describe_sandbox
from omega_mcp.sandbox.policy import SandboxPolicy
from waits import deadline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux-only")

_BOUND_SECONDS = 20.0


@pytest.fixture(autouse=True)
def _fresh_probe() -> Iterator[None]:
    probe.clear_cache()
    yield
    probe.clear_cache()


def _policy(tmp_path: Path, **changes: Any) -> SandboxPolicy:
    for name in ("home", "ws", "tmp"):
        (tmp_path / name).mkdir(exist_ok=True)
    base = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=tmp_path / "ws", tmp_dir=tmp_path / "tmp")
    return replace(base, **changes)


def _output(policy: SandboxPolicy, command: str) -> str:
    """stdout+stderr of `command`, run like the bash tool (its process group killed afterwards)."""
    return launch_support.output(policy, command)


def _python(code: str) -> str:
    return f"{shlex.quote(sys.executable)} -I -S -c {shlex.quote(code)}"


def _connect_unix(address: str) -> str:
    """A command that connects to a UNIX socket (a leading NUL: abstract) and says `connected` or why not."""
    code = (
        "import socket\ns = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({address!r})\n    print('connected')\n"
        "except OSError as e:\n    print('refused', e)\n"
    )
    return _python(code)


@contextlib.contextmanager
def _unix_listener(address: str) -> Iterator[socket.socket]:
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(address)
        listener.listen(4)
        yield listener


@pytest.fixture
def outside_dir() -> Iterator[Path]:
    """A directory outside every write root of `_policy` (not under /tmp, not in the workspace)."""
    path = Path(tempfile.mkdtemp(prefix="omega-isolation-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _host_address() -> str:
    """A non-loopback IPv4 address of this host (what bash would reach the host or the world by)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe_socket:
        try:
            probe_socket.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            pytest.skip("this host has no IPv4 route")
        address = probe_socket.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this host has no non-loopback IPv4 address")
    return address


# --- network: sandbox mode reaches nothing outside bash's own loopback -------------------------


def test_udp_to_a_host_server_does_not_arrive_in_sandbox_mode(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(1.0)
        port = server.getsockname()[1]
        out = _output(_policy(tmp_path), f"echo leaked > /dev/udp/127.0.0.1/{port}; echo sent=$?")
        assert "sent=" in out, out
        with pytest.raises(TimeoutError):
            server.recvfrom(100)


def test_tcp_to_a_host_listener_on_its_real_address_is_refused_in_sandbox_mode(tmp_path: Path) -> None:
    address = _host_address()
    with socket.socket() as listener:
        listener.bind((address, 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        out = _output(_policy(tmp_path), f"exec 3<>/dev/tcp/{address}/{port} && echo connected || echo refused")
    assert "refused" in out
    assert "connected" not in out


def test_icmp_to_the_host_gets_no_reply_in_sandbox_mode(tmp_path: Path) -> None:
    address = _host_address()
    code = f"""
import socket
echo = bytes([8, 0, 0xF7, 0xFF, 0, 0, 0, 0])  # type 8 (echo request), checksum precomputed
for kind in (socket.SOCK_RAW, socket.SOCK_DGRAM):
    try:
        s = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
        s.settimeout(1)
        s.sendto(echo, ({address!r}, 0))
        s.recv(100)
        print("reply")
    except OSError as e:
        print("no reply:", e)
"""
    out = _output(_policy(tmp_path), _python(code))
    assert "no reply" in out, out
    assert "reply\n" not in out.replace("no reply", "")


def test_a_host_abstract_unix_socket_is_unreachable_in_sandbox_mode(tmp_path: Path) -> None:
    address = f"\0omega-isolation-{uuid.uuid4().hex}"
    with _unix_listener(address):
        out = _output(_policy(tmp_path), _connect_unix(address))
    assert "refused" in out, out


def test_loopback_inside_sandbox_mode_works_for_the_commands_own_servers(tmp_path: Path) -> None:
    code = (
        "import socket\nserver = socket.socket()\nserver.bind(('127.0.0.1', 0))\nserver.listen(1)\n"
        "client = socket.create_connection(server.getsockname(), timeout=5)\nconn, _ = server.accept()\n"
        "client.sendall(b'ping')\nprint('got', conn.recv(4).decode())\n"
    )
    out = _output(_policy(tmp_path), _python(code))
    assert "got ping" in out, out


def test_rx_mode_keeps_the_host_network(tmp_path: Path) -> None:
    address = _host_address()
    with socket.socket() as listener:
        listener.bind((address, 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        out = _output(_policy(tmp_path, mode="rx"), f"exec 3<>/dev/tcp/{address}/{port} && echo connected")
    assert "connected" in out, out


# --- pathname UNIX sockets (sandbox and rx) ----------------------------------------------------


@pytest.mark.parametrize("mode", ["sandbox", "rx"])
def test_a_host_unix_socket_outside_the_write_roots_is_unreachable(
    tmp_path: Path, outside_dir: Path, mode: str
) -> None:
    path = str(outside_dir / "host.sock")
    with _unix_listener(path):
        out = _output(_policy(tmp_path, mode=mode), _connect_unix(path))
    assert "refused" in out, out
    assert "connected" not in out


@pytest.mark.parametrize("mode", ["sandbox", "rx"])
def test_a_unix_socket_in_the_workspace_stays_reachable(tmp_path: Path, mode: str) -> None:
    policy = _policy(tmp_path, mode=mode)
    path = str(policy.workspace / "app.sock")
    with _unix_listener(path):
        out = _output(policy, _connect_unix(path))
    assert "connected" in out, out


def test_the_commands_own_unix_socket_server_works(tmp_path: Path) -> None:
    # The command's own server in the workspace, reached by its own client: untouched by the hiding.
    code = (
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('own.sock')\ns.listen(1)\n"
        "c = socket.socket(socket.AF_UNIX)\nc.connect('own.sock')\nprint('own ok')\n"
    )
    assert "own ok" in _output(_policy(tmp_path), _python(code))


# --- secrets hidden from bash and from read ----------------------------------------------------


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HOME of the user running omega, with an SSH key, AWS credentials and a .netrc in it."""
    home = tmp_path / "realhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SSH-SECRET\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("AWS-SECRET\n")
    (home / ".netrc").write_text("NETRC-SECRET\n")
    (home / "secret-dir").mkdir()
    (home / "secret-dir" / "notes").write_text("EXTRA-SECRET\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def _hidden(policy: SandboxPolicy) -> list[str]:
    hidden = describe_sandbox(policy)["hidden_paths"]
    assert isinstance(hidden, list)
    return [str(p) for p in hidden]  # pyright: ignore[reportUnknownVariableType]


def _cat_secrets(home: Path) -> str:
    files = [home / ".ssh" / "id_rsa", home / ".aws" / "credentials", home / ".netrc"]
    return "; ".join(f"cat {f}" for f in files) + f'; echo "ls=[$(ls -A {home / ".ssh"} 2>&1)]"'


@pytest.mark.parametrize("mode", ["sandbox", "rx"])
def test_default_secrets_are_hidden_from_bash(tmp_path: Path, fake_home: Path, mode: str) -> None:
    out = _output(_policy(tmp_path, mode=mode), _cat_secrets(fake_home))
    # An empty directory, or one bash may not list (bash holds no capability in its namespace, as root too).
    assert "ls=[]" in out or "ls=[ls: cannot open directory" in out, out
    for secret in ("SSH-SECRET", "AWS-SECRET", "NETRC-SECRET"):
        assert secret not in out
    assert str(fake_home / ".ssh") in _hidden(_policy(tmp_path, mode=mode))


def test_rwx_mode_hides_nothing(tmp_path: Path, fake_home: Path) -> None:
    out = _output(_policy(tmp_path, mode="rwx"), _cat_secrets(fake_home))
    assert "SSH-SECRET" in out
    assert "ls=[id_rsa]" in out


def test_omegas_token_and_state_are_hidden_from_bash(tmp_path: Path, fake_home: Path) -> None:
    policy = _policy(tmp_path)
    policy.token_file.write_text("HUB-TOKEN\n")
    policy.state_dir.mkdir()
    (policy.state_dir / "grants.json").write_text("STATE-DATA\n")
    out = _output(policy, f"cat {policy.token_file}; cat {policy.state_dir}/grants.json; echo done")
    assert "done" in out
    assert "HUB-TOKEN" not in out
    assert "STATE-DATA" not in out


async def _read_denied(policy: SandboxPolicy, path: Path) -> str:
    with deadline(10), pytest.raises(PathDeniedError) as caught:
        await read_file(policy, ReadArgs(file_path=str(path)))
    return str(caught.value)


@pytest.mark.parametrize("mode", ["sandbox", "rx"])
async def test_read_refuses_hidden_secrets_naming_the_setting(tmp_path: Path, fake_home: Path, mode: str) -> None:
    policy = _policy(tmp_path, mode=mode)
    message = await _read_denied(policy, fake_home / ".ssh" / "id_rsa")
    assert message == (
        f"denied: {fake_home / '.ssh' / 'id_rsa'}: hidden from the tools by [sandbox] hide "
        '(remove it with [sandbox] unhide = ["~/.ssh"])'
    )
    assert '["~/.aws"]' in await _read_denied(policy, fake_home / ".aws" / "credentials")
    assert '["~/.netrc"]' in await _read_denied(policy, fake_home / ".netrc")
    assert "denied" in await _read_denied(policy, Path("~/.ssh/id_rsa"))


async def test_read_refuses_a_workspace_symlink_into_a_hidden_directory(tmp_path: Path, fake_home: Path) -> None:
    policy = _policy(tmp_path)
    link = policy.workspace / "key"
    link.symlink_to(fake_home / ".ssh" / "id_rsa")
    assert "unhide" in await _read_denied(policy, link)


async def test_read_of_hidden_secrets_works_in_rwx_mode(tmp_path: Path, fake_home: Path) -> None:
    result = await read_file(_policy(tmp_path, mode="rwx"), ReadArgs(file_path=str(fake_home / ".netrc")))
    assert "NETRC-SECRET" in str(result.content)


def _policy_from(tmp_path: Path, toml: str) -> SandboxPolicy:
    config_file = tmp_path / "conf" / "servers.toml"
    config_file.parent.mkdir(exist_ok=True)
    config_file.write_text(toml)
    config = load_config(config_file, environ={"OMEGA_HOME": str(tmp_path / "home"), "HOME": os.environ["HOME"]})
    policy = SandboxPolicy.from_settings(config.sandbox, config.place, workspace=tmp_path / "ws")
    (tmp_path / "ws").mkdir(exist_ok=True)
    return replace(policy, tmp_dir=tmp_path / "tmp")


async def test_unhide_lets_bash_and_read_see_a_default_again(tmp_path: Path, fake_home: Path) -> None:
    policy = _policy_from(tmp_path, '[sandbox]\nunhide = ["~/.ssh"]\n')
    _, out = await launch_support.run_async(policy, f"cat {fake_home / '.ssh' / 'id_rsa'}; cat {fake_home / '.netrc'}")
    assert "SSH-SECRET" in out
    assert "NETRC-SECRET" not in out
    result = await read_file(policy, ReadArgs(file_path=str(fake_home / ".ssh" / "id_rsa")))
    assert "SSH-SECRET" in str(result.content)


async def test_hide_adds_a_directory(tmp_path: Path, fake_home: Path) -> None:
    policy = _policy_from(tmp_path, '[sandbox]\nhide = ["~/secret-dir"]\n')
    _, out = await launch_support.run_async(
        policy, f'cat {fake_home / "secret-dir" / "notes"}; echo "ls=[$(ls -A {fake_home / "secret-dir"})]"'
    )
    assert "ls=[]" in out, out
    assert "EXTRA-SECRET" not in out
    message = await _read_denied(policy, fake_home / "secret-dir" / "notes")
    assert f"hidden from the tools by [sandbox] hide (remove {fake_home / 'secret-dir'} from it" in message


def test_unhide_of_a_path_that_is_not_a_default_is_a_config_error(tmp_path: Path, fake_home: Path) -> None:
    with pytest.raises(ConfigError, match=r"sandbox\.unhide.*not hidden by default"):
        _policy_from(tmp_path, '[sandbox]\nunhide = ["~/secret-dir"]\n')


def test_describe_sandbox_reports_each_isolation_layer(tmp_path: Path, fake_home: Path) -> None:
    info = describe_sandbox(_policy(tmp_path))
    assert str(info["network_namespace"]).startswith("on")
    assert str(info["unix_sockets_hidden"]).startswith("on")
    assert str(fake_home / ".netrc") in _hidden(_policy(tmp_path))
    rx = describe_sandbox(_policy(tmp_path, mode="rx"))
    assert rx["network_namespace"] == "off: rx mode keeps the host network"
    assert str(rx["unix_sockets_hidden"]).startswith("on")
    assert _hidden(_policy(tmp_path, mode="rwx")) == []


def test_a_hidden_path_that_holds_a_write_root_is_left_visible_with_a_warning(tmp_path: Path, fake_home: Path) -> None:
    workspace = fake_home / ".ssh" / "project"
    workspace.mkdir()
    policy = _policy(tmp_path, workspace=workspace)
    assert str(fake_home / ".ssh") not in _hidden(policy)
    assert "holds a write root" in str(describe_sandbox(policy)["warnings"])


def test_hide_given_a_string_asks_for_a_list(tmp_path: Path, fake_home: Path) -> None:
    with pytest.raises(ConfigError, match=r'sandbox\.hide.*expected a list of paths, e\.g\. hide = \["~/x"\]'):
        _policy_from(tmp_path, '[sandbox]\nhide = "~/x"\n')


# --- the trampoline itself ---------------------------------------------------------------------


def test_a_host_socket_whose_file_is_gone_is_skipped_and_the_command_runs(tmp_path: Path, outside_dir: Path) -> None:
    path = outside_dir / "gone.sock"
    with _unix_listener(str(path)):
        path.unlink()  # still listed in /proc/net/unix, no longer on disk
        path.write_text("a regular file now\n")
        out = _output(_policy(tmp_path), f"cat {path}; echo ran")
    assert out == "a regular file now\nran\n"


def test_namespace_options_without_the_namespaces_fail_closed(tmp_path: Path) -> None:
    launch = bash_launch(_policy(tmp_path), "echo ran")
    argv = list(launch.argv)
    argv.remove("--pidns")
    at = argv.index("--pid-max")
    del argv[at : at + 2]
    done = subprocess.run(argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True, timeout=_BOUND_SECONDS)
    assert done.returncode == 125
    assert done.stdout == ""
    assert done.stderr.startswith(
        "omega-mcp sandbox: --netns, --hide, --hide-sockets, --private-tmp, --readonly and --private-dev need --pidns"
    )
    assert done.stderr.count("\n") == 1


def test_a_relative_hide_entry_resolves_against_the_config_files_directory(tmp_path: Path, fake_home: Path) -> None:
    policy = _policy_from(tmp_path, '[sandbox]\nhide = ["rel-secret"]\n')
    assert tmp_path / "conf" / "rel-secret" in policy.hidden
    assert fake_home / ".ssh" in policy.hidden
