"""The command the suite runs per client scenario: hand the scenario to warm.py's forked copy, wait for its status.

    python -S -I warm_client.py SOCKET DRIVER URL      # DRIVER: reference | omega

Stdlib only (it starts in milliseconds): it passes its stdin, stdout and stderr, its arguments and
its environment over the Unix socket and exits with the status the child reports.
"""

import json
import os
import socket
import sys


def main() -> None:
    path, driver = sys.argv[1], sys.argv[2]
    request = {"driver": driver, "argv": [driver, *sys.argv[3:]], "env": dict(os.environ), "cwd": os.getcwd()}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
        status = b""
        while not status.endswith(b"\n"):
            chunk = connection.recv(64)
            if not chunk:
                break
            status += chunk
    sys.exit(int(status) if status.strip().isdigit() else 1)


if __name__ == "__main__":
    main()
