"""The stdio-to-stdio `tools/call` relay: an optimisation only.

The SDK path is the reference: everything here must answer exactly as it does, and
tests/fastpath runs the same calls through both and compares the results. Code here may be
removed at any time without changing behaviour; new features go on the SDK path first. The pipe
framing it shares with `proxy/` lives below both, in `omega_mcp/pipes.py`.
"""
