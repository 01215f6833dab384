"""The exec trampoline: `exec.main([OPTIONS..., "--", PROGRAM, ARGS...])` in `python -I -S`.

Confined stdio servers start through this file (argv built by `launch.confined_argv`), and so does
bash where it gets no namespaces (elsewhere the bash zygote, `zygote.py`, applies the same options
with the same steps, parsed here); it sets the process up and `execve`s PROGRAM, in this order: die
with the server (PDEATHSIG), close stray fds, rlimits, then optionally user+PID+mount namespaces
(this process stays outside as a tiny supervisor; its child is the namespace's PID 1, non-dumpable,
and runs PROGRAM as PID 2; killing the supervisor or PID 1 kills the whole tree, `setsid` children
included; root becomes an unprivileged uid inside, `private.map_ids`), with `--netns` a network
namespace of its own too (loopback only), read-only binds over omega's own files and the protected
names (`--readonly`), `--private-tmp` (the session's directory `--tmp-source`, or an empty tmpfs,
over /tmp, its `--rw` roots inside bound back), `--hide` paths and (`--hide-sockets`) the host's
UNIX sockets outside the `--rw` roots covered, `--private-dev` (a minimal /dev, its own pts and
/dev/shm), then a fresh session keyring, Landlock, exec. The steps are functions a forked child can
call in order: per session (`map_ids`, the mounts) and per call (rlimits, keyring, Landlock, exec).
Stdlib only and no package import: it runs without `site`, and each start pays an interpreter's
start-up time; `landlock.py`, `mounts.py` (PID 1's mounts), `private.py` and `reaper.py` (PID 1's
reaping) are imported from this directory. Any failure prints `omega-mcp sandbox: ...` and exits 125
before the command runs. `--probe` reports what this machine supports instead.
`probe.TRAMPOLINE_ARGV` starts it (`python -I -S exec.py` works too, only slower).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from omega_mcp.sandbox.child import landlock, mounts, private, reaper
elif __package__:  # imported as part of the package (tests, the launcher)
    from omega_mcp.sandbox.child import landlock, mounts, private, reaper
else:
    # Not `import omega_mcp...`: without site-packages the package is not importable, and its
    # __init__ may pull in the whole server. The sibling file is stdlib-only by contract.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.append(_HERE)  # appended, so a stdlib module always wins over a file here
    import landlock
    import mounts
    import private
    import reaper

EXIT_SANDBOX_FAILURE = reaper.EXIT_SANDBOX_FAILURE
"""Exit status when the sandbox could not be set up (the command did not run)."""
LINGER_SECONDS = reaper.LINGER_SECONDS
"""How long background leftovers may outlive the command when nobody kills them first."""

_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_PR_SET_PDEATHSIG = 1
# Signal numbers (identical on Linux and macOS for these); the `signal` module costs ~5 ms (enum).
_SIGINT, _SIGKILL, _SIGPIPE, _SIGXFSZ = 2, 9, 13, 25
DEFAULT_SIGNALS = (_SIGINT, _SIGPIPE, _SIGXFSZ)
"""Signals a command must start with at their default action (CPython ignores or handles them)."""
_RLIMITS = private.RLIMITS
FLAGS = ("--probe", "--pidns", "--deny-tcp", "--netns", "--hide-sockets", "--private-dev", "--keep-program")
"""The options that take no value."""
CALL_OPTIONS = frozenset({"--parent-pid", "--nproc-headroom", "--pid-max", "--readonly"})
"""The options each command has of its own (limits, the protected names that exist now); every other
option describes what all the commands of a client session share: the bash zygote prepares that once
per session (`zygote.py`) and keys its sessions by it."""


prctl = reaper.prctl


class SetupFailure(Exception):
    """Setup failed; the message is shown to the model as the command's output."""


class Spec:
    """The parsed command line."""

    def __init__(self) -> None:
        self.probe = False
        self.parent_pid = 0
        self.rlimits: list[tuple[str, int]] = []
        self.nproc_headroom = 0
        self.pidns = False
        self.pid_max = 0
        self.binds: list[tuple[str, str]] = []
        self.landlock_abi = 0
        self.writable: list[str] = []
        self.devices: list[str] = []
        self.deny_tcp = False
        self.netns = False
        self.hide: list[str] = []
        self.hide_sockets = False
        self.private_tmp = ""
        self.tmp_source = ""
        self.read_only: list[str] = []
        self.private_dev = False
        self.keep_program = False
        self.command: list[str] = []

    def for_command(self, argv: list[str]) -> Spec:
        """A command of this (the session's) spec: `argv` holds only `CALL_OPTIONS`, `--` and the
        command; the rest is this spec's (the bash zygote keeps a session's spec and gets only these).

        Raises:
            ValueError: an option that is not a `CALL_OPTIONS` one, or as for `parse`.
        """
        head = argv[: argv.index("--")] if "--" in argv else argv
        extra = [option for option in head[::2] if option not in CALL_OPTIONS]
        if extra:
            raise ValueError(f"{extra[0]!r} is not an option of one command")
        spec = parse(argv)
        for name in _SESSION_FIELDS:
            setattr(spec, name, getattr(self, name))
        return spec


_SESSION_FIELDS = (
    "rlimits",
    "pidns",
    "netns",
    "binds",
    "landlock_abi",
    "writable",
    "devices",
    "deny_tcp",
    "hide",
    "hide_sockets",
    "private_tmp",
    "tmp_source",
    "private_dev",
    "keep_program",
)
"""What the commands of one zygote session share: every option but `CALL_OPTIONS`."""


def parse(argv: list[str]) -> Spec:
    """Parse trampoline options (see `launch._trampoline_options` for the producer).

    Raises:
        ValueError: an unknown option, a missing value, or no command after `--`.
    """
    spec = Spec()
    i = 0
    while i < len(argv):
        opt = argv[i]
        if opt == "--":
            spec.command = argv[i + 1 :]
            break
        if opt in FLAGS:
            setattr(spec, opt[2:].replace("-", "_"), True)
            i += 1
            continue
        if i + 1 >= len(argv):
            raise ValueError(f"{opt} needs a value")
        value = argv[i + 1]
        i += 2
        if opt == "--parent-pid":
            spec.parent_pid = int(value)
        elif opt == "--rlimit":
            name, _, number = value.partition("=")
            if name not in _RLIMITS:
                raise ValueError(f"unknown rlimit {name!r}")
            spec.rlimits.append((name, int(number)))
        elif opt == "--nproc-headroom":
            spec.nproc_headroom = int(value)
        elif opt == "--pid-max":
            spec.pid_max = int(value)
        elif opt in ("--pin", "--protect"):
            spec.binds.append((opt[2:], value))
        elif opt == "--landlock":
            spec.landlock_abi = int(value)
        elif opt == "--rw":
            spec.writable.append(value)
        elif opt == "--dev":
            spec.devices.append(value)
        elif opt == "--hide":
            spec.hide.append(value)
        elif opt == "--private-tmp":
            spec.private_tmp = value
        elif opt == "--tmp-source":
            spec.tmp_source = value
        elif opt == "--readonly":
            spec.read_only.append(value)
        else:
            raise ValueError(f"unknown option {opt!r}")
    if not spec.command and not spec.probe:
        raise ValueError("no command after --")
    return spec


def errno_failure(what: str) -> SetupFailure:
    err = landlock.get_errno()
    return SetupFailure(f"{what}: {os.strerror(err)}")


def default_signal(signum: int) -> None:
    # libc signal(2) directly: exec keeps ignored signals ignored, and CPython ignores SIGPIPE and
    # SIGXFSZ, so without this `yes | head` errors with EPIPE and file-size limits never kill.
    landlock.libc_function("signal")(signum, landlock.c_void_p(0))


def die_with_parent(parent_pid: int) -> None:
    if prctl(_PR_SET_PDEATHSIG, _SIGKILL):
        raise errno_failure("prctl(PR_SET_PDEATHSIG)")
    if parent_pid and os.getppid() != parent_pid:
        raise SetupFailure("the server exited before the command started")


def set_limits(spec: Spec) -> None:
    try:
        private.set_rlimits(spec.rlimits, spec.nproc_headroom)
    except (OSError, ValueError, OverflowError) as exc:
        raise SetupFailure(str(exc)) from None


def unshare_namespaces(*, net: bool = False) -> None:
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS | (_CLONE_NEWNET if net else 0)
    if landlock.libc_function("unshare")(flags):
        raise errno_failure(f"unshare(user, pid, mount{', network' if net else ''} namespaces)")
    try:
        private.map_ids(uid, gid)
    except OSError as exc:
        raise SetupFailure(f"user namespace id map: {exc}") from None


def _fork_supervised() -> int:
    """Fork: the parent waits and mirrors the child's exit; the child returns as PID 1.

    Returns the write end of the status pipe, on which PID 1 reports how the command ended and
    whether leftovers remain (PID 1 cannot die of the command's signal itself: the kernel protects
    a namespace's init from signals sent inside it).
    """
    alive_r, alive_w = os.pipe()
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(alive_r)
        os.close(status_w)
        private.undumpable()
        _supervise(pid, status_r)
    os.close(alive_w)
    os.close(status_r)
    if prctl(_PR_SET_PDEATHSIG, _SIGKILL):
        raise errno_failure("prctl(PR_SET_PDEATHSIG)")
    # Nothing in the namespace may ptrace its init (to disarm the death signal and outlive omega).
    if not private.undumpable():
        raise errno_failure("prctl(PR_SET_DUMPABLE)")
    # The supervisor may have died before PDEATHSIG was armed: its pipe end is then closed.
    os.set_blocking(alive_r, False)
    try:
        gone = os.read(alive_r, 1) == b""
    except BlockingIOError:
        gone = False
    os.close(alive_r)
    if gone:
        os._exit(EXIT_SANDBOX_FAILURE)
    return status_w


def _die_like(signum: int) -> None:
    default_signal(signum)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # only if the signal did not kill (e.g. it is SIGCHLD-like)


def _supervise(pid: int, status_r: int) -> None:
    """Exit as the command did, as soon as PID 1 reports it (leftovers may still be draining)."""
    record = b""
    while len(record) < 3:
        chunk = os.read(status_r, 3 - len(record))
        if not chunk:
            break
        record += chunk
    if len(record) == 3 and not record[2]:
        # No leftovers: wait for PID 1 to be gone too, so the caller never sees a group member.
        os.waitpid(pid, 0)
    if len(record) == 3:
        if record[:1] == b"s":
            _die_like(record[1])
        os._exit(record[1])
    # PID 1 died without a report (setup failure, killed): mirror it.
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        _die_like(os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def _setup_pid1(spec: Spec, sockets: list[str] | None = None) -> bool:
    """Inside the namespaces (`mounts.setup`); returns whether the private /proc could be mounted."""
    try:
        hide, tmp = (spec.hide, sockets or []), (spec.private_tmp, spec.command if spec.keep_program else [])
        return mounts.setup(
            spec.pid_max,
            spec.netns,
            spec.binds,
            *hide,
            private_tmp=tmp,
            writable=spec.writable,
            tmp_source=spec.tmp_source,
            read_only=spec.read_only,
            devices=spec.devices if spec.private_dev else None,
        )
    except OSError as exc:
        raise SetupFailure(exc.strerror or str(exc)) from None


def run(spec: Spec) -> None:
    """Set everything up and exec `spec.command`; returns only by raising `SetupFailure`."""
    for signum in DEFAULT_SIGNALS:
        default_signal(signum)
    os.closerange(3, 2**31 - 1)  # fds a caller leaked must not outlive the sandbox boundary
    if spec.parent_pid:
        die_with_parent(spec.parent_pid)
    set_limits(spec)
    status_w: int | None = None
    if spec.pidns:
        sockets = None
        if spec.hide_sockets:
            try:
                sockets = mounts.host_sockets(spec.writable, spec.hide)
            except OSError as exc:
                raise SetupFailure(f"cannot list the host's UNIX sockets to hide them: {exc.strerror}") from None
        unshare_namespaces(net=spec.netns)
        status_w = _fork_supervised()
        _setup_pid1(spec, sockets)
    elif spec.netns or spec.hide or spec.hide_sockets or spec.private_tmp or spec.read_only or spec.private_dev:
        raise SetupFailure("--netns, --hide, --hide-sockets, --private-tmp, --readonly and --private-dev need --pidns")
    # The user's login keys (the kernel's session keyring) are not for the command to use.
    private.join_session_keyring()
    if spec.landlock_abi:
        try:
            skipped = landlock.restrict_self(
                spec.landlock_abi, writable=spec.writable, devices=spec.devices, deny_tcp=spec.deny_tcp
            )
        except OSError as exc:
            raise SetupFailure(f"Landlock: {exc.strerror or exc}") from None
        for path in skipped:
            if os.path.lexists(path):
                sys.stderr.write(
                    f"omega-mcp sandbox: {path} is no longer the directory omega started with; read-only\n"
                )
    if status_w is not None:
        reaper.fork_init(status_w)
    try:
        os.execv(spec.command[0], spec.command)  # noqa: S606 - exec is the purpose; argv, no shell
    except OSError as exc:
        sys.stderr.write(f"omega-mcp sandbox: cannot run {spec.command[0]}: {exc.strerror}\n")
        os._exit(127)


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())  # unbuffered: the probe forks


def probe() -> None:
    """Print `key=value` lines: landlock_abi, pidns, netns, mount_proc, pid_max, landlock_enforced."""
    abi = landlock.abi_version()
    _say(f"landlock_abi={abi}")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            try:
                try:
                    unshare_namespaces(net=True)
                    netns = 1
                except SetupFailure:
                    unshare_namespaces()  # no network namespace: the rest may still work
                    netns = 0
                _fork_supervised()
                _say(f"pidns={int(os.getpid() == 1)}")
                _say(f"netns={netns}")
                spec = Spec()
                spec.pid_max = 4000
                _say(f"mount_proc={int(_setup_pid1(spec))}")
                try:
                    mounts.private_dev([])
                    _say(f"private_dev={int(os.path.exists('/dev/pts/ptmx'))}")
                except OSError as exc:
                    _say(f"private_dev=0 private /dev: {exc.strerror or exc}")
                with open("/proc/sys/kernel/pid_max") as f:
                    _say(f"pid_max={int(f.read().strip() == '4000')}")
                _say(f"keyring={int(private.join_session_keyring())}")
            except SetupFailure as exc:
                _say(f"pidns=0 {exc}")
            if abi:
                landlock.restrict_self(abi, deny_tcp=abi >= 4)
                try:
                    os.close(os.open("/dev/null", os.O_WRONLY))
                    _say("landlock_enforced=0 /dev/null stayed writable")
                except PermissionError:
                    _say("landlock_enforced=1")
        except OSError as exc:
            _say(f"landlock_enforced=0 {exc}")
        finally:
            os._exit(code)
    os.waitpid(pid, 0)


def main(argv: list[str]) -> int:
    try:
        spec = parse(argv)
        if spec.probe:
            probe()
            return 0
        run(spec)
    except (ValueError, OSError, SetupFailure) as exc:
        sys.stderr.write(f"omega-mcp sandbox: {exc}; the command did not run\n")
    return EXIT_SANDBOX_FAILURE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
