"""The sandbox: write policy, symlink-safe paths, and the OS confinement of what omega runs.

`policy` decides what may be written and `roots` which roots are sane; `paths` (over `beneath`,
the openat2 and O_NOFOLLOW layer) opens files without escaping the roots; `hidden` is the list of
secrets neither bash nor `read` may see and of protected names no tool may change (`protect`
matches them, `tracker` binds them for bash and undoes what bash creates there, over `inotify`);
`world` gives each client session its private /tmp; `environment` scrubs what bash inherits, `probe`
finds what the kernel can enforce, `launch` plans a confined bash (`mountplan`: binds, pins, covers);
`zygote` is the pre-forked launcher that applies the plan to every bash command (a session's part
once, each command's in a fork, `zygote_init`), started and spoken to by `zygote_client` (a command
is a `confined.ConfinedProcess`), and `exec` the stdlib-only trampoline that applies it in a new
interpreter, for confined servers and machines without user namespaces (both with `landlock`,
`mounts`, `private` and `reaper`, a command's PID 1); `processes` starts and kills process groups,
`deathsig` ties a downstream server's life to omega's, `approvals` holds the one-time write grants
and `layers` reports every layer on or off. A new confinement layer goes here. Nothing in this
package imports `mcp`, and nothing is imported here: the zygote and the trampoline run as
`python -I -S` with their directory on the path.
"""
