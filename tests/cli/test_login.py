"""`omega-mcp login` / `logout` end to end: the real CLI in a subprocess, a `$BROWSER` script as the person.

The server is `oauth_support`'s protected MCP resource with its authorization server, serving from
a thread of the test process while the CLI runs. The browser script records every URL it is
opened with; the one that visits follows the authorization server's redirect to omega's loopback
callback, the idle one does nothing (a person who never comes back).
"""

from __future__ import annotations

import json
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_support import cli_env, rwx_config
from oauth_support import OAuthFixture, browser, no_proxy_env, oauth_server

_BOUND_SECONDS = 60.0
NEEDS_LOGIN = "needs login: run omega-mcp login x"
_SDK_NOISE = ("Traceback", "Error parsing SSE")


def _no_traceback(result: subprocess.CompletedProcess[str] | str) -> None:
    """What the person sees is omega's own lines: never an SDK traceback (issue 34), whatever the outcome."""
    stderr = result if isinstance(result, str) else result.stderr
    assert [noise for noise in _SDK_NOISE if noise in stderr] == [], stderr


@pytest.fixture
def fx() -> Iterator[OAuthFixture]:
    with oauth_server() as fixture:
        yield fixture


def _env(tmp_path: Path, *, visit: bool = True) -> tuple[dict[str, str], Path]:
    script, log = browser(tmp_path, visit=visit)
    return no_proxy_env(cli_env(tmp_path)) | {"BROWSER": str(script)}, log


def _omega(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omega_mcp", *args, "--config", str(tmp_path / "servers.toml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=_BOUND_SECONDS,
    )


def _oauth_config(tmp_path: Path, fx: OAuthFixture) -> Path:
    return rwx_config(tmp_path, f'[servers.x]\nurl = "{fx.url}"\nauth = "oauth"\n')


def _record(tmp_path: Path) -> Path:
    return tmp_path / "home" / "state" / "oauth" / "x.json"


def test_login_tools_refresh_logout(tmp_path: Path, fx: OAuthFixture):
    _oauth_config(tmp_path, fx)
    env, opened = _env(tmp_path)

    login = _omega(tmp_path, env, "login", "x")
    assert login.returncode == 0, login.stderr
    assert "logged in to x (1 tools)" in login.stdout
    url = opened.read_text().splitlines()[0]
    assert url.startswith(f"{fx.issuer}/authorize?") and url in login.stderr  # opened, and printed too
    record = _record(tmp_path)
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700

    tools = _omega(tmp_path, env, "tools")
    assert tools.returncode == 0, tools.stderr
    assert "x: connected (1 tools)" in tools.stdout and "mcp__x__whoami" in tools.stdout

    before = json.loads(record.read_text())
    before["expires_at"] = time.time() - 60  # the access token's lifetime is over
    record.write_text(json.dumps(before))
    fx.expire_access_tokens()
    call = _omega(tmp_path, env, "call", "mcp__x__whoami")
    assert (call.returncode, call.stdout) == (0, "authorized caller\n"), call.stderr
    assert fx.grants == ["authorization_code", "refresh_token"]
    after = json.loads(record.read_text())
    assert after["tokens"]["access_token"] != before["tokens"]["access_token"]
    assert after["tokens"]["access_token"] in fx.access  # the saved token is the live one

    logout = _omega(tmp_path, env, "logout", "x")
    assert logout.returncode == 0 and "logged out of x" in logout.stdout
    assert not record.exists()
    opened.unlink()
    tools = _omega(tmp_path, env, "tools")
    assert tools.returncode == 1
    assert f"x: failed: {NEEDS_LOGIN}" in tools.stdout
    assert "Traceback" not in tools.stderr
    assert not opened.exists()  # no browser, ever, outside login


@pytest.fixture
def chatty() -> Iterator[OAuthFixture]:
    with oauth_server(chatty=True) as fixture:
        yield fixture


def test_a_live_login_and_logout_print_no_sdk_traceback(tmp_path: Path, chatty: OAuthFixture):
    """The real flow, three times (the later ones over tokens already stored), then the session it
    leaves, and logout twice: each says its one thing on stdout and nothing of the SDK's. The server
    keeps saying its tools changed, so login ends its session with events still arriving on its
    listen stream (the SDK logged each one it could no longer hand on as `Error parsing SSE message`
    with a BrokenResourceError traceback)."""
    fx = chatty
    _oauth_config(tmp_path, fx)
    env, _ = _env(tmp_path)
    for _ in range(3):
        login = _omega(tmp_path, env, "login", "x")
        assert login.returncode == 0 and "logged in to x (1 tools)" in login.stdout, login.stderr
        _no_traceback(login)
    fx.chatter = False
    call = _omega(tmp_path, env, "call", "mcp__x__whoami")
    assert (call.returncode, call.stdout) == (0, "authorized caller\n"), call.stderr
    _no_traceback(call)
    first, second = _omega(tmp_path, env, "logout", "x"), _omega(tmp_path, env, "logout", "x")
    assert (first.returncode, second.returncode) == (0, 0)
    assert "logged out of x" in first.stdout and second.stdout == "x was not logged in; nothing to forget\n"
    assert first.stderr == second.stderr == ""


def test_a_refused_login_says_so_in_one_line(tmp_path: Path, fx: OAuthFixture):
    _oauth_config(tmp_path, fx)
    fx.refuse = "access_denied"
    env, opened = _env(tmp_path)
    login = _omega(tmp_path, env, "login", "x")
    assert login.returncode == 1
    refused = "omega-mcp: login to x failed: the authorization server refused: access_denied"
    assert login.stderr.splitlines()[-1] == refused
    _no_traceback(login)
    assert opened.exists()
    assert not _record(tmp_path).exists() or "tokens" not in json.loads(_record(tmp_path).read_text())


def test_a_login_to_a_server_that_is_down_says_so_in_one_line(tmp_path: Path):
    with socket.socket() as closed:  # bound, never listening: a connection to it is refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/mcp"
        rwx_config(tmp_path, f'[servers.x]\nurl = "{url}"\nauth = "oauth"\n')
        env, opened = _env(tmp_path)
        login = _omega(tmp_path, env, "login", "x", "--timeout", "5")
    assert login.returncode == 1
    assert login.stderr.startswith("omega-mcp: login to x failed: ") and len(login.stderr.splitlines()) == 1
    _no_traceback(login)
    assert not opened.exists()
    logout = _omega(tmp_path, env, "logout", "x")
    assert (logout.returncode, logout.stdout, logout.stderr) == (0, "x was not logged in; nothing to forget\n", "")


def test_a_call_to_a_server_that_needs_login_says_so(tmp_path: Path, fx: OAuthFixture):
    _oauth_config(tmp_path, fx)
    env, opened = _env(tmp_path)
    call = _omega(tmp_path, env, "call", "mcp__x__whoami")
    assert call.returncode == 1
    assert NEEDS_LOGIN in call.stdout
    assert "Traceback" not in call.stderr
    assert not opened.exists()
    assert fx.resource_requests == []


def test_tools_json_reports_the_needs_login_reason(tmp_path: Path, fx: OAuthFixture):
    _oauth_config(tmp_path, fx)
    env, _ = _env(tmp_path)
    tools = _omega(tmp_path, env, "tools", "--json")
    assert tools.returncode == 1
    server = json.loads(tools.stdout)["servers"]["x"]
    assert (server["state"], server["reason"], server["tools"]) == ("failed", NEEDS_LOGIN, [])


def test_a_login_nobody_answers_times_out_with_a_clear_message(tmp_path: Path, fx: OAuthFixture):
    _oauth_config(tmp_path, fx)
    env, opened = _env(tmp_path, visit=False)
    login = _omega(tmp_path, env, "login", "x", "--timeout", "1")
    assert login.returncode == 1
    assert login.stderr.splitlines()[-1] == (
        "omega-mcp: login to x failed: no answer from the browser within 1 s (--timeout); "
        "run `omega-mcp login x` to try again"
    )
    assert opened.exists()
    _no_traceback(login)
    assert not _record(tmp_path).exists() or "tokens" not in json.loads(_record(tmp_path).read_text())


def test_ctrl_c_during_login_stops_it_cleanly(tmp_path: Path, fx: OAuthFixture):
    _oauth_config(tmp_path, fx)
    env, opened = _env(tmp_path, visit=False)
    process = subprocess.Popen(
        [sys.executable, "-m", "omega_mcp", "login", "x", "--config", str(tmp_path / "servers.toml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + _BOUND_SECONDS
        while not opened.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # until login waits for the browser
        assert opened.exists(), "login never opened the browser"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=_BOUND_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(_BOUND_SECONDS)
    assert process.returncode == 130
    assert "login to x cancelled; nothing was stored" in stderr
    _no_traceback(stderr)
    assert not _record(tmp_path).exists() or "tokens" not in json.loads(_record(tmp_path).read_text())


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("", "no server named 'x'"),
        ('[servers.x]\ncommand = "true"\n', "servers.x: is a stdio server (`command`)"),
        ('[servers.x]\nurl = "http://127.0.0.1:9/mcp"\n', 'servers.x: has no auth = "oauth"'),
    ],
    ids=["unknown", "stdio", "remote-without-oauth"],
)
def test_login_to_a_server_without_oauth_is_a_usage_error(tmp_path: Path, entry: str, message: str):
    rwx_config(tmp_path, entry)
    env, opened = _env(tmp_path)
    for command in ("login", "logout"):
        result = _omega(tmp_path, env, command, "x")
        assert result.returncode == 2, (command, result.stderr)
        assert message in result.stderr and result.stderr.startswith("omega-mcp: error: ")
        assert len(result.stderr.splitlines()) == 1
    assert not opened.exists()


def test_a_client_metadata_url_that_is_no_https_document_is_a_config_error(tmp_path: Path):
    rwx_config(
        tmp_path, '[servers.x]\nurl = "http://127.0.0.1:9/mcp"\nauth = "oauth"\nclient_metadata_url = "http://x/"\n'
    )
    env, opened = _env(tmp_path)
    result = _omega(tmp_path, env, "login", "x")
    assert result.returncode == 2
    assert "servers.x.client_metadata_url: must be an https URL with a path" in result.stderr
    assert not opened.exists()


def test_logout_when_not_logged_in_is_fine(tmp_path: Path, fx: OAuthFixture):
    _oauth_config(tmp_path, fx)
    env, _ = _env(tmp_path)
    result = _omega(tmp_path, env, "logout", "x")
    assert (result.returncode, result.stdout) == (0, "x was not logged in; nothing to forget\n")
