"""`share = "session"` connections (proxy/pool.py) in process: one per session key, stopped after
the idle time, and stopped with their session."""

from __future__ import annotations

from omega_mcp.calling import CallContext
from omega_mcp.proxy.client_requests import ClientRequests
from omega_mcp.proxy.pool import SessionServers
from proxy_support import downstream, downstream_spec, stdio_fixture, wait_until


async def test_a_session_connection_is_stopped_after_its_idle_time() -> None:
    spec = downstream_spec("own", downstream(), share="session")
    async with SessionServers(ClientRequests(), idle_seconds=0.4) as pool:
        first = await pool.call_tool(spec, "echo", {"text": "x"}, CallContext(session_key="session-1"))
        assert not first.get("isError")
        assert [key for key, _ in pool.running("own")] == ["session-1"]
        await wait_until(lambda: not pool.running("own"), 10)
        again = await pool.call_tool(spec, "echo", {"text": "y"}, CallContext(session_key="session-1"))  # started anew
        assert not again.get("isError") and len(pool.running("own")) == 1


async def test_each_session_gets_its_own_process_until_it_ends() -> None:
    spec = downstream_spec("own", stdio_fixture(), share="session")
    async with SessionServers(ClientRequests()) as pool:
        pids = {}
        for key in ("a", "b", "a"):
            answer = await pool.call_tool(spec, "pid", {}, CallContext(session_key=key))
            pids.setdefault(key, set()).add(answer["content"][0]["text"])
        assert len(pids["a"]) == 1 and len(pids["b"]) == 1 and pids["a"] != pids["b"]
        await pool.end("a")
        assert [key for key, _ in pool.running("own")] == ["b"]
