"""The stdio-to-stdio `tools/call` relay: an optimisation only.

The SDK path is the reference: everything here must answer exactly as it does, and
tests/fastpath runs the same calls through both and compares the results. Code here may be
removed at any time without changing behaviour; new features go on the SDK path first. The pipe
framing, the HTTP/1.1 client and the envelope it shares with `proxy/` live below both, in `wire/`;
the outcome of a call is `proxy/outcome.py`'s, the rule the SDK path applies too.
"""
