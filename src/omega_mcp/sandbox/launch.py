"""How bash is started: the trampoline options and argv, its scrubbed env and its cwd.

`bash_launch(policy, command)` is the only thing `builtin/bash.py` asks of the sandbox; it raises
`SandboxUnavailableError` when the mode needs an OS sandbox this machine cannot give (fail closed;
`[sandbox] require_os_sandbox = false` opts out). The options are `exec.py`'s, which the bash zygote
(`zygote.py`) applies where bash gets namespaces, and the trampoline otherwise (and for confined
servers, through `confined_argv`). On Linux every mode has rlimits and the PID namespace; sandbox/rx
add Landlock, read-only binds over omega's own files when they lie inside a writable root and over
the protected names that exist (`protected`, from `tracker.py`), and hide secrets
(`SandboxPolicy.hidden_paths`, pinned: `mountplan.py`), well-known socket directories and the host's
pathname UNIX sockets outside the roots, and give bash a private world: the session's /tmp
(`SandboxPolicy.private_tmp`, else an empty one), a minimal /dev with its own pts and /dev/shm, a
fresh session keyring; sandbox also gives bash a network namespace of its own (loopback only), or
denies TCP with Landlock where there is none. On macOS sandbox/rx use `sandbox-exec` with paths
passed as `-D` parameters. `describe_sandbox` reports the same plan.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omega_mcp.errors import InvalidArgumentsError, SandboxUnavailableError, ToolError
from omega_mcp.sandbox import probe
from omega_mcp.sandbox.child.private import UNPRIVILEGED_ID
from omega_mcp.sandbox.environment import bash_environment
from omega_mcp.sandbox.mountplan import SOCKET_PLACES, hiding, own_files, protection, real, real_roots, within
from omega_mcp.sandbox.policy import SandboxPolicy

__all__ = [
    "DEFAULT_MAX_FILE_SIZE_MB",
    "DEFAULT_MAX_OPEN_FILES",
    "DEFAULT_MAX_PROCESSES",
    "BashLaunch",
    "bash_launch",
    "confined_argv",
    "describe_sandbox",
]

DEFAULT_MAX_PROCESSES = 512
DEFAULT_MAX_FILE_SIZE_MB = 4096
DEFAULT_MAX_OPEN_FILES = 8192
_MIB = 1024 * 1024
_PID_RESERVED = 300  # after the first wrap the kernel hands out pids from 300 up to pid_max
_MIN_ABI = {"sandbox": 4, "rx": 3}  # 4: TCP rules; 3: TRUNCATE (else O_TRUNC wipes any file)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts")
_GPU_PREFIXES = ("nvidia", "dri")
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_MACOS_PROFILE_HEAD = "(version 1)\n(allow default)\n(deny file-write*)\n"


@dataclass(frozen=True, slots=True)
class BashLaunch:
    """What to run for one bash command: `argv` through the trampoline, or (`zygote`) `program` under
    the trampoline `options` through the bash zygote (`zygote_client.start`), which starts it faster.

    Spawn `argv` from a long-lived thread (the event loop): the trampoline arms PR_SET_PDEATHSIG,
    which fires when the *thread* that forked it exits.
    """

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    options: tuple[str, ...] = ()
    """The trampoline options (what `exec.parse` reads before `--`)."""
    program: tuple[str, ...] = ()
    """What runs under them: bash and its arguments."""
    zygote: bool = False
    """The plan has the namespaces the zygote needs (Linux with user namespaces), so it can start this."""


@dataclass(frozen=True, slots=True)
class _Plan:
    confinement: str  # "landlock" | "sandbox-exec" | "none"
    landlock_abi: int
    network: bool
    pid_namespace: bool
    write_roots: tuple[Path, ...]
    binds: tuple[tuple[str, Path], ...]
    unprotected: tuple[Path, ...]
    warnings: tuple[str, ...]
    refusal: str | None
    netns: bool = False
    hide: tuple[Path, ...] = ()
    hide_sockets: bool = False
    private: bool = False
    """A private world: /tmp, /dev, /dev/shm (bash and confined servers in sandbox and rx modes)."""
    private_dev: bool = False


def _bash() -> str:
    return "/bin/bash" if os.path.exists("/bin/bash") else shutil.which("bash") or "/bin/bash"


def _refusal(policy: SandboxPolicy, support: probe.Support, need: int) -> str:
    have = f"Landlock ABI {support.landlock_abi}" if support.landlock_abi else "no usable Landlock"
    if support.platform == "darwin":
        have = "no /usr/bin/sandbox-exec"
    why = f" ({support.detail})" if support.detail else ""
    if policy.server_name is not None:
        return (
            f"cannot start confined: the server sandbox needs Landlock ABI >= {need} on Linux (or "
            f'sandbox-exec on macOS), but this machine has {have}{why}; set `sandbox = "none"` in '
            f"[servers.{policy.server_name}] to run it unconfined, or `require_os_sandbox = false` in [sandbox]"
        )
    return (
        f"bash is unavailable: {policy.mode!r} mode confines bash with the OS sandbox "
        f"(Landlock ABI >= {need} on Linux, sandbox-exec on macOS), but this machine has {have}{why}. "
        "To run bash without OS confinement, set `require_os_sandbox = false` in the [sandbox] "
        "section of servers.toml, or start omega in rwx mode."
    )


def _plan(policy: SandboxPolicy) -> _Plan:
    support = probe.support()
    roots = tuple(dict.fromkeys(policy.bash_write_roots))
    warnings: list[str] = []
    missing = [r for r in policy.write_roots if not r.is_dir()]
    if missing:
        warnings.append(f"write_roots that do not exist are skipped: {', '.join(map(str, missing))}")
    roots = tuple(r for r in roots if r not in missing)
    pidns = support.pid_namespace
    if policy.mode == "rwx":
        return _Plan("none", 0, True, pidns, (Path("/"),), (), (), tuple(warnings), None)
    need = _MIN_ABI[policy.mode]
    if support.platform == "darwin" and support.sandbox_exec:
        return _Plan("sandbox-exec", 0, policy.bash_network, False, roots, (), (), tuple(warnings), None)
    abi = support.landlock_abi if support.landlock_enforced else 0
    if abi >= need or (abi and not policy.require_os_sandbox):
        binds: tuple[tuple[str, Path], ...] = ()
        unprotected: tuple[Path, ...] = ()
        reals = real_roots(roots)
        if pidns:
            binds, unprotected, more = protection(policy, roots, reals)
            warnings.extend(more)
        else:
            unprotected = tuple(p for p in own_files(policy) if any(within(p, r) for r in reals.values()))
            if unprotected:
                warnings.append(f"bash can write omega's own files: {', '.join(map(str, unprotected))}")
        # With the binds, what is left unprotected is a ./servers.toml that does not exist yet: bash
        # may create it, and the CLI refuses to load such a file implicitly (cli/trust.py).
        network = policy.bash_network or abi < 4
        if abi < need:
            warnings.append(f"Landlock ABI {abi} is below {need}: bash is only partly confined")
        if os.path.isdir("/dev/shm") and (support.private_dev or not pidns):
            # POSIX shared memory (multiprocessing locks): the private /dev's own, or (no namespaces,
            # no private world at all) the host's; never the host's when the rest is private.
            roots = (*roots, Path("/dev/shm"))
        netns = pidns and support.net_namespace and not policy.bash_network
        hide: tuple[Path, ...] = ()
        if pidns:
            hide, pins = hiding(policy, roots, warnings, reals)
            binds = tuple(dict.fromkeys((*pins, *binds)))
        private_dev = pidns and support.private_dev
        return _Plan(
            "landlock",
            abi,
            network,
            pidns,
            roots,
            binds,
            unprotected,
            tuple(warnings),
            None,
            netns,
            hide,
            pidns,
            private=pidns,
            private_dev=private_dev,
        )
    if policy.require_os_sandbox:
        return _Plan("none", 0, True, pidns, (), (), (), tuple(warnings), _refusal(policy, support, need))
    warnings.append(f"bash runs WITHOUT OS confinement (require_os_sandbox = false): {support.detail}")
    return _Plan("none", 0, True, pidns, (Path("/"),), (), (), tuple(warnings), None)


def _limits(policy: SandboxPolicy) -> dict[str, int | None]:
    return {
        "max_processes": policy.max_processes or DEFAULT_MAX_PROCESSES,
        "max_file_size_mb": policy.max_file_size_mb or DEFAULT_MAX_FILE_SIZE_MB,
        "max_open_files": policy.max_open_files or DEFAULT_MAX_OPEN_FILES,
        "memory_mb": policy.memory_mb,
    }


def _devices(plan: _Plan) -> list[str]:
    # Without a private /dev, a terminal bash may open would be one of the host's (/dev/pts/N).
    wanted = _DEVICES if plan.private_dev or not plan.private else _DEVICES[:-2]
    found = [d for d in wanted if os.path.exists(d)]
    try:
        found += sorted(f"/dev/{n}" for n in os.listdir("/dev") if n.startswith(_GPU_PREFIXES))
    except OSError:
        pass
    return found


def _trampoline_options(policy: SandboxPolicy, plan: _Plan, protected: Sequence[str] = ()) -> list[str]:
    processes = policy.max_processes or DEFAULT_MAX_PROCESSES
    file_size = (policy.max_file_size_mb or DEFAULT_MAX_FILE_SIZE_MB) * _MIB
    open_files = policy.max_open_files or DEFAULT_MAX_OPEN_FILES
    argv: list[str] = []
    if sys.platform.startswith("linux"):
        argv += ["--parent-pid", str(os.getpid())]
    argv += ["--rlimit", "core=0", "--rlimit", f"fsize={file_size}", "--rlimit", f"nofile={open_files}"]
    argv += ["--nproc-headroom", str(processes)]
    if policy.memory_mb:
        argv += ["--rlimit", f"data={policy.memory_mb * _MIB}"]
    if plan.pid_namespace:
        argv += ["--pidns", "--pid-max", str(processes + _PID_RESERVED)]
    if plan.netns:
        argv.append("--netns")
    if plan.private:
        argv += ["--private-tmp", str(policy.tmp_dir)]
        if policy.server_name is not None:
            argv.append("--keep-program")  # a server that lives under /tmp still runs
        elif policy.private_tmp is not None:
            argv += ["--tmp-source", str(policy.private_tmp)]
    if plan.private_dev:
        argv.append("--private-dev")
    for op, path in plan.binds:
        argv += [f"--{op}", str(path)]
    if plan.pid_namespace:
        for path in protected:
            argv += ["--readonly", path]
    for path in plan.hide:
        argv += ["--hide", str(path)]
    if plan.hide_sockets:
        argv.append("--hide-sockets")
    if plan.confinement == "landlock":
        argv += ["--landlock", str(plan.landlock_abi)]
        for root in plan.write_roots:
            # Where the root really was when omega started: never re-resolved, so a root that bash
            # renamed and replaced by a symbolic link is not granted (the trampoline also refuses links).
            # The private /tmp is granted where it is mounted.
            where = root if plan.private and root == policy.tmp_dir else policy.pinned_roots.get(root, root)
            argv += ["--rw", str(where)]
        for device in _devices(plan):
            argv += ["--dev", device]
        if not plan.network and not plan.netns:
            # With its own network namespace bash reaches nothing but its own loopback, where TCP
            # must work (a test server and its client); the Landlock TCP deny is the fallback.
            argv.append("--deny-tcp")
    return argv


def _macos_argv(policy: SandboxPolicy, plan: _Plan) -> list[str]:
    # Paths travel as -D parameters and are only referenced by name: never spliced into the text.
    params: list[str] = []
    allow: list[str] = []
    for i, root in enumerate(plan.write_roots):
        params += ["-D", f"W{i}={real(root)}"]
        allow.append(f'(subpath (param "W{i}"))')
    deny: list[str] = []
    for i, path in enumerate(policy.protected_paths):
        params += ["-D", f"P{i}={real(path)}"]
        deny.append(f'(subpath (param "P{i}"))')
    profile = _MACOS_PROFILE_HEAD
    profile += f'(allow file-write* {" ".join(allow)} (literal "/dev/null") (regex #"^/dev/(fd/|tty)"))\n'
    if deny:
        profile += f"(deny file-write* {' '.join(deny)})\n"
    if not plan.network:
        profile += '(deny network-outbound (remote ip "*:*"))\n(deny network-bind (local ip "*:*"))\n'
    return [str(probe.SANDBOX_EXEC), "-p", profile, *params]


def _ensure_dirs(policy: SandboxPolicy) -> bool:
    """Make what bash needs; whether anything was made (which changes what to pin and protect)."""
    dirs = [(policy.workspace, 0o755), (policy.tmp_dir, 0o700), (policy.client_dir, 0o700), (policy.scratch_dir, 0o700)]
    if policy.private_tmp is not None:
        dirs += [(policy.private_tmp_root, 0o700), (policy.private_tmp, 0o700)]
    if policy.mode != "rwx":
        dirs.append((policy.scratch_dir / "cache", 0o777))
    made = False
    for directory, mode in dirs:
        if directory.is_dir():
            continue
        try:
            directory.mkdir(mode=mode, parents=True, exist_ok=True)
        except OSError as exc:
            raise ToolError(
                f"cannot create {directory} for bash: {exc.strerror}; create it or fix the config"
            ) from None
        made = True
    return made


def _check_workspace_not_swapped(policy: SandboxPolicy) -> None:
    """Refuse to run bash in a workspace that is no longer the directory omega started with.

    A workspace inside another writable root (/tmp) can be renamed by bash and replaced by a link
    to anywhere. Its Landlock grant is pinned (and so stays on the original), but bash would still
    start in the impostor directory: say so instead of running commands somewhere unexpected.
    """
    pinned = policy.pinned_roots.get(policy.workspace)
    if pinned is not None and real(policy.workspace) != pinned:
        raise SandboxUnavailableError(
            f"the workspace {policy.workspace} is no longer the directory omega started with (it now "
            f"resolves to {real(policy.workspace)}); bash will not run there. Restore it (it was {pinned}) "
            "or restart omega."
        )


def bash_launch(policy: SandboxPolicy, command: str, protected: Sequence[str] = ()) -> BashLaunch:
    """The argv, env and cwd that run `command` with bash under `policy`; `protected` are the protected
    names that exist (`tracker.Run.binds`), bound read-only.

    Creates the workspace, tmp and scratch dirs when missing. Commands over 128 KiB do not fit
    in one argv string: run them as `bash FILE` (replace the trailing `-c COMMAND` of `argv` and
    `program`).

    Raises:
        SandboxUnavailableError: the mode needs an OS sandbox that cannot be applied here, or the
            workspace was replaced since omega started.
        InvalidArgumentsError: the command contains a NUL byte.
        ToolError: a directory bash needs cannot be created.
    """
    if "\0" in command:
        raise InvalidArgumentsError("command contains a NUL byte, which no shell command can contain")
    plan = _plan(policy)
    if plan.refusal is not None:
        raise SandboxUnavailableError(plan.refusal)
    if _ensure_dirs(policy):
        plan = _plan(policy)  # what exists only now changes what to pin and protect
    program = (_bash(), "--noprofile", "--norc", "-c", command)
    if plan.confinement != "none":
        _check_workspace_not_swapped(policy)
    options = tuple(_trampoline_options(policy, plan, protected))
    prefix = _macos_argv(policy, plan) if plan.confinement == "sandbox-exec" else []
    argv = (*prefix, *probe.TRAMPOLINE_ARGV, *options, "--", *program)
    zygote = plan.pid_namespace and plan.confinement != "sandbox-exec" and sys.platform.startswith("linux")
    return BashLaunch(argv, bash_environment(policy), policy.workspace, options, program, zygote)


def confined_argv(policy: SandboxPolicy, program: Sequence[str], protected: Sequence[str] = ()) -> list[str]:
    """`program` (an absolute path first) started through the trampoline under `policy`, behind
    sandbox-exec on macOS: the one launch path of bash and of confined downstream servers. `protected`
    paths are bound read-only where they exist.

    Raises:
        SandboxUnavailableError: the OS sandbox the policy needs cannot be applied here, or the
            workspace was replaced since omega started.
    """
    return _confined_argv(policy, _plan(policy), program, protected)


def _confined_argv(policy: SandboxPolicy, plan: _Plan, program: Sequence[str], protected: Sequence[str]) -> list[str]:
    if plan.refusal is not None:
        raise SandboxUnavailableError(plan.refusal)
    if plan.confinement != "none":
        _check_workspace_not_swapped(policy)
    prefix = _macos_argv(policy, plan) if plan.confinement == "sandbox-exec" else []
    return [*prefix, *probe.TRAMPOLINE_ARGV, *_trampoline_options(policy, plan, protected), "--", *program]


def _launcher(plan: _Plan, support: probe.Support) -> str:
    if plan.refusal:
        return "none: bash is refused"
    if plan.pid_namespace and plan.confinement != "sandbox-exec" and support.platform == "linux":
        return (
            "zygote: one pre-forked launcher; each client session's namespaces, mounts and Landlock "
            "ruleset are made once, each command is a fork with a PID namespace of its own"
        )
    return "trampoline: a new `python -I -S` per command (no user namespaces here)"


def _above_hidden(path: Path, hidden: tuple[Path, ...]) -> bool:
    return any(path in real(h).parents for h in hidden)


def describe_sandbox(policy: SandboxPolicy) -> dict[str, object]:
    """The effective bash sandbox as JSON-ready data, for the startup log and `tools --json`.

    Never raises: a refusal is reported under `refusal` (bash calls will fail with that text).
    """
    plan = _plan(policy)
    support = probe.support()
    limits = _limits(policy)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    if plan.pid_namespace and support.pid_max:
        process_limit = (
            f"pid namespace: {limits['max_processes']} processes (up to {_PID_RESERVED} more before pid wrap)"
        )
    elif uid != 0 and support.platform == "linux":
        process_limit = f"RLIMIT_NPROC: current processes of uid {uid} + {limits['max_processes']}"
    else:
        process_limit = "none (needs a pid namespace with its own pid_max, or a non-root user on Linux)"
    if plan.confinement == "none" or plan.network:
        network = "allowed"
    elif plan.netns:
        network = "denied: bash has its own network namespace (loopback only: no TCP, UDP, ICMP, host abstract sockets)"
    else:
        network = "TCP bind/connect denied (no network namespace here, so UDP is not restricted)"
    if plan.netns:
        netns = "on: a network namespace of its own, loopback only"
    elif plan.confinement == "none" or plan.network:
        netns = f"off: {policy.mode} mode keeps the host network" if plan.confinement != "none" else "off: unconfined"
    elif support.platform != "linux":
        netns = "off: Linux only (TCP is denied by the OS sandbox instead)"
    else:
        netns = "off: this machine cannot give bash a network namespace (user namespaces unavailable)"
    places = [str(p) for p in plan.hide if str(p) in SOCKET_PLACES]
    if plan.hide_sockets:
        sockets = "on: the host's pathname UNIX sockets outside the write roots (listed at each call) are covered"
        sockets += f", and {', '.join(places)}" if places else ""
    elif plan.confinement == "none":
        sockets = "off: unconfined"
    elif support.platform != "linux":
        sockets = "off: Linux only"
    else:
        sockets = "off: needs a mount namespace (user namespaces unavailable)"
    return {
        "platform": support.platform,
        "mode": policy.mode,
        "bash": "refused" if plan.refusal else ("confined" if plan.confinement != "none" else "unconfined"),
        "confinement": plan.confinement,
        "landlock_abi": support.landlock_abi,
        "write_roots": [str(r) for r in plan.write_roots],
        "network": network,
        "pid_namespace": plan.pid_namespace,
        "private_proc": plan.pid_namespace and support.mount_proc,
        "process_limit": process_limit,
        "limits": limits,
        "protected_read_only": [str(p) for op, p in plan.binds if op == "protect"],
        "unprotected_own_files": [str(p) for p in plan.unprotected],
        "env_passthrough": list(policy.env_passthrough),
        "network_namespace": netns,
        "unix_sockets_hidden": sockets,
        "hidden_paths": [str(p) for p in plan.hide if str(p) not in SOCKET_PLACES],
        "pinned_above_hidden": [str(p) for op, p in plan.binds if op == "pin" and _above_hidden(p, plan.hide)],
        "private_world": plan.private,
        "private_dev": plan.private_dev,
        "session_keyring": support.keyring or support.platform != "linux",
        "uid_inside": (UNPRIVILEGED_ID if uid == 0 else uid) if plan.pid_namespace else None,
        "launcher": _launcher(plan, support),
        "warnings": list(plan.warnings),
        "refusal": plan.refusal,
        "probe_detail": support.detail,
    }
