"""What OS confinement this machine can give bash, probed once per process and cached.

On Linux the probe runs the trampoline (`exec.py --probe`) in a subprocess, because namespaces
cannot be entered from a threaded server and Landlock must be seen to *deny* something before we
trust it: it reports the Landlock ABI, whether a restricted process really lost write access,
and whether user+PID+mount namespaces, a network namespace, a private /proc, a per-namespace
`pid_max`, a private /dev (its own devpts) and a fresh session keyring work.
`OMEGA_FORCE_NO_LANDLOCK=1` (checked on every call, not cached) makes Landlock look absent, so
tests and users can exercise the fail-closed path.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = [
    "FORCE_NO_LANDLOCK_ENV",
    "SANDBOX_EXEC",
    "TRAMPOLINE",
    "TRAMPOLINE_ARGV",
    "Support",
    "clear_cache",
    "support",
]

FORCE_NO_LANDLOCK_ENV = "OMEGA_FORCE_NO_LANDLOCK"
TRAMPOLINE = Path(__file__).parent / "child" / "exec.py"
_BOOTSTRAP = "import sys;sys.path.append(sys.argv.pop(1));import exec;raise SystemExit(exec.main(sys.argv[1:]))"
TRAMPOLINE_ARGV: tuple[str, ...] = (sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(TRAMPOLINE.parent))
"""How to start the trampoline: `-S` skips site (fast), so its directory goes on sys.path by hand
(appended: stdlib names must win) and it is imported from its cached .pyc rather than run as a
script (compiled every time). `-I` keeps the cwd, i.e. the workspace, off sys.path: code there
must never run before the sandbox is in place."""
SANDBOX_EXEC = Path("/usr/bin/sandbox-exec")
_PROBE_TIMEOUT_SECONDS = 15.0
_probe_lock = threading.Lock()
"""One probe at a time: `serve` starts the bash zygote (which asks first) in a thread while its main
thread describes the sandbox, and both must wait for the same run rather than start a second one."""


@dataclass(frozen=True, slots=True)
class Support:
    """The confinement features available here (all False/0 where unknown)."""

    platform: str
    landlock_abi: int = 0
    landlock_enforced: bool = False
    pid_namespace: bool = False
    net_namespace: bool = False
    """A network namespace can be entered together with the user namespace (bash's own loopback)."""
    mount_proc: bool = False
    pid_max: bool = False
    private_dev: bool = False
    """A minimal /dev with a devpts instance of its own can be mounted in the namespaces."""
    keyring: bool = False
    """A fresh session keyring can be joined (the kernel has keys, and this architecture's keyctl is known)."""
    sandbox_exec: bool = False
    detail: str = ""
    """Why a feature is missing, for messages (empty when everything works)."""


def _parse(output: str) -> dict[str, tuple[int, str]]:
    """`key=value [why]` lines -> {key: (value, why)}. A later line for a key wins: the probe says
    `pidns=1` once the namespaces are entered and `pidns=0 <why>` when a later step fails (the mounts
    refused inside them, as Ubuntu's AppArmor default gives), so that world is not used."""
    found: dict[str, tuple[int, str]] = {}
    for line in output.splitlines():
        key, _, rest = line.partition("=")
        value, _, why = rest.partition(" ")
        if key and value.lstrip("-").isdigit():
            found[key] = (int(value), why)
    return found


@functools.cache
def _probe() -> Support:
    if sys.platform == "darwin":
        return Support(platform="darwin", sandbox_exec=SANDBOX_EXEC.exists())
    if not sys.platform.startswith("linux"):
        return Support(platform=sys.platform, detail=f"no OS sandbox implementation for {sys.platform}")
    try:
        done = subprocess.run(
            [*TRAMPOLINE_ARGV, "--probe"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Support(platform="linux", detail=f"sandbox probe failed: {exc}")
    found = _parse(done.stdout.decode(errors="replace"))
    reasons = [why for _, why in found.values() if why]
    abi = found.get("landlock_abi", (0, ""))[0]
    if not abi:
        reasons.append("Landlock is not enabled in this kernel (needs Linux >= 5.13 with lsm=landlock)")
    stderr = done.stderr.decode(errors="replace").strip()
    if stderr:
        reasons.append(stderr.splitlines()[-1])
    return Support(
        platform="linux",
        landlock_abi=abi,
        landlock_enforced=found.get("landlock_enforced", (0, ""))[0] == 1,
        pid_namespace=found.get("pidns", (0, ""))[0] == 1,
        net_namespace=found.get("netns", (0, ""))[0] == 1,
        mount_proc=found.get("mount_proc", (0, ""))[0] == 1,
        pid_max=found.get("pid_max", (0, ""))[0] == 1,
        private_dev=found.get("private_dev", (0, ""))[0] == 1,
        keyring=found.get("keyring", (0, ""))[0] == 1,
        detail="; ".join(reasons),
    )


def support() -> Support:
    """The cached probe result, with `OMEGA_FORCE_NO_LANDLOCK` applied."""
    with _probe_lock:
        found = _probe()
    if os.environ.get(FORCE_NO_LANDLOCK_ENV, "") not in ("", "0"):
        return replace(
            found,
            landlock_abi=0,
            landlock_enforced=False,
            sandbox_exec=False,
            detail=f"OS sandbox forced off by {FORCE_NO_LANDLOCK_ENV}",
        )
    return found


def clear_cache() -> None:
    """Forget the probe (tests; or after the kernel/config changed under a long-lived process)."""
    with _probe_lock:
        _probe.cache_clear()
