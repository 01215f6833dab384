"""What runs as `python -I -S` inside the sandbox's processes: the bash zygote, the trampoline, their parts.

Every module here is started or imported without the omega_mcp package (no site-packages, the
directory put on `sys.path` by a bootstrap: `probe.TRAMPOLINE_ARGV`, `zygote_client`,
`proxy/spawn.py`), so each imports only the standard library and its siblings here, which
tests/test_architecture.py checks. `exec` is the trampoline, `zygote` and `zygote_init` the bash
zygote, `mounts`, `private`, `landlock` and `reaper` their steps, `deathsig` the launcher that ties a
downstream server's life to omega's. omega's side that plans and talks to them stays in `sandbox/`.
"""
