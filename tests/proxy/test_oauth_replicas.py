"""Hub replicas sharing one $OMEGA_HOME share each remote server's OAuth record safely: writes are
serialized by a lock, and a process that is about to refresh first takes the tokens another one
stored (with a rotating refresh token, the old one is refused by the server)."""

from __future__ import annotations

from pathlib import Path

from mcp.shared.auth import OAuthToken

from omega_mcp.proxy.oauth import OAuthSettings, TokenFile, _Storage  # pyright: ignore[reportPrivateUsage]

URL = "https://mcp.example.com/mcp"


def _settings(path: Path) -> OAuthSettings:
    return OAuthSettings(server_name="remote", url=URL, record=path)


async def test_a_replica_takes_the_tokens_another_one_refreshed(tmp_path: Path) -> None:
    path = tmp_path / "state" / "oauth" / "remote.json"
    TokenFile(path, URL).write({"tokens": {"access_token": "A1", "token_type": "Bearer", "refresh_token": "R1"}})
    first, second = _Storage(_settings(path)), _Storage(_settings(path))
    assert (await second.get_tokens()) == OAuthToken(access_token="A1", token_type="Bearer", refresh_token="R1")
    await first.set_tokens(OAuthToken(access_token="A2", token_type="Bearer", refresh_token="R2"))
    adopted = await second.get_tokens()
    assert adopted is not None and (adopted.access_token, adopted.refresh_token) == ("A2", "R2")
    assert not second.adopt_newer()  # nothing new since
