"""Run a program that dies with omega: `python -I -S deathsig.py PARENT_PID -- COMMAND [ARGS...]`.

Downstream stdio servers are started through this launcher, so that none outlives omega even when
omega is SIGKILLed (no shutdown code runs then, and a server that ignores EOF on stdin would live on).
It asks the kernel for SIGKILL on parent death (`prctl(PR_SET_PDEATHSIG, SIGKILL)`), checks that
its parent is still PARENT_PID (had omega died before the prctl, the signal would never come: then
it exits at once), and `execvp`s COMMAND with the environment it was given (a PATH lookup, as Popen
does). The setting survives the exec; the same pid becomes the server, so the caller's process group
handling is unchanged. A command that cannot be run exits 127 with one line,
`omega-mcp: cannot run X: ...`, on stderr.

Why a launcher: `Popen(preexec_fn=...)` is unsafe in a threaded process (the SDK runs worker threads),
and a fresh interpreter started with `-I -S` costs a few milliseconds. Caveats: PDEATHSIG fires when
the *thread* that forked the child exits, so spawn from a long-lived thread (the event loop); and it
covers only the direct child: a server's own children (npx → node) are reached by the process-group
kill of a normal shutdown, not by this. Linux only; elsewhere the prctl step is skipped.
Stdlib only, imported by nothing: it runs as a script, outside the package.
"""

from __future__ import annotations

import os
import sys

_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_USAGE = "usage: deathsig.py PARENT_PID -- COMMAND [ARGS...]"


def _fail(message: str, code: int) -> None:
    sys.stderr.write(f"omega-mcp: {message}\n")
    sys.stderr.flush()
    os._exit(code)


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(_SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)):
        _fail(f"prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}", 126)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        _fail(_USAGE, 2)
    parent, command, args = int(argv[0]), argv[2], argv[3:]
    _die_with_parent()
    if os.getppid() != parent:
        os._exit(1)  # omega is already gone: nobody would ever stop this server
    try:
        os.execvp(command, [command, *args])  # noqa: S606 - an argv, no shell: the point of the launcher
    except OSError as exc:
        _fail(f"cannot run {command}: {exc.strerror or exc}", 127)


if __name__ == "__main__":
    main(sys.argv[1:])
