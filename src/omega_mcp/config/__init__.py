"""servers.toml: the tables (`tables.py`), lookup order and loading (`load.py`; `${VAR}` expansion is in `envvars.py`).

Validation is strict (unknown keys are errors; a close known key or table is suggested) and reports
every structural problem at once: one `ConfigError` whose `problems` are one line each, naming the
file, the dotted key and what is wrong, so the CLI can exit 2 without a traceback. Paths are
expanded (`~`) and made absolute here; nothing else in the package reads the environment for
configuration. Lookup: `--config`, `$OMEGA_CONFIG`, `./servers.toml`, `$OMEGA_HOME/servers.toml`;
no file at all is a valid, built-ins-only configuration.

Every string of an enabled `[servers.NAME]` is expanded before validation (a disabled one is left
as written; see `envvars.py`). `${OMEGA_PYTHON}` is the interpreter running omega (`sys.executable`) unless the
environment sets it: `command = "${OMEGA_PYTHON}"`, `args = ["-m", "mcp_server_time"]` runs a
server installed next to omega, no wrapper script. A broken server stays a broken server: an unset
`${VAR}` without default fails only its server (`Config.server_problem` names the variable and
key), which is validated with the `${VAR}` text left in place and kept in `Config.servers`, in
order, for `omega-mcp tools` to list (a structural error in it is still a config error). The
problems reach a private attribute through the validation context, so no TOML key can set one.
"""

from __future__ import annotations

from omega_mcp.config.load import find_config_path, load_config
from omega_mcp.config.tables import (
    AgentConfig,
    ClientConfig,
    Config,
    ConfigPlace,
    HubConfig,
    OnDenied,
    SamplingConfig,
    SandboxConfig,
    SandboxMode,
    ServerConfig,
    ServerConfinement,
    ServerSandboxConfig,
    ServersSection,
    omega_home,
)

__all__ = [
    "AgentConfig",
    "ClientConfig",
    "Config",
    "ConfigPlace",
    "HubConfig",
    "OnDenied",
    "SamplingConfig",
    "SandboxConfig",
    "SandboxMode",
    "ServerConfig",
    "ServerConfinement",
    "ServerSandboxConfig",
    "ServersSection",
    "find_config_path",
    "load_config",
    "omega_home",
]
