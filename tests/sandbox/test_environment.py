from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from omega_mcp.sandbox.environment import bash_environment, looks_secret
from omega_mcp.sandbox.policy import SandboxPolicy

SERVER_ENV = {
    "PATH": "/opt/tools/bin:/usr/bin",
    "HOME": "/home/alice",
    "USER": "alice",
    "LANG": "en_US.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "TMPDIR": "/var/tmp/alice",
    "TERM": "xterm-256color",
    "OPENAI_API_KEY": "sk-openai",
    "ANTHROPIC_API_KEY": "sk-ant",
    "FAKE_API_KEY": "fake",
    "MY_TOKEN": "tok",
    "GITHUB_TOKEN": "ghp",
    "DB_PASSWORD": "hunter2",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "AWS_ACCESS_KEY_ID": "akid",
    "SSH_AUTH_SOCK": "/run/user/1000/ssh-agent",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
    "XDG_RUNTIME_DIR": "/run/user/1000",
    "DOCKER_HOST": "unix:///var/run/docker.sock",
    "LC_SECRET_TOKEN": "sneaky",
    "CUDA_VISIBLE_DEVICES": "0",
    "CUDA_HOME": "/usr/local/cuda",
}


def _policy(tmp_path: Path, **changes: Any) -> SandboxPolicy:
    base = SandboxPolicy(mode="sandbox", home=tmp_path / "home", workspace=tmp_path / "ws", tmp_dir=tmp_path / "tmp")
    return replace(base, **changes)


def test_secrets_and_socket_addresses_are_not_inherited(tmp_path: Path) -> None:
    env = bash_environment(_policy(tmp_path), SERVER_ENV)
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "FAKE_API_KEY",
        "MY_TOKEN",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "SSH_AUTH_SOCK",
        "DBUS_SESSION_BUS_ADDRESS",
        "XDG_RUNTIME_DIR",
        "DOCKER_HOST",
        "LC_SECRET_TOKEN",
    ):
        assert name not in env, name
    assert not {"sk-openai", "fake", "tok", "hunter2", "aws"} & set(env.values())


def test_core_variables_are_inherited(tmp_path: Path) -> None:
    env = bash_environment(_policy(tmp_path), SERVER_ENV)
    assert env["PATH"] == "/opt/tools/bin:/usr/bin"
    assert env["HOME"] == "/home/alice"
    assert env["USER"] == "alice"
    assert env["LANG"] == "en_US.UTF-8"
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["TZ"] == "UTC"


def test_missing_path_gets_a_standard_default(tmp_path: Path) -> None:
    env = bash_environment(_policy(tmp_path), {"HOME": "/root"})
    assert "/usr/bin" in env["PATH"].split(":")


def test_non_interactive_defaults_are_set_and_term_is_dumb(tmp_path: Path) -> None:
    env = bash_environment(_policy(tmp_path), SERVER_ENV)
    assert env["PAGER"] == "cat"
    assert env["GIT_PAGER"] == "cat"
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["GIT_EDITOR"] == "true"
    assert env["EDITOR"] == "true"
    assert env["DEBIAN_FRONTEND"] == "noninteractive"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["NO_COLOR"] == "1"
    assert env["TERM"] == "dumb"


@pytest.mark.parametrize("mode", ["sandbox", "rx", "rwx"])
def test_omega_sandbox_names_the_mode(tmp_path: Path, mode: str) -> None:
    env = bash_environment(_policy(tmp_path, mode=mode), SERVER_ENV)
    assert env["OMEGA_SANDBOX"] == mode


def test_confined_modes_point_tmpdir_and_caches_into_writable_dirs(tmp_path: Path) -> None:
    policy = _policy(tmp_path, mode="rx")
    env = bash_environment(policy, SERVER_ENV)
    assert env["TMPDIR"] == str(tmp_path / "tmp")
    cache = policy.scratch_dir / "cache"
    assert env["XDG_CACHE_HOME"] == str(cache)
    assert env["npm_config_cache"] == str(cache / "npm")
    assert env["PIP_CACHE_DIR"] == str(cache / "pip")


def test_rwx_mode_keeps_the_users_tmpdir_and_caches(tmp_path: Path) -> None:
    env = bash_environment(_policy(tmp_path, mode="rwx"), SERVER_ENV)
    assert env["TMPDIR"] == "/var/tmp/alice"
    assert "XDG_CACHE_HOME" not in env
    assert "PIP_CACHE_DIR" not in env


def test_only_sandbox_mode_announces_that_network_is_disabled(tmp_path: Path) -> None:
    assert bash_environment(_policy(tmp_path), SERVER_ENV)["OMEGA_SANDBOX_NETWORK_DISABLED"] == "1"
    assert "OMEGA_SANDBOX_NETWORK_DISABLED" not in bash_environment(_policy(tmp_path, mode="rx"), SERVER_ENV)


def test_env_passthrough_passes_named_variables_even_secret_looking_ones(tmp_path: Path) -> None:
    env = bash_environment(_policy(tmp_path, env_passthrough=("MY_TOKEN", "NOT_SET")), SERVER_ENV)
    assert env["MY_TOKEN"] == "tok"
    assert "NOT_SET" not in env
    assert "OPENAI_API_KEY" not in env


def test_env_passthrough_accepts_glob_patterns(tmp_path: Path) -> None:
    env = bash_environment(_policy(tmp_path, env_passthrough=("CUDA_*",)), SERVER_ENV)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["CUDA_HOME"] == "/usr/local/cuda"


def test_env_passthrough_cannot_fake_the_sandbox_mode(tmp_path: Path) -> None:
    source = {**SERVER_ENV, "OMEGA_SANDBOX": "rwx"}
    env = bash_environment(_policy(tmp_path, env_passthrough=("OMEGA_*",)), source)
    assert env["OMEGA_SANDBOX"] == "sandbox"


def test_the_server_environment_is_read_when_none_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMEGA_TEST_PASS", "yes")
    monkeypatch.setenv("OMEGA_TEST_API_KEY", "secret")
    env = bash_environment(_policy(tmp_path, env_passthrough=("OMEGA_TEST_PASS",)))
    assert env["OMEGA_TEST_PASS"] == "yes"
    assert "OMEGA_TEST_API_KEY" not in env


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("MY_TOKEN", True),
        ("CLIENT_SECRET", True),
        ("DB_PASSWORD", True),
        ("PGPASSWORD", True),
        ("AWS_SESSION_TOKEN", True),
        ("PATH", False),
        ("LANG", False),
        ("LC_ALL", False),
    ],
)
def test_looks_secret_classifies_names(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret
