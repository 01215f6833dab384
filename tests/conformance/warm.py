"""A pre-forking runner for the client scenarios: one process imports the SDK and omega once, and forks a
copy for each scenario the suite starts.

The suite starts every scenario of an era at once, each as a fresh command; importing the SDK and
omega in each of them costs a second of CPU apiece, which on a 2-core machine is most of a run.
`python warm.py SOCKET` imports the reference client and omega's driver, then forks one child per
connection on the Unix socket `SOCKET`: the child takes the caller's stdin, stdout and stderr (passed
as descriptors), its arguments and environment, runs the named driver's `main` and reports its exit
status back. `warm_client.py` is the caller: stdlib only, it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import omega_client
import reference_client

DRIVERS = {"reference": reference_client.main, "omega": omega_client.main}


def _child(connection: socket.socket) -> None:
    code = 1
    try:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        request = json.loads(message)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = request["argv"]
        try:
            DRIVERS[request["driver"]]()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException as exc:  # the scenario failed: say why, as the command would have
            import traceback

            traceback.print_exception(exc)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        try:
            connection.sendall(f"{code}\n".encode())
        finally:
            os._exit(code)


def serve(path: str) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(128)
        print("ready", flush=True)
        while True:
            connection, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                _child(connection)
            connection.close()


if __name__ == "__main__":
    serve(sys.argv[1])
