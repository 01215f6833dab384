"""Every protection layer as `on: ...` or `off: <why>`: what `tools --json` and the startup log show.

Built from `describe_sandbox`'s plan (what this kernel and mode really give bash) plus the layers
that do not depend on the kernel (the planted-config guard, protected names for the file tools,
per-session shells, downstreams dying with omega). A user reading one of these lines learns what is
enforced here and what is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omega_mcp.sandbox.policy import MAX_SHELLS_PER_SESSION, SandboxPolicy

__all__ = ["sandbox_layers", "summary"]


def _landlock(sandbox: Mapping[str, Any]) -> str:
    if sandbox.get("refusal"):
        return f"off: bash refused: {sandbox['refusal']}"
    if sandbox.get("confinement") == "landlock":
        return f"on: ABI {sandbox.get('landlock_abi')}, writes only under the write roots"
    if sandbox.get("confinement") == "sandbox-exec":
        return "on: macOS sandbox-exec profile (writes only under the write roots)"
    if sandbox.get("mode") == "rwx":
        return "off: rwx mode confines nothing"
    return "off: no OS sandbox here, and require_os_sandbox = false"


def _secrets(policy: SandboxPolicy, sandbox: Mapping[str, Any], hidden: list[str], confined: bool) -> str:
    if policy.mode == "rwx":
        return "off: rwx mode hides nothing"
    if not (confined and sandbox.get("pid_namespace")):
        return "off for bash (it needs a mount namespace); read still refuses the hide list"
    if hidden:
        return f"on: {len(hidden)} existing path(s) of the hide list covered for bash and refused by read"
    return "on: none of the hide list exists here"


def summary(layers: Mapping[str, str]) -> str:
    """The layers in one log line: `name on`, `name off (why)`, or `name STATE` for a partial one
    (`protected_names on for the file tools only (...)`)."""
    parts: list[str] = []
    for name, state in layers.items():
        on, colon, why = state.partition(": ")
        parts.append(f"{name} {state}" if not colon else f"{name} {on}" if on == "on" else f"{name} {on} ({why})")
    return "sandbox layers: " + "; ".join(parts)


def _no_namespaces(sandbox: Mapping[str, Any]) -> str:
    """Why bash has no namespaces of its own, as the probe found it (refused, or no mounts in them)."""
    detail = str(sandbox.get("probe_detail") or "")
    return f"no usable user namespaces ({detail})" if detail else "user namespaces unavailable"


def sandbox_layers(
    policy: SandboxPolicy, sandbox: Mapping[str, Any], servers: Mapping[str, bool] | None = None
) -> dict[str, str]:
    """One line per layer, keyed by name; `sandbox` is `describe_sandbox(policy)`, `servers` maps each
    stdio server to whether it runs confined (`sandbox/servers.py`)."""
    confined = sandbox.get("confinement") not in (None, "none") and not sandbox.get("refusal")
    hidden = list(sandbox.get("hidden_paths") or [])
    protected = list(sandbox.get("protected_read_only") or [])
    return {
        "landlock": _landlock(sandbox),
        "pid_namespace": "on: every process of a command dies with it"
        if sandbox.get("pid_namespace")
        else f"off: {_no_namespaces(sandbox)} (process groups only)",
        "network_namespace": str(sandbox.get("network_namespace", "off")),
        "unix_sockets_hidden": str(sandbox.get("unix_sockets_hidden", "off")),
        "secrets_hidden": _secrets(policy, sandbox, hidden, confined),
        "hidden_by_identity": _identity(policy, sandbox),
        "own_files_read_only": f"on: {len(protected)} bind(s) inside the write roots"
        if protected
        else "on: none of omega's files lies inside a write root",
        "protected_names": _protected(policy, sandbox, confined),
        "private_tmp": _private(
            sandbox, "a /tmp per client session under $OMEGA_HOME/clients/<client>/tmp, shared with read/write/edit"
        ),
        "file_tools_in_world": _file_tools(sandbox),
        "private_dev": _private(sandbox, "/dev holds null, zero, full, random, urandom, tty, its own pts and /dev/shm")
        if sandbox.get("private_dev") or not sandbox.get("private_world")
        else "off: this machine cannot mount a private /dev (bash gets no terminal at all)",
        "session_keyring": _private(sandbox, "a fresh, empty session keyring")
        if sandbox.get("session_keyring")
        else "off: this kernel has no keyrings (nothing to inherit)",
        "unprivileged_in_namespace": _uid(sandbox),
        "planted_config_guard": "on: a ./servers.toml in a writable place is not loaded without --config",
        "shells_per_session": f"on: a background shell belongs to the session that started it; at most "
        f"{MAX_SHELLS_PER_SESSION} run per session, each killed after {policy.shell_lifetime_seconds:g} s "
        "(shell_lifetime)",
        "downstreams_die_with_omega": "on: PR_SET_PDEATHSIG on every stdio server (its own children: group kill only)",
        "downstream_confinement": _servers(servers or {}),
    }


def _private(sandbox: Mapping[str, Any], what: str) -> str:
    if sandbox.get("private_world"):
        return f"on: {what}"
    if sandbox.get("mode") == "rwx":
        return "off: rwx mode shares the host's"
    return "off: needs a mount namespace (user namespaces unavailable)"


def _file_tools(sandbox: Mapping[str, Any]) -> str:
    alone = "read, write and edit use omega's path checks alone"
    if sandbox.get("mode") == "rwx":
        return f"off: rwx mode has no sandbox world ({alone})"
    if sandbox.get("refusal"):
        return f"off: bash is refused here ({alone})"
    if not sandbox.get("private_world"):
        return f"off: needs user namespaces ({alone})"
    return (
        "on: read opens files inside the calling session's sandbox world, where its bash would; "
        "write and edit keep the path checks in omega's process"
    )


def _protected(policy: SandboxPolicy, sandbox: Mapping[str, Any], confined: bool) -> str:
    names = ", ".join(policy.protected_names)
    if not names:
        return "off: [sandbox] unprotect removed them all"
    if policy.mode == "rwx" or not confined:
        return f"on for the file tools only ({names}); bash is not confined here"
    binds = "read-only" if sandbox.get("pid_namespace") else "not read-only (no mount namespace)"
    return f"on: {names}: denied to the file tools; for bash {binds} where they exist, undone where created"


def _identity(policy: SandboxPolicy, sandbox: Mapping[str, Any]) -> str:
    if policy.mode == "rwx":
        return "off: rwx mode hides nothing"
    pins = len(sandbox.get("pinned_above_hidden") or [])
    return f"on: read refuses a hidden path under any name; {pins} directory(ies) above hidden paths pinned for bash"


def _uid(sandbox: Mapping[str, Any]) -> str:
    inside = sandbox.get("uid_inside")
    if inside is None:
        return "off: no user namespace (bash keeps omega's uid)"
    return f"on: bash runs as uid {inside} without capabilities in its namespace; its init is not dumpable"


def _servers(servers: Mapping[str, bool]) -> str:
    confined = [name for name, on in servers.items() if on]
    if not confined:
        return 'off: downstream servers run with your rights; [sandbox] servers = "confined" confines them'
    others = [name for name, on in servers.items() if not on]
    return f"on: {', '.join(confined)} confined" + (f"; {', '.join(others)} run with your rights" if others else "")
