"""`omega-mcp agent` when the provider is unreachable, misconfigured or interrupted, end to end.

Nothing listening must end in one line after bounded retries; an impossible URL is a configuration
error; ctrl-C (SIGINT) while waiting for the model or while a tool runs must exit 130 without a
traceback and leave no process behind.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import uuid

import pytest
from agent_cli_support import Reply, answer, argv_env, bash_call, one_error_line, processes_with, run_cli, wait_for


def test_nothing_listening_is_reported_after_the_retries(tmp_path) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_cli(tmp_path, "ollama", f"http://127.0.0.1:{port}")
    assert done.returncode == 1
    line = one_error_line(done)
    assert f"127.0.0.1:{port}/api/chat" in line and "ConnectError" in line and "gave up after 4 attempts" in line


def test_an_impossible_port_is_a_configuration_error(tmp_path) -> None:
    done = run_cli(tmp_path, "openai", "http://127.0.0.1:99999/v1")
    assert done.returncode == 2
    assert "port" in one_error_line(done)


@pytest.mark.parametrize("moment", ["waiting for the model", "running a tool"])
def test_ctrl_c_ends_the_run_with_130_without_traceback_or_leftovers(moment, tmp_path, fake_provider) -> None:
    marker = f"omega-sigint-{uuid.uuid4().hex}"
    provider = "anthropic" if moment == "running a tool" else "openai"
    first = Reply(body=bash_call(provider, f"touch started; sleep 30 # {marker}"))
    replies = [Reply(stall=True)] if moment == "waiting for the model" else [first, Reply(body=answer(provider, "x"))]
    fake = fake_provider(provider, replies)
    argv, env = argv_env(tmp_path, provider, fake.url, f"go {marker}")
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL
    )
    try:
        if moment == "waiting for the model":
            assert fake.got_request.wait(20)
        else:
            wait_for(lambda: (tmp_path / "ws" / "started").exists())
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err and out == ""
    wait_for(lambda: not processes_with(marker), seconds=10)
