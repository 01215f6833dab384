"""The sandbox: write policy, symlink-safe paths, and the OS confinement of what omega runs.

`policy` decides what may be written and `roots` which roots are sane; `paths` (over `beneath`,
the openat2 and O_NOFOLLOW layer) opens files without escaping the roots; `hidden` is the list of
secrets neither bash nor `read` may see and of protected names no tool may change (`protect`
matches them, `tracker` binds them for bash and undoes what bash creates there, over `inotify`);
`world` gives each client session its private /tmp; `environment` scrubs what bash inherits, `probe`
finds what the kernel can enforce, `launch` plans a confined bash (`mountplan`: binds, pins, covers);
`zygote_client` starts and speaks to the bash zygote (a command is a `confined.ConfinedProcess`);
`processes` starts and kills process groups, `approvals` holds the one-time write grants and `layers`
reports every layer on or off. `child/` holds what runs as `python -I -S` inside the sandbox's
processes (stdlib only): the zygote that applies the plan to every bash command, `exec` the
trampoline for confined servers and machines without user namespaces, their steps (`landlock`,
`mounts`, `private`, `reaper`) and `deathsig`, which ties a downstream server's life to omega's.
A new confinement layer goes here. Nothing in this package imports `mcp`, and nothing is imported
here: the child side runs as `python -I -S` with its directory on the path.
"""
