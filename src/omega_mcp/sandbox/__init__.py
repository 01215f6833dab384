"""The sandbox: write policy, symlink-safe paths, and the OS confinement of what omega runs.

`policy` decides what may be written, `paths` (over `beneath`, the openat2 and O_NOFOLLOW layer)
opens files without escaping the roots, `environment` scrubs what bash inherits, `probe` finds
what the kernel can enforce, `launch` plans a confined bash, `exec` is the stdlib-only trampoline
that applies it in the child (with `landlock`), `processes` starts and kills process groups, and
`approvals` holds the one-time write grants. A new confinement layer goes here. Nothing in this
package imports `mcp`, and nothing is imported here: the trampoline runs
`python -I -S -m omega_mcp.sandbox.exec` on every bash call.
"""
