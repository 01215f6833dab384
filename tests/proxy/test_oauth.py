"""Remote servers with `auth = "oauth"` in the hub: the token record, needs-login, refresh, secrecy.

The server is `oauth_support`'s protected MCP resource and authorization server on 127.0.0.1; a
login is `omega-mcp login`'s own code run in-process, its browser `oauth_support.visit` (the CLI
end to end, with a `$BROWSER` script, is in tests/cli/test_login.py). The hub side is the real
`Downstreams` over the real HTTP transport, as `serve`, `tools` and `call` run it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import stat
import time
import webbrowser
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from oauth_support import OAuthFixture, oauth_server, visit
from omega_mcp.cli.login import run_login
from omega_mcp.config import Config, load_config
from omega_mcp.errors import LoginRequiredError, OAuthError
from omega_mcp.proxy.oauth import OAuthSettings, TokenFile, http_auth, token_file
from omega_mcp.proxy.supervisor import Downstreams
from omega_mcp.sandbox.policy import SandboxPolicy
from omega_mcp.toolbox import Toolbox
from waits import deadline

_BOUND_SECONDS = 30.0
NEEDS_LOGIN = "needs login: run omega-mcp login x"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every URL anything hands to `webbrowser.open` (the hub never may)."""
    calls: list[str] = []

    def record(url: str, *args: Any, **kwargs: Any) -> bool:
        calls.append(url)
        return False

    monkeypatch.setattr(webbrowser, "open", record)
    return calls


@pytest.fixture
def fx() -> Iterator[OAuthFixture]:
    with oauth_server() as fixture:
        yield fixture


def _config(tmp_path: Path, fx: OAuthFixture, extra: str = "") -> Config:
    path = tmp_path / "servers.toml"
    path.write_text(f'[servers.x]\nurl = "{fx.url}"\nauth = "oauth"\n{extra}')
    return load_config(path, environ={"OMEGA_HOME": str(tmp_path / "home")})


def _record(config: Config) -> dict[str, Any]:
    return json.loads(token_file(config.home, "x").read_text())


async def _login(config: Config) -> str:
    out = io.StringIO()
    args = argparse.Namespace(server="x", timeout=_BOUND_SECONDS)
    with deadline(_BOUND_SECONDS):
        assert await run_login(config, args, out, opener=visit) == 0
    return out.getvalue()


@asynccontextmanager
async def _hub(config: Config) -> AsyncIterator[Downstreams]:
    async with Downstreams.from_config(config.for_servers, one_shot=True) as downstreams:
        with deadline(_BOUND_SECONDS):
            await downstreams.wait_ready()
        yield downstreams


async def _whoami(downstreams: Downstreams) -> dict[str, Any]:
    with deadline(_BOUND_SECONDS):
        return await downstreams.call_tool("x", "whoami", {})


# -- the record ---------------------------------------------------------------------------------


def test_the_record_is_0600_in_a_0700_directory_and_replaced_whole(tmp_path: Path):
    path = token_file(tmp_path / "home", "x")
    record = TokenFile(path, "https://mcp.example.com/mcp")
    record.write({"tokens": {"access_token": "one"}})
    record.write({"tokens": {"access_token": "two"}})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path == tmp_path / "home" / "state" / "oauth" / "x.json"
    assert os.listdir(path.parent) == ["x.json"]  # no temporary file left behind
    assert record.read()["tokens"] == {"access_token": "two"}
    assert record.forget() and not record.forget()


def test_tokens_made_for_another_url_are_sent_nowhere(tmp_path: Path):
    path = token_file(tmp_path, "x")
    TokenFile(path, "https://old.example.com/mcp").write({"tokens": {"access_token": "secret"}})
    assert TokenFile(path, "https://new.example.com/mcp").read() == {}
    with pytest.raises(LoginRequiredError, match=NEEDS_LOGIN):
        http_auth(OAuthSettings(server_name="x", url="https://new.example.com/mcp", record=path))


@pytest.mark.parametrize("name", ["../x", "x/y", "", ".."])
def test_a_record_path_stays_in_the_oauth_directory(tmp_path: Path, name: str):
    with pytest.raises(ValueError, match="not a server name"):
        token_file(tmp_path, name)


# -- the hub: needs login, login, refresh -------------------------------------------------------


async def test_without_tokens_the_server_needs_login_and_is_not_contacted(
    tmp_path: Path, fx: OAuthFixture, opened: list[str]
):
    async with _hub(_config(tmp_path, fx)) as downstreams:
        (status,) = downstreams.statuses()
        assert (status.state, status.reason) == ("failed", NEEDS_LOGIN)
        result = await _whoami(downstreams)
    assert result["isError"] is True
    assert result["content"][0]["text"] == f"server x is down: {NEEDS_LOGIN}"
    assert fx.resource_requests == [] and fx.grants == []
    assert opened == []


async def test_after_login_the_hub_connects_with_the_stored_token(tmp_path: Path, fx: OAuthFixture):
    config = _config(tmp_path, fx)
    said = await _login(config)
    assert "logged in to x (1 tools)" in said
    assert fx.grants == ["authorization_code"]
    assert _record(config)["tokens"]["refresh_token"]
    async with _hub(config) as downstreams:
        assert downstreams.statuses()[0].tools == ("whoami",)
        result = await _whoami(downstreams)
    assert result["content"][0]["text"] == "authorized caller"
    assert fx.grants == ["authorization_code"]  # the stored token was used as it was


async def test_a_token_expired_by_the_clock_is_refreshed_at_the_discovered_endpoint_and_saved(
    tmp_path: Path, fx: OAuthFixture
):
    config = _config(tmp_path, fx)
    await _login(config)
    before = _record(config)
    before["expires_at"] = time.time() - 60  # as if the process started an hour later
    token_file(config.home, "x").write_text(json.dumps(before))
    fx.expire_access_tokens()
    seen = len(fx.resource_requests)
    async with _hub(config) as downstreams:
        result = await _whoami(downstreams)
    assert result["content"][0]["text"] == "authorized caller"
    assert fx.grants == ["authorization_code", "refresh_token"]  # at /auth/token, not a guessed /token
    assert f"Bearer {before['tokens']['access_token']}" not in fx.resource_requests[seen:]  # refreshed first
    after = _record(config)
    assert after["tokens"]["access_token"] != before["tokens"]["access_token"]
    assert after["tokens"]["refresh_token"] != before["tokens"]["refresh_token"]  # the rotated one is kept
    assert after["expires_at"] > time.time()


async def test_a_token_the_server_ends_mid_session_is_refreshed_and_the_call_goes_through(
    tmp_path: Path, fx: OAuthFixture, opened: list[str]
):
    config = _config(tmp_path, fx)
    await _login(config)
    async with _hub(config) as downstreams:
        fx.expire_access_tokens()  # revoked early, or a clock that disagrees: the client saw no expiry
        result = await _whoami(downstreams)
        assert result["content"][0]["text"] == "authorized caller"
        assert downstreams.statuses()[0].state == "connected"
    assert fx.grants == ["authorization_code", "refresh_token"]
    assert _record(config)["tokens"]["access_token"] in fx.access
    assert opened == []


async def test_a_refused_refresh_means_needs_login_and_no_browser(tmp_path: Path, fx: OAuthFixture, opened: list[str]):
    config = _config(tmp_path, fx)
    await _login(config)
    fx.expire_access_tokens()
    fx.revoke_refresh_tokens()
    async with _hub(config) as downstreams:
        (status,) = downstreams.statuses()
        assert (status.state, status.reason) == ("failed", NEEDS_LOGIN)
    assert opened == []
    assert fx.authorize_requests[1:] == []  # only the login's


async def test_configured_scopes_are_what_omega_asks_for(tmp_path: Path, fx: OAuthFixture):
    await _login(_config(tmp_path, fx, 'scopes = ["read", "write"]\n'))
    assert fx.authorize_requests[-1]["scope"] == "read write"


async def test_a_configured_client_id_is_used_without_registering(tmp_path: Path, fx: OAuthFixture):
    fx.preregister("omega-preregistered")
    config = _config(tmp_path, fx, 'client_id = "omega-preregistered"\n')
    await _login(config)
    assert list(fx.clients) == ["omega-preregistered"]
    assert fx.authorize_requests[-1]["client_id"] == "omega-preregistered"
    async with _hub(config) as downstreams:
        assert (await _whoami(downstreams))["content"][0]["text"] == "authorized caller"


async def test_a_second_login_reuses_the_registration_and_replaces_the_tokens(tmp_path: Path, fx: OAuthFixture):
    config = _config(tmp_path, fx)
    await _login(config)
    first = _record(config)
    await _login(config)
    second = _record(config)
    assert len(fx.clients) == 1  # the callback came back on the registered port
    assert second["client"]["client_id"] == first["client"]["client_id"]
    assert second["tokens"]["access_token"] != first["tokens"]["access_token"]
    assert fx.grants == ["authorization_code", "authorization_code"]  # a login is a new login, not a reuse


async def test_a_login_that_fails_leaves_the_record_as_it_was(tmp_path: Path, fx: OAuthFixture):
    config = _config(tmp_path, fx)
    await _login(config)
    before = token_file(config.home, "x").read_bytes()
    port = urlsplit(_record(config)["client"]["redirect_uris"][0]).port
    args = argparse.Namespace(server="x", timeout=0.5)
    nobody = r"no answer from the browser within 0\.5 s"
    with socket.create_server(("127.0.0.1", port)):  # taken: the next login registers anew, then nobody answers
        with deadline(_BOUND_SECONDS), pytest.raises(OAuthError, match=nobody):
            await run_login(config, args, io.StringIO(), opener=lambda url: True)
    assert len(fx.clients) == 2  # it did register
    assert token_file(config.home, "x").read_bytes() == before


# -- the tools never see the tokens -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sandbox", "rx", "rwx"])
async def test_the_tools_can_neither_read_nor_change_the_token_record(policy: SandboxPolicy, mode: str):
    from dataclasses import replace

    policy = replace(policy, mode=mode)
    path = token_file(policy.home, "x")
    TokenFile(path, "https://mcp.example.com/mcp").write({"tokens": {"access_token": "SECRET-TOKEN"}})
    async with Toolbox(policy) as box:
        with deadline(_BOUND_SECONDS):
            read = await box.call_tool("read", {"file_path": str(path)})
            write = await box.call_tool("write", {"file_path": str(path), "content": "{}"})
            edit = await box.call_tool("edit", {"file_path": str(path), "old_string": "SECRET", "new_string": "x"})
            bash = await box.call_tool("bash", {"command": f"cat {path}; echo exit=$?"})
    for result in (read, write, edit):
        text = result.content[0].text  # pyright: ignore[reportAttributeAccessIssue]
        assert result.is_error and "denied" in text and "SECRET-TOKEN" not in text
    bash_text = bash.content[0].text  # pyright: ignore[reportAttributeAccessIssue]
    if mode != "rwx":  # rwx bash is unconfined by design (docs/sandbox.md: rwx hides nothing from bash)
        assert "SECRET-TOKEN" not in bash_text and "exit=" in bash_text
    assert "SECRET-TOKEN" in path.read_text()  # unchanged


# -- a confidential client's secret, and a scope step-up -------------------------------------------


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
async def test_a_confidential_client_takes_its_secret_from_the_environment_as_the_server_asks(
    tmp_path: Path, fx: OAuthFixture, monkeypatch: pytest.MonkeyPatch, method: str
):
    fx.auth_methods = [method]
    fx.preregister("omega-confidential", secret="s3cret-from-env")
    monkeypatch.setenv("X_CLIENT_SECRET", "s3cret-from-env")
    config = _config(tmp_path, fx, 'client_id = "omega-confidential"\nclient_secret_env = "X_CLIENT_SECRET"\n')
    await _login(config)
    fx.expire_access_tokens()  # the hub refreshes: a token request of its own, with the secret
    async with _hub(config) as downstreams:
        assert (await _whoami(downstreams))["content"][0]["text"] == "authorized caller"
    assert fx.client_auth == [method, method]
    assert fx.grants == ["authorization_code", "refresh_token"]
    assert "s3cret-from-env" not in token_file(config.home, "x").read_text()  # never written down
    assert "s3cret-from-env" not in (tmp_path / "servers.toml").read_text()


async def test_an_unset_secret_variable_is_a_one_line_reason(
    tmp_path: Path, fx: OAuthFixture, monkeypatch: pytest.MonkeyPatch
):
    fx.auth_methods = ["client_secret_basic"]
    fx.preregister("omega-confidential", secret="s3cret")
    monkeypatch.setenv("X_CLIENT_SECRET", "s3cret")
    config = _config(tmp_path, fx, 'client_id = "omega-confidential"\nclient_secret_env = "X_CLIENT_SECRET"\n')
    await _login(config)
    monkeypatch.delenv("X_CLIENT_SECRET")
    async with _hub(config) as downstreams:
        (status,) = downstreams.statuses()
    assert status.state == "failed"
    assert status.reason == "client_secret_env: the environment variable X_CLIENT_SECRET is not set"


def test_client_secret_env_names_a_variable_of_a_configured_client(tmp_path: Path):
    for extra in ('client_secret_env = "X_SECRET"\n', 'client_id = "c"\nclient_secret_env = "not a name!"\n'):
        path = tmp_path / "servers.toml"
        path.write_text(f'[servers.x]\nurl = "https://example.com/mcp"\nauth = "oauth"\n{extra}')
        with pytest.raises(Exception, match=r"client_secret_env.*never the secret itself"):
            load_config(path, environ={"OMEGA_HOME": str(tmp_path / "home")})


async def test_a_scope_step_up_under_the_hub_is_a_needs_login_naming_the_scope_and_a_login_grants_it(
    tmp_path: Path, fx: OAuthFixture, opened: list[str]
):
    config = _config(tmp_path, fx)
    await _login(config)
    stepped = 'needs login: server x asks for scope "admin": run omega-mcp login x'
    async with _hub(config) as downstreams:
        assert (await _whoami(downstreams))["content"][0]["text"] == "authorized caller"
        fx.required_scope = "admin"  # from now on the server wants more than the token grants
        refused = await _whoami(downstreams)
        (status,) = downstreams.statuses()
        assert (status.state, status.reason) == ("connected", stepped)  # the connection stays up
        again = await _whoami(downstreams)
    assert refused == {"content": [{"type": "text", "text": stepped}], "isError": True}
    assert again == refused
    assert opened == []  # the hub never opens a browser
    await _login(config)
    assert fx.authorize_requests[-1]["scope"].split() == ["tools", "admin"]  # what was granted, and more
    async with _hub(config) as downstreams:
        assert (await _whoami(downstreams))["content"][0]["text"] == "authorized caller"
        assert downstreams.statuses()[0].reason is None
    assert "step_up" not in _record(config)
