"""The sandbox: write policy, symlink-safe paths, and the OS confinement of what omega runs.

`policy` decides what may be written and `roots` which roots are sane; `paths` (over `beneath`,
the openat2 and O_NOFOLLOW layer) opens files without escaping the roots; `hidden` is the list of
secrets neither bash nor `read` may see and of protected names no tool may change (`protect`
matches them, `tracker` binds them for bash and undoes what bash creates there, over `inotify`);
`world` gives each client session its private /tmp; `environment` scrubs what bash inherits, `probe`
finds what the kernel can enforce, `launch` plans a confined bash (`mountplan`: binds, pins, covers),
and `exec` is the stdlib-only trampoline that applies it in the child (with `landlock`, `mounts` and
`private`); `processes` starts and kills process groups, `deathsig` ties a downstream server's life
to omega's, `approvals` holds the one-time write grants and `layers` reports every layer on or off.
A new confinement layer goes here. Nothing in this package imports `mcp`, and nothing is imported
here: the trampoline runs `python -I -S -m omega_mcp.sandbox.exec` on every bash call.
"""
