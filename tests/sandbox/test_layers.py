"""The layers report (`tools --json` under `sandbox.layers`, and the `serve` startup line) names each layer."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from omega_mcp.sandbox import probe
from omega_mcp.sandbox.launch import describe_sandbox
from omega_mcp.sandbox.layers import sandbox_layers, summary
from omega_mcp.sandbox.policy import SandboxPolicy

NEW_LAYERS = (
    "protected_names",
    "private_tmp",
    "file_tools_in_world",
    "private_dev",
    "session_keyring",
    "hidden_by_identity",
    "unprivileged_in_namespace",
    "shells_per_session",
)


def _layers(policy: SandboxPolicy) -> dict[str, str]:
    return sandbox_layers(policy, describe_sandbox(policy))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the private world is Linux's")
def test_each_layer_of_the_private_world_is_reported_on_where_this_machine_gives_it(policy: SandboxPolicy) -> None:
    support = probe.support()
    if not (support.pid_namespace and support.private_dev and support.landlock_enforced):
        pytest.skip(f"this machine cannot give bash the whole private world: {support}")
    layers = _layers(replace(policy, protected_names=(".mcp.json", ".git/config"), shell_lifetime_seconds=60))
    for name in NEW_LAYERS:
        assert layers[name].startswith("on: "), (name, layers[name])
    assert ".mcp.json, .git/config" in layers["protected_names"]
    assert "at most 8 run per session, each killed after 60 s" in layers["shells_per_session"]
    assert all(f"{name} on" in summary(layers) for name in NEW_LAYERS)


def test_rwx_mode_says_what_it_leaves_out(tmp_path: Path) -> None:
    policy = SandboxPolicy(mode="rwx", home=tmp_path / "home", workspace=tmp_path / "ws")
    layers = _layers(policy)
    assert set(NEW_LAYERS) <= set(layers)
    assert layers["private_tmp"] == "off: rwx mode shares the host's"
    assert layers["file_tools_in_world"].startswith("off: rwx mode has no sandbox world")
    assert layers["protected_names"].startswith("on for the file tools only")
    assert "protected_names on for the file tools only (.mcp.json" in summary(layers)
    assert "()" not in summary(layers)  # a state without a reason is not given an empty one
    assert layers["hidden_by_identity"] == "off: rwx mode hides nothing"
