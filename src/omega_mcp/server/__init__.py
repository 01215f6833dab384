"""The MCP front-end: omega's tools, prompts and resources served to MCP clients.

`server` holds the SDK `Server` whose handlers delegate to the Toolbox (`exports` serves the
downstream prompts, resources and subscriptions, `pages` cuts lists into pages); `stdio` and `http`
are the two transports it is served on (a new transport goes next to them); `clients` and `bridge`
are omega's clients as the downstreams' requests and logs reach them (`bridge`: 2026-era clients'
input rounds); `logs` forwards omega's own log records to clients that asked for them,
`instructions` describes the hub to the model, and `approver` asks the client's user (MCP
elicitation) before a write outside the roots. Nothing is imported here.
"""
