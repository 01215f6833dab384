"""`sandbox/servers.py`: the policy of a confined downstream server, its argv, and the denial hints.

Configs are real servers.toml files loaded by `load_config`; `~` is the fake home each test sets
in $HOME (the default hidden paths and the hints expand it when they are made).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from omega_mcp.config import Config, load_config
from omega_mcp.proxy.spawn import spawn
from omega_mcp.sandbox import probe
from omega_mcp.sandbox.servers import (
    describe_confinement,
    explain_denial,
    moved_caches,
    server_argv,
    server_environment,
    server_policy,
)

ECHO = "/bin/echo"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = tmp_path / "user"
    fake.mkdir()
    monkeypatch.setenv("HOME", str(fake))
    for name in ("XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    return fake


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "conf" / "servers.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return load_config(path, environ={"OMEGA_HOME": str(tmp_path / "omega")})


def _server(name: str, sandbox: str | None = None, command: str = ECHO, extra: str = "") -> str:
    text = f'[servers.{name}]\ncommand = "{command}"\n'
    return text + (f"sandbox = {sandbox}\n" if sandbox is not None else "") + extra


# --- Which servers are confined -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("default", "own", "confined"),
    [
        (None, None, False),  # `[sandbox] servers` defaults to "none"
        ('"none"', None, False),
        ('"none"', '"default"', True),
        ('"none"', "{ network = true }", True),
        ('"confined"', None, True),
        ('"confined"', '"none"', False),
        ('"confined"', "{ read_only = true }", True),
    ],
)
def test_a_server_follows_sandbox_servers_unless_it_says_otherwise(
    tmp_path: Path, home: Path, default: str | None, own: str | None, confined: bool
):
    head = f"[sandbox]\nservers = {default}\n" if default else ""
    config = _config(tmp_path, head + _server("s", own))
    assert (server_policy(config.for_servers, "s") is not None) is confined


def test_a_remote_server_is_never_confined(tmp_path: Path, home: Path):
    config = _config(tmp_path, '[sandbox]\nservers = "confined"\n[servers.r]\nurl = "https://example.com/mcp"\n')
    assert server_policy(config.for_servers, "r") is None
    assert describe_confinement(None) == {"confined": False}


# --- The policy -----------------------------------------------------------------------------------


def test_default_confinement_writes_only_its_own_directory_and_its_tmp_and_has_no_network(tmp_path: Path, home: Path):
    config = _config(tmp_path, _server("s", '"default"'))
    policy = server_policy(config.for_servers, "s")
    assert policy is not None
    own = tmp_path / "omega" / "servers" / "s"
    assert (policy.mode, policy.workspace, policy.server_name, policy.read_only) == ("sandbox", own, "s", False)
    assert policy.bash_write_roots == (own, Path("/tmp"))
    assert not policy.bash_network
    assert policy.servers_dir in policy.protected_paths  # the file tools cannot plant files it loads
    described = describe_confinement(policy)
    assert described["confined"] is True and described["network"] is False
    assert described["cwd"] == str(own) and str(own) in described["write_roots"]  # type: ignore[operator]


def test_network_true_is_rx_mode(tmp_path: Path, home: Path):
    policy = server_policy(_config(tmp_path, _server("s", "{ network = true }")).for_servers, "s")
    assert policy is not None and policy.mode == "rx" and policy.bash_network


def test_cwd_replaces_its_directory_and_write_roots_expand_like_paths_in_the_file(tmp_path: Path, home: Path):
    roots = '["~/.state", "data", "/srv/x/../y"]'
    config = _config(tmp_path, _server("s", f"{{ write_roots = {roots} }}", extra=f'cwd = "{tmp_path / "repo"}"\n'))
    policy = server_policy(config.for_servers, "s")
    assert policy is not None
    assert policy.workspace == tmp_path / "repo"
    own = tmp_path / "omega" / "servers" / "s"  # its caches live there, wherever its cwd is
    assert policy.write_roots == (own, home / ".state", tmp_path / "conf" / "data", Path("/srv/y"))
    assert policy.bash_write_roots == (tmp_path / "repo", Path("/tmp"), *policy.write_roots)


def test_read_only_writes_nothing_but_its_tmp(tmp_path: Path, home: Path):
    config = _config(tmp_path, _server("s", '{ read_only = true, write_roots = ["/srv"] }', command="npx"))
    policy = server_policy(config.for_servers, "s")
    assert policy is not None and policy.read_only
    assert policy.write_roots == ()  # not even its own directory (the launcher's cache)
    assert policy.bash_write_roots == (Path("/tmp"),)


def test_a_launchers_caches_are_its_own_never_the_users(tmp_path: Path, home: Path):
    """A shared ~/.npm would let a confined server plant code that the user's own npx runs later."""
    npx = server_policy(_config(tmp_path, _server("s", '"default"', command="npx")).for_servers, "s")
    assert npx is not None
    own = tmp_path / "omega" / "servers" / "s"
    assert npx.write_roots == (own,) and home / ".npm" not in npx.bash_write_roots
    env = server_environment(npx, {"PATH": "/usr/bin", "XDG_CACHE_HOME": "/x/cache"})
    assert env["npm_config_cache"] == str(own / ".npm") and env["XDG_DATA_HOME"] == str(own / ".local/share")
    assert env["XDG_CACHE_HOME"] == "/x/cache"  # the server's own choice wins
    assert env["PATH"] == "/usr/bin"


def test_hidden_is_bashs_list_plus_hide_minus_unhide(tmp_path: Path, home: Path):
    head = '[sandbox]\nhide = ["/srv/secret-a"]\n'
    own = '{ hide = ["/srv/secret-b"], unhide = ["~/.npmrc"] }'
    policy = server_policy(_config(tmp_path, head + _server("s", own)).for_servers, "s")
    assert policy is not None
    assert {home / ".ssh", home / ".aws", Path("/srv/secret-a"), Path("/srv/secret-b")} <= set(policy.hidden)
    assert home / ".npmrc" not in policy.hidden
    assert {policy.token_file, policy.state_dir} <= set(policy.hidden_paths)  # omega's own, always


def test_the_other_confined_servers_directories_are_hidden_even_before_they_exist(tmp_path: Path, home: Path):
    text = '[sandbox]\nservers = "confined"\n' + _server("a") + _server("b") + _server("u", '"none"')
    text += _server("c", extra=f'cwd = "{tmp_path}"\n') + '[servers.r]\nurl = "https://example.com/mcp"\n'
    config = _config(tmp_path, text)
    policy = server_policy(config.for_servers, "a")
    assert policy is not None
    servers = tmp_path / "omega" / "servers"
    assert {servers / "b", servers / "c"} <= set(policy.hidden)  # c keeps its caches there
    for not_a_directory_of_its_own in ("a", "u", "r"):  # itself, unconfined, remote
        assert servers / not_a_directory_of_its_own not in policy.hidden
    assert config.path in policy.hidden  # the other servers' keys are in it


# --- caches a server's env moved ------------------------------------------------------------------


def test_caches_the_servers_env_places_become_write_roots(tmp_path: Path, home: Path):
    assert moved_caches({}) == ()
    assert moved_caches({"npm_config_cache": "~/c/npm", "XDG_DATA_HOME": "/x/data", "OTHER": "/y"}) == (
        home / "c" / "npm",
        Path("/x/data"),
    )
    config = _config(
        tmp_path, _server("s", '"default"', command="npx", extra='env = { npm_config_cache = "/x/npm" }\n')
    )
    policy = server_policy(config.for_servers, "s")
    assert policy is not None and Path("/x/npm") in policy.write_roots


# --- server_argv ---------------------------------------------------------------------------------


def _skip_without_sandbox() -> None:
    support = probe.support()
    if not sys.platform.startswith("linux") or not support.landlock_enforced or support.landlock_abi < 4:
        pytest.skip(f"needs Landlock ABI >= 4: {support.detail}")


def test_server_argv_makes_the_directories_it_needs_and_runs_the_command_last(tmp_path: Path, home: Path):
    _skip_without_sandbox()
    config = _config(tmp_path, '[sandbox]\nservers = "confined"\n' + _server("a", command="npx") + _server("b"))
    policy = server_policy(config.for_servers, "a")
    assert policy is not None
    argv = server_argv(policy, "/usr/bin/npx", ["-y", "pkg"])
    assert argv[argv.index("--") + 1 :] == ["/usr/bin/npx", "-y", "pkg"]
    servers = tmp_path / "omega" / "servers"
    for made in (servers / "a", servers / "b"):
        assert made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o700
    hidden = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--hide"]
    assert str(servers / "b") in hidden and str(servers / "a") not in hidden
    assert "--netns" in argv and argv[argv.index("--private-tmp") + 1] == "/tmp"


def test_server_argv_with_network_keeps_the_host_network(tmp_path: Path, home: Path):
    _skip_without_sandbox()
    policy = server_policy(_config(tmp_path, _server("s", "{ network = true }")).for_servers, "s")
    assert policy is not None
    argv = server_argv(policy, ECHO, [])
    assert "--netns" not in argv and "--deny-tcp" not in argv


def test_a_confined_command_not_on_path_raises_as_popen_would(tmp_path: Path, home: Path):
    policy = server_policy(_config(tmp_path, _server("s", '"default"')).for_servers, "s")
    assert policy is not None
    with pytest.raises(FileNotFoundError):
        spawn("no-such-command-omega", [], {"PATH": str(tmp_path)}, None, confinement=policy)


# --- explain_denial ------------------------------------------------------------------------------


@pytest.fixture
def confined(tmp_path: Path, home: Path) -> Config:
    (home / ".x").mkdir()
    text = '[sandbox]\nservers = "confined"\nhide = ["/srv/private"]\n'
    return _config(tmp_path, text + _server("s") + _server("ro", "{ read_only = true }") + _server("other"))


def _explain(config: Config, name: str, *lines: str) -> str | None:
    policy = server_policy(config.for_servers, name)
    assert policy is not None
    return explain_denial(policy, lines)


@pytest.mark.parametrize(
    "line",
    [
        "Error: EACCES: permission denied, open '{home}/.x/state.json'",  # Node
        "PermissionError: [Errno 13] Permission denied: '{home}/.x/state.json'",  # Python
        "open {home}/.x/state.json: permission denied",  # Go
        'OSError: [Errno 30] Read-only file system: "{home}/.x/state.json"',
    ],
)
def test_a_denied_write_names_the_write_root_to_add(confined: Config, home: Path, line: str):
    text = _explain(confined, "s", "starting", line.format(home=home), "exiting")
    want = "denied write to ~/.x/state.json (the server is confined): add '~/.x' to servers.s.sandbox.write_roots"
    assert text == want


def test_a_denied_write_in_a_missing_directory_names_the_nearest_one_that_exists(confined: Config, home: Path):
    text = _explain(confined, "s", f"Error: EACCES: permission denied, mkdir '{home}/.x/deep/er'")
    assert text is not None and text.endswith("add '~/.x' to servers.s.sandbox.write_roots")


def test_a_hidden_path_names_unhide_or_hide(confined: Config, home: Path, tmp_path: Path):
    ssh = _explain(confined, "s", f"Error: EACCES: permission denied, open '{home}/.ssh/known_hosts'")
    assert ssh == (
        "~/.ssh/known_hosts is hidden from the server (a default secret): add '~/.ssh' to servers.s.sandbox.unhide"
    )
    private = _explain(confined, "s", "PermissionError: [Errno 13] Permission denied: '/srv/private/k'")
    assert private == "/srv/private/k is hidden from the server: remove '/srv/private' from `hide`"
    other = tmp_path / "omega" / "servers" / "other" / "memory.json"
    sibling = _explain(confined, "s", f"PermissionError: [Errno 13] Permission denied: '{other}'")
    assert sibling is not None and "belongs to another server" in sibling and "hide" not in sibling


def test_read_only_names_read_only(confined: Config, tmp_path: Path):
    own = tmp_path / "omega" / "servers" / "ro" / "db"
    text = _explain(confined, "ro", f"Error: EROFS: read-only file system, open '{own}'")
    want = f"denied write to {own} (the server is confined, read_only): set servers.ro.sandbox.read_only = false"
    assert text == want


def test_the_last_refusal_counts_and_a_refusal_without_a_path_is_skipped(confined: Config, home: Path):
    lines = [f"EACCES: permission denied, open '{home}/.x/a'", f"EACCES: permission denied, open '{home}/.x/b'"]
    assert "~/.x/b" in (_explain(confined, "s", *lines) or "")
    assert _explain(confined, "s", "Error: permission denied", "bye") is None


def test_no_network_is_named_only_for_a_server_without_one(tmp_path: Path, home: Path):
    text = _server("off") + _server("on", "{ network = true }")
    config = _config(tmp_path, '[sandbox]\nservers = "confined"\n' + text)
    line = "npm error request to https://registry.npmjs.org/x failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org"
    assert _explain(config, "off", line) == (
        "no network (the server is confined): set servers.off.sandbox.network = true if it needs one"
    )
    assert _explain(config, "on", line) is None
    assert _explain(config, "off", "listening on stdio", "bye") is None


def test_a_server_that_lives_under_tmp_still_runs_and_tmp_stays_private(tmp_path: Path, home: Path):
    """A project (or its venv) under /tmp: the private /tmp keeps, read-only, the top entry of each
    absolute path on the command line, and nothing else of the host's /tmp."""
    _skip_without_sandbox()
    import json
    import subprocess
    import tempfile

    fixture = Path(__file__).parents[1] / "fixtures" / "hostile_server.py"
    script = tmp_path / "server.py"  # under /tmp: pytest's tmp_path lives there
    script.write_text(fixture.read_text())
    policy = server_policy(_config(tmp_path, _server("s", '"default"', command=sys.executable)).for_servers, "s")
    assert policy is not None
    env = server_environment(policy, {"PATH": os.environ["PATH"], "HOME": str(home)})
    argv = server_argv(policy, sys.executable, [str(script)])
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="omega-host-only-") as elsewhere:
        calls = [
            {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "attempt", "arguments": a}}
            for i, a in enumerate(
                [
                    {"action": "read", "target": str(script)},
                    {"action": "list", "target": elsewhere},
                    {"action": "write", "target": str(script) + ".planted"},
                ]
            )
        ]
        done = subprocess.run(
            argv,
            input="".join(json.dumps(c) + "\n" for c in calls),
            env=env,
            cwd=policy.workspace,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    texts = [json.loads(line)["result"]["content"][0]["text"] for line in done.stdout.splitlines()]
    assert len(texts) == 3, done.stderr
    assert texts[0].startswith("allowed: read")  # its own script, read-only
    assert texts[1].startswith("denied: FileNotFoundError")  # another /tmp entry: not there at all
    assert texts[2].startswith("denied:") and "Read-only file system" in texts[2]
    assert not Path(str(script) + ".planted").exists()


def test_a_refused_connection_names_network_true_only_for_a_server_without_one(tmp_path: Path, home: Path):
    text = _server("off") + _server("on", "{ network = true }")
    config = _config(tmp_path, '[sandbox]\nservers = "confined"\n' + text)
    python = "ConnectionRefusedError: [Errno 111] Connection refused"
    node = "Error: connect ECONNREFUSED 127.0.0.1:5432"
    for line in (python, node):
        found = _explain(config, "off", "Traceback (most recent call last):", line)
        assert found is not None and "127.0.0.1 is its own loopback" in found
        assert found.endswith("set servers.off.sandbox.network = true to reach a service here")
        assert _explain(config, "on", line) is None
