"""The MCP front-end: omega's tools, prompts and resources served to MCP clients.

`server` holds the SDK `Server` whose handlers delegate to the Toolbox; `stdio` and `http` are the
two transports it is served on (a new transport goes next to them); `logs` forwards log records to
clients that asked for them, `instructions` describes the hub to the model, and `approver` asks the
client's user (MCP elicitation) before a write outside the roots. Nothing is imported here.
"""
