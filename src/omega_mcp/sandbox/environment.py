"""The environment bash runs with, in every mode: built from an allow-list, never copied wholesale.

The server's own environment holds provider keys and socket addresses (ssh-agent, D-Bus) that a
prompt-injected command could use or exfiltrate, so only a few core variables are inherited, and
even those are dropped when their name looks like a credential. `[sandbox] env_passthrough`
names (or `fnmatch` globs) pass variables through on purpose. Non-interactive defaults keep tools
from waiting for a terminal, and under the OS sandbox TMPDIR and caches point at writable dirs.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping

from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = ["bash_environment", "looks_secret"]

_INHERITED = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LC_ALL", "LC_CTYPE"}
)
_INHERITED_PREFIXES = ("LC_",)
_SECRETISH = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|COOKIE|SESSION|AUTH|PRIVATE", re.IGNORECASE)
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NON_INTERACTIVE = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
    "EDITOR": "true",
    "VISUAL": "true",
    "DEBIAN_FRONTEND": "noninteractive",
    "PYTHONUNBUFFERED": "1",
    "NO_COLOR": "1",
    "TERM": "dumb",
}


def looks_secret(name: str) -> bool:
    """True for names like `*_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD*` (and kin: auth, session...)."""
    return bool(_SECRETISH.search(name))


def _passed_through(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def bash_environment(policy: SandboxPolicy, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment for one bash command under `policy`.

    Order of precedence (last wins): inherited core variables, non-interactive defaults, the
    sandbox's writable TMPDIR and cache dirs (sandbox and rx modes), `env_passthrough`, and
    `OMEGA_SANDBOX=<mode>`. Nothing else of `environ` (default `os.environ`) reaches bash.
    """
    source = os.environ if environ is None else environ
    items = list(source.items())  # os.environ decodes every name and value it yields: once
    env = {
        name: value
        for name, value in items
        if (name in _INHERITED or name.startswith(_INHERITED_PREFIXES)) and not looks_secret(name)
    }
    env.setdefault("PATH", _DEFAULT_PATH)
    env.update(_NON_INTERACTIVE)
    if policy.mode != "rwx":
        # Landlock denies writes to /tmp-as-configured-elsewhere and ~/.cache: point them inside.
        cache = policy.scratch_dir / "cache"
        env["TMPDIR"] = str(policy.tmp_dir)
        env["XDG_CACHE_HOME"] = str(cache)
        env["npm_config_cache"] = str(cache / "npm")
        env["PIP_CACHE_DIR"] = str(cache / "pip")
    if policy.mode == "sandbox":
        env["OMEGA_SANDBOX_NETWORK_DISABLED"] = "1"
    if policy.env_passthrough:
        for name, value in items:
            if _passed_through(name, policy.env_passthrough):
                env[name] = value
    env["OMEGA_SANDBOX"] = policy.mode
    return env
