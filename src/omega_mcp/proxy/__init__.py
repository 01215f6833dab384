"""The aggregator: one supervised connection per `[servers.NAME]` entry, re-exported through the Toolbox.

`supervisor.Downstreams` owns the connections (parallel connect, restart with backoff, list
changes); `spec` says what a server is, `session` is one live connection in the era the server
speaks (`connect` opens it, `eras` finds the era, `modern` is the 2026 side, `rounds` answers a
2026 server's input rounds for clients that have none, `listing` walks its lists, `bounds` keeps
HTTP answers under `max_message_mb`), `calls` forwards a `tools/call`, `catalog` re-exports
prompts and resources, `subscriptions` keeps resource subscriptions, `stdio` and `spawn` start and
stop local server processes, `client_requests` routes the servers' sampling, elicitation, roots
and log messages to omega's clients, `oauth` (with `oauth_record`) signs in to remote servers,
and `sampling` answers sampling with omega's own provider.
A new way to *connect* to servers (a transport) goes here, next to `stdio`; serving is `server/`'s
business. Nothing is imported here: `spawn` runs before the SDK is loaded.
"""
