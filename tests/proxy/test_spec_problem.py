"""`DownstreamSpec.problem`: a server the config marks broken carries why into its spec."""

from __future__ import annotations

from pathlib import Path

from omega_mcp.config import load_config
from omega_mcp.proxy.spec import DownstreamSpec


def test_a_spec_from_config_carries_the_servers_problem_and_a_good_server_has_none(tmp_path: Path) -> None:
    path = tmp_path / "servers.toml"
    path.write_text('[servers.brave]\ncommand = "npx"\nenv = { K = "${KEY}" }\n\n[servers.time]\ncommand = "uvx"\n')
    config = load_config(path, environ={})
    specs = [DownstreamSpec.from_config(n, s, problem=config.server_problem(n)) for n, s in config.servers.items()]
    assert [(s.server_name, s.problem) for s in specs] == [
        ("brave", "unset environment variable KEY (servers.brave.env.K)"),
        ("time", None),
    ]
    assert DownstreamSpec.from_config("brave", config.servers["brave"]).problem is None
