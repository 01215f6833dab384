"""Raw JSON-RPC below `proxy/` and `fastpath/`: framing, pipes, HTTP/1.1, server-sent events, the envelope.

Everything here moves bytes and JSON dicts: it imports neither the MCP SDK (`mcp`, `mcp_types`) nor
`proxy/`, `fastpath/` or `server/` (tests/test_architecture.py checks both). Where SDK messages are
needed (the pipe streams the SDK's sessions read and write) the caller hands in a codec at the
hand-over (`_sdk.SESSION_MESSAGES`), so the SDK's models stay above this layer.
"""
