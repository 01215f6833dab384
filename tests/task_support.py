"""Task requests on the wire and the real `server-everything`, for the task tests (tests/proxy/test_tasks.py,
test_session_tasks.py): the SDK client types no task methods, so they go as raw requests."""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import mcp
import pytest

RELATED = "io.modelcontextprotocol/related-task"
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
"""The npm release whose server (serverInfo 2.0.0) has the task-only `simulate-research-query`."""


async def raw(c: mcp.Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request as it is on the wire: the SDK client types no task methods (and checks a task-augmented
    `tools/call`'s answer as a `CallToolResult`)."""
    return await c.session._dispatcher.send_raw_request(method, params, {})  # pyright: ignore[reportPrivateUsage]


async def task_call(c: mcp.Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A task-augmented `tools/call`: the task the client gets."""
    created = await raw(c, "tools/call", {"name": name, "arguments": arguments, "task": {"ttl": 60000}})
    task = created["task"]
    assert set(task) >= {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl"}
    return task


def text(result: dict[str, Any]) -> str:
    """The text of a raw result's first content block."""
    return result["content"][0]["text"]


def everything() -> Path:
    """server-everything's entry point, installed with npm on first use; skips when npm cannot reach it."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("server-everything needs npm and node (not installed)")
    prefix = Path.home() / ".cache" / "omega-mcp" / "server-everything" / EVERYTHING.rsplit("@", 1)[1]
    entry = prefix / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix.parent / f"{prefix.name}.lock").open("w") as lock:  # xdist workers: one installs
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not entry.exists():
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), EVERYTHING],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                if re.search(r"ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|network", done.stderr):
                    pytest.skip(f"the npm registry is unreachable, cannot install {EVERYTHING}")
                raise RuntimeError(f"npm install {EVERYTHING} failed:\n{done.stderr[-2000:]}")
    return entry
