"""The built-in tools: `bash` (with background shells), `read`, `write` and `edit`.

`schemas` holds each tool's MCP definition and its pydantic argument model; `bash`,
`bash_process`, `shells` and `output` run commands with bounded output; `read` and `write` are the
file tools, confined by `sandbox/`. A new built-in tool goes here: a module with its handler, its
definition in `schemas.BUILTIN_TOOLS`, and one case in `Toolbox._call_builtin`.
"""
