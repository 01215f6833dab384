"""What omega checks before it starts anything: sane write roots, and no config a model could have planted.

Runs in `main` right after the config is loaded and before any downstream server is started (a
planted config's servers must never run, not even early). Unsafe roots are a config error in
`sandbox` and `rx` mode and a loud warning in `rwx` (see `sandbox/roots.py`). A `servers.toml`
found only by the implicit lookup in the current directory is refused when it lies where the
tools may write, judged by every policy that could have been in force: the flags with the
defaults, the user's own `$OMEGA_HOME/servers.toml`, and the found file itself.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from omega_mcp.config import Config, load_config, omega_home
from omega_mcp.errors import ConfigError

if TYPE_CHECKING:
    from omega_mcp.sandbox.policy import SandboxPolicy
    from omega_mcp.sandbox.roots import RootProblem
    from omega_mcp.sandbox.untrusted import LaunchGuard

__all__ = ["check_trust", "launch_guard", "policy_for", "server_root_problems"]

logger = logging.getLogger("omega_mcp")


def policy_for(config: Config, args: argparse.Namespace) -> SandboxPolicy:
    """The sandbox policy of this run: flags (`--mode`, `--workspace`) over the config over defaults."""
    from omega_mcp.sandbox.policy import SandboxPolicy

    workspace = Path(os.path.expanduser(args.workspace)).absolute() if getattr(args, "workspace", None) else None
    return SandboxPolicy.from_settings(
        config.sandbox, config.place, mode=getattr(args, "mode", None), workspace=workspace
    )


def launch_guard(config: Config, args: argparse.Namespace) -> LaunchGuard:
    """What keeps this run's stdio servers away from its write roots (`sandbox/untrusted.py`)."""
    from omega_mcp.sandbox.untrusted import LaunchGuard

    guard = LaunchGuard.of(policy_for(config, args))
    return guard.widened(c.workspace for c in config.hub.clients.values() if c.workspace)


def _implicit_cwd_config(config: Config, args: argparse.Namespace) -> bool:
    if config.path is None or getattr(args, "config", None) or os.environ.get("OMEGA_CONFIG"):
        return False
    return config.path == (Path.cwd() / "servers.toml").absolute()


def check_trust(config: Config, args: argparse.Namespace) -> None:
    """Refuse unsafe write roots and an implicitly found config that a tool could have written.

    Raises:
        ConfigError: an unsafe root in sandbox/rx mode (every one listed), or a planted-looking config.
    """
    from omega_mcp.sandbox.roots import root_problems

    policy = policy_for(config, args)
    if _implicit_cwd_config(config, args):
        _refuse_planted(config, args, policy)
    key = "--workspace" if getattr(args, "workspace", None) else "sandbox.workspace"
    problems = root_problems(policy, workspace_key=key) + server_root_problems(config)
    warned = problems if policy.mode == "rwx" else []
    refused = [] if policy.mode == "rwx" else problems
    for name, client in config.hub.clients.items():  # a hub client's own workspace, judged in its own mode
        if client.workspace is not None:
            found = root_problems(policy, roots=[(f"hub.clients.{name}.workspace", client.workspace)])
            (warned if (client.mode or policy.mode) == "rwx" else refused).extend(found)
    for problem in warned:
        logger.warning("UNSAFE write root (allowed in rwx mode only): %s", problem)
    if refused:
        path = str(config.path) if config.path else None
        errors = [ConfigError(f"{p.root} {p.reason}; pick another directory", path=path, key=p.key) for p in refused]
        raise ConfigError.combine(errors) if len(errors) > 1 else errors[0]


def server_root_problems(config: Config) -> list[RootProblem]:
    """What a confined server may write (its declared `write_roots`, its `cwd`), judged as `[sandbox]`'s roots."""
    from omega_mcp.sandbox.roots import root_problems
    from omega_mcp.sandbox.servers import server_policy

    problems: list[RootProblem] = []
    for name, entry in config.servers.items():
        settings = entry.confinement(config.sandbox.servers)
        server = server_policy(config.for_servers, name) if settings is not None and entry.enabled else None
        if server is None or settings is None:
            continue
        if settings.read_only:
            continue  # it writes nothing but its private /tmp
        roots = [(f"servers.{name}.sandbox.write_roots", root) for root in settings.write_roots]
        if entry.cwd is not None:
            roots.append((f"servers.{name}.cwd", entry.cwd))
        problems += root_problems(server, roots=roots)
    return problems


def _refuse_planted(config: Config, args: argparse.Namespace, policy: SandboxPolicy) -> None:
    from omega_mcp.sandbox.roots import planted_config_root

    assert config.path is not None
    trusted = [policy_for(Config(), args), policy]
    home_config = omega_home() / "servers.toml"
    if home_config.is_file():
        try:
            trusted.append(policy_for(load_config(home_config), args))
        except ConfigError:
            pass  # its own problems are reported when it is the config in use
    root = planted_config_root(config.path, trusted)
    if root is not None:
        raise ConfigError(
            f"not loaded: it was found in the current directory, inside {root}, where omega's tools may "
            "write, so a model could have put it there; pass it with --config to use it",
            path=str(config.path),
        )
