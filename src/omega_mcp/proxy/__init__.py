"""The aggregator: one supervised connection per `[servers.NAME]` entry, re-exported through the Toolbox.

`supervisor.Downstreams` owns the connections (parallel connect, restart with backoff, list
changes); `spec` says what a server is, `session` is one live connection, `calls` forwards a
`tools/call`, `catalog` re-exports prompts and resources, `stdio` and `spawn` start and stop local
server processes, `client_requests` routes the servers' sampling, elicitation and roots requests to
omega's clients and `sampling` (with `sampling_wire`) answers sampling with omega's own provider.
A new way to *connect* to servers (a transport) goes here, next to `stdio`; serving is `server/`'s
business. Nothing is imported here: `spawn` runs before the SDK is loaded.
"""
