import sys
from pathlib import Path

import pytest

from omega_mcp.config import find_config_path, load_config
from omega_mcp.errors import ConfigError


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "servers.toml"
    path.write_text(text)
    return path


def test_no_config_file_at_all_gives_builtins_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={"OMEGA_HOME": str(tmp_path / "home")})
    assert config.path is None
    assert config.servers == {}
    assert config.workspace == tmp_path / "home" / "workspace"
    assert config.sandbox.mode == "sandbox"


def test_lookup_order_flag_then_env_then_cwd_then_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "servers.toml").write_text("")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    env = {"OMEGA_HOME": str(home)}
    assert find_config_path(None, env) == home / "servers.toml"
    (cwd / "servers.toml").write_text("")
    assert find_config_path(None, env) == cwd / "servers.toml"
    other = tmp_path / "other.toml"
    other.write_text("")
    assert find_config_path(None, {**env, "OMEGA_CONFIG": str(other)}) == other
    flag = tmp_path / "flag.toml"
    flag.write_text("")
    assert find_config_path(flag, {**env, "OMEGA_CONFIG": str(other)}) == flag


def test_a_named_config_that_does_not_exist_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml", environ={})


def test_example_servers_toml_at_the_repo_root_loads_with_no_server_needing_an_install():
    root = Path(__file__).resolve().parents[1]
    config = load_config(root / "servers.toml", environ={"OMEGA_HOME": "/nonexistent-home"})
    assert config.servers == {}  # its `time` server is commented out until mcp-server-time is installed
    assert config.sandbox.mode == "sandbox"
    assert "# [servers.time]" in (root / "servers.toml").read_text()


def test_vars_expand_with_defaults(tmp_path):
    path = _write(
        tmp_path,
        """
[servers.a]
command = "${CMD}"
args = ["--x", "${MISSING:-fallback}"]
env = { K = "${CMD}-${EMPTY:-d}" }
""",
    )
    config = load_config(path, environ={"CMD": "tool", "EMPTY": ""})
    server = config.servers["a"]
    assert server.command == "tool"
    assert server.args == ("--x", "fallback")
    assert server.env == {"K": "tool-d"}


def test_an_unset_variable_fails_only_the_server_that_uses_it(tmp_path):
    path = _write(
        tmp_path,
        """
[servers.brave]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-brave-search"]
env = { BRAVE_API_KEY = "${BRAVE_API_KEY}", REGION = "${REGION:-eu}" }

[servers.time]
command = "${PY:-python3}"

[servers.hub]
url = "${HUB_URL}"
headers = { Authorization = "Bearer ${HUB_TOKEN}" }
""",
    )
    config = load_config(path, environ={})
    assert list(config.servers) == ["brave", "time", "hub"]
    assert (
        config.server_problem("brave") == "unset environment variable BRAVE_API_KEY (servers.brave.env.BRAVE_API_KEY)"
    )
    assert config.servers["brave"].env == {"BRAVE_API_KEY": "${BRAVE_API_KEY}", "REGION": "eu"}
    assert config.server_problem("time") is None
    assert config.servers["time"].command == "python3"
    assert config.server_problem("hub") == (
        "unset environment variables HUB_URL (servers.hub.url), HUB_TOKEN (servers.hub.headers.Authorization)"
    )
    assert config.server_problem("no-such-server") is None


def test_a_set_variable_leaves_the_server_without_a_problem(tmp_path):
    path = _write(tmp_path, '[servers.a]\nurl = "http://127.0.0.1/${PART}"\n')
    config = load_config(path, environ={"PART": "mcp"})
    assert config.servers["a"].url == "http://127.0.0.1/mcp"
    assert config.server_problem("a") is None


def test_omega_python_is_the_interpreter_running_omega_unless_the_environment_sets_it(tmp_path):
    path = _write(tmp_path, '[servers.time]\ncommand = "${OMEGA_PYTHON}"\nargs = ["-m", "mcp_server_time"]\n')
    config = load_config(path, environ={})
    assert config.servers["time"].command == sys.executable
    assert config.server_problem("time") is None
    assert load_config(path, environ={"OMEGA_PYTHON": "/opt/py/bin/python"}).servers["time"].command == (
        "/opt/py/bin/python"
    )


def test_a_server_with_an_unset_variable_and_a_structural_error_is_still_a_config_error(tmp_path):
    path = _write(tmp_path, '[servers.a]\ncommand = "${NOPE}"\nbogus = 1\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: servers.a.bogus: unknown key; the known keys are " + (
        "command, args, env, cwd, url, headers, enabled, timeout, connect_timeout, tools, exclude_tools, "
        "sandbox, era, share, pin, auth, client_id, client_secret_env, scopes, client_metadata_url"
    )


def test_a_value_invalid_only_because_its_variable_is_unset_says_so(tmp_path):
    path = _write(tmp_path, '[servers.a]\ncommand = "x"\ntimeout = "${TIMEOUT}"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert "servers.a.timeout" in message and "(it uses ${TIMEOUT}, which is not set)" in message
    assert load_config(path, environ={"TIMEOUT": "5"}).servers["a"].timeout == 5


def test_disabled_servers_are_not_expanded(tmp_path):
    path = _write(tmp_path, '[servers.a]\ncommand = "${NOPE}"\nenabled = false\n')
    config = load_config(path, environ={})
    assert config.servers["a"].enabled is False
    assert config.servers["a"].command == "${NOPE}"
    assert config.server_problem("a") is None


def test_every_structural_problem_is_reported_at_once_one_line_each(tmp_path):
    path = _write(
        tmp_path,
        '[sandbox]\nmode = "yolo"\n\n[servers.a]\ncommand = "x"\nbogus = 1\n\n[servers.b]\nargs = []\n',
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    problems = info.value.problems
    assert [line.split(": ")[1] for line in problems] == ["sandbox.mode", "servers.a.bogus", "servers.b"]
    assert all(line.startswith(f"{path}: ") for line in problems)
    assert str(info.value) == "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('tools = "get_*"', 'servers.a.tools: expected a list of globs, e.g. tools = ["get_*"]'),
        ('exclude_tools = "del*"', 'servers.a.exclude_tools: expected a list of globs, e.g. exclude_tools = ["del*"]'),
        ("tools = 5", 'servers.a.tools: expected a list of globs, e.g. tools = ["get_*"]'),
        (
            'args = "-m mcp_server_time"',
            'servers.a.args: expected a list of arguments, e.g. args = ["-m", "mcp_server_time"]',
        ),
    ],
)
def test_a_list_key_given_a_string_shows_the_list_form(tmp_path, text, message):
    path = _write(tmp_path, f'[servers.a]\ncommand = "x"\n{text}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: {message}"


def test_write_roots_given_a_string_shows_the_list_form(tmp_path):
    path = _write(tmp_path, '[sandbox]\nwrite_roots = "/srv/data"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert (
        str(info.value)
        == f'{path}: sandbox.write_roots: expected a list of directories, e.g. write_roots = ["/srv/data"]'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[server.x]\ncommand = "x"\n', "server: unknown table; did you mean [servers.x]?"),
        ('[sandbx]\nmode = "rx"\n', "sandbx: unknown table; did you mean [sandbox]?"),
        ('[servers.x]\ncomand = "x"\n', "servers.x.comand: unknown key; did you mean `command`?"),
        ('[sandbox]\nworkspce = "ws"\n', "sandbox.workspce: unknown key; did you mean `workspace`?"),
        ('mode = "rx"\n', "mode: unknown key; `mode` belongs in [sandbox]"),
    ],
)
def test_an_unknown_key_or_table_suggests_the_close_known_one(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ('[servers."a__b"]\ncommand = "x"\n', "servers", "__"),
        ('[servers."a b"]\ncommand = "x"\n', "servers", "letters"),
        ('[servers.a]\ncommand = "x"\nbogus = 1\n', "servers.a.bogus", "unknown key"),
        ('[servers.a]\ncommand = "x"\nurl = "http://127.0.0.1"\n', "servers.a", "exactly one"),
        ("[servers.a]\nargs = []\n", "servers.a", "exactly one"),
        ('[sandbox]\nmode = "yolo"\n', "sandbox.mode", "sandbox"),
        ("[sandbox]\nbash_timeout = 9999\n", "sandbox.bash_timeout", "600"),
        ("[nonsense]\n", "nonsense", "unknown table"),
        ('[sandbox]\nworkspace = "a\\u0000b"\n', "sandbox.workspace", "NUL"),
        ('[sandbox]\nworkspace = ""\n', "sandbox.workspace", "empty"),
        ("[sandbox]\nworkspace = 5\n", "sandbox.workspace", "path"),
        ('[sandbox]\nwrite_roots = ["/tmp", ""]\n', "sandbox.write_roots", "empty"),
        ('[servers.a]\ncommand = "x"\ncwd = "a\\u0000b"\n', "servers.a.cwd", "NUL"),
        ("[sandbox]\nbash_timeout = nan\n", "sandbox.bash_timeout", "finite"),
        ("[sandbox]\nmax_file_size_mb = 99999999999999999999\n", "sandbox.max_file_size_mb", "less than"),
        ("[sandbox]\nmemory_mb = 99999999999999999999\n", "sandbox.memory_mb", "less than"),
        ("[sandbox]\nmax_processes = 99999999999999999999\n", "sandbox.max_processes", "less than"),
        ("[sandbox]\nmax_open_files = 99999999999999999999\n", "sandbox.max_open_files", "less than"),
        ('[servers.a]\ncommand = "x"\ntimeout = nan\n', "servers.a.timeout", "finite"),
        ('[servers.a]\ncommand = "a\\u0000b"\n', "servers.a", "NUL"),
        ('[servers.a]\ncommand = ""\n', "servers.a", "empty"),
        ('[servers.a]\ncommand = "x"\nargs = ["a\\u0000b"]\n', "servers.a", "NUL"),
        ('[servers.a]\ncommand = "x"\nenv = { "A=B" = "x" }\n', "servers.a", "environment variable name"),
        ('[servers.a]\ncommand = "x"\nenv = { "" = "x" }\n', "servers.a", "environment variable name"),
        ('[servers.a]\ncommand = "x"\nenv = { A = "a\\u0000b" }\n', "servers.a", "NUL"),
        ('[servers.a]\nurl = "http://127.0.0.1"\nheaders = { A = "a\\nb" }\n', "servers.a", "line break"),
    ],
)
def test_invalid_entries_are_one_line_errors_naming_file_and_key(tmp_path, text, key, fragment):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and key in message and fragment in message


def test_a_config_path_that_is_a_directory_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path, environ={})
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(None, environ={"OMEGA_CONFIG": str(tmp_path)})


def test_invalid_toml_is_a_config_error(tmp_path):
    path = _write(tmp_path, "[servers.a\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path, environ={})


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    path = _write(
        tmp_path, '[sandbox]\nworkspace = "ws"\nwrite_roots = ["extra"]\n[servers.a]\ncommand = "x"\ncwd = "sub"\n'
    )
    config = load_config(path, environ={})
    assert config.workspace == tmp_path / "ws"
    assert config.sandbox.write_roots == (tmp_path / "extra",)
    assert config.servers["a"].cwd == tmp_path / "sub"


def test_hub_allowed_hosts_is_a_strict_list_of_names(tmp_path):
    path = _write(tmp_path, '[hub]\nallowed_hosts = "omega.internal"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert (
        str(info.value)
        == f'{path}: hub.allowed_hosts: expected a list of host names, e.g. allowed_hosts = ["omega.internal"]'
    )
    path = _write(tmp_path, '[hub]\nallowed_hosts = ["omega.internal", "10.0.0.5:8765"]\n')
    assert load_config(path, environ={}).hub.allowed_hosts == ("omega.internal", "10.0.0.5:8765")


def test_protect_adds_names_unprotect_removes_only_defaults_and_shell_lifetime(tmp_path):
    from omega_mcp.sandbox.policy import SandboxPolicy

    path = _write(
        tmp_path,
        '[sandbox]\nprotect = ["Makefile", "./.github/workflows/"]\nunprotect = [".idea/"]\nshell_lifetime = 60\n',
    )
    config = load_config(path, environ={"OMEGA_HOME": str(tmp_path / "home")})
    policy = SandboxPolicy.from_settings(config.sandbox, config.place)
    assert ".idea" not in policy.protected_names and ".vscode" in policy.protected_names
    assert policy.protected_names[-2:] == ("Makefile", ".github/workflows")
    assert policy.shell_lifetime_seconds == 60


@pytest.mark.parametrize(
    ("line", "wanted"),
    [
        ('unprotect = ["Makefile"]', "sandbox.unprotect: 'Makefile' is not protected by default"),
        ('protect = ["/etc/x"]', "sandbox.protect: '/etc/x' is absolute"),
        ('protect = ["../x"]', "sandbox.protect: '../x' has a `.` or `..` component"),
        ('protect = ".envrc"', 'sandbox.protect: expected a list of names or globs, e.g. protect = [".envrc"]'),
        ("shell_lifetime = 0", "sandbox.shell_lifetime: Input should be greater than 0"),
    ],
)
def test_bad_protected_names_and_lifetimes_are_config_errors(tmp_path, line, wanted):
    path = _write(tmp_path, f"[sandbox]\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={"OMEGA_HOME": str(tmp_path / "home")})
    assert wanted in str(caught.value), str(caught.value)


def test_tool_search_keys_take_their_three_values_and_a_list_of_globs(tmp_path):
    path = tmp_path / "servers.toml"
    path.write_text(
        '[hub]\ntool_search = "on"\nalways_visible = ["read", "mcp__git__*"]\n[agent]\ntool_search = "off"\n'
    )
    config = load_config(path, environ={})
    assert config.hub.tool_search == "on" and config.hub.always_visible == ("read", "mcp__git__*")
    assert config.agent.tool_search == "off"
    assert load_config(None, environ={"OMEGA_HOME": str(tmp_path / "none")}).hub.tool_search == "auto"
    path.write_text('[hub]\ntool_search = "maybe"\nalways_visible = "bash"\n')
    with pytest.raises(ConfigError) as problem:
        load_config(path, environ={})
    text = str(problem.value)
    assert "hub.tool_search: Input should be 'off', 'on' or 'auto'" in text
    assert 'hub.always_visible: expected a list of globs, e.g. always_visible = ["bash"]' in text


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ('[sandbox]\nbash_timeout = "120"', "sandbox.bash_timeout", 'got the string "120" (write 120, without quotes)'),
        ('[sandbox]\nrequire_os_sandbox = "no"', "sandbox.require_os_sandbox", "expected true or false"),
        ("[sandbox]\nmax_processes = 64.0", "sandbox.max_processes", "expected a whole number, got the number 64.0"),
        ('[servers.a]\ncommand = "x"\nenabled = "no"', "servers.a.enabled", "(write false, without quotes)"),
        ('[servers.a]\ncommand = "x"\ntimeout = "5"', "servers.a.timeout", "expected a number"),
        ('[servers.a]\ncommand = "x"\nconnect_timeout = true', "servers.a.connect_timeout", "got true"),
        ('[servers.a]\ncommand = "x"\nsandbox = { network = "yes" }', "servers.a.sandbox.network", "got the string"),
        ('[servers.a]\ncommand = "x"\nsandbox = { read_only = 1 }', "servers.a.sandbox.read_only", "got the number 1"),
        ('[servers.a]\ncommand = "x"\nargs = [1, 2]', "servers.a.args.0", "expected a string, got the number 1"),
        ('[hub]\nmax_message_mb = "64"', "hub.max_message_mb", "expected a whole number"),
        ('[agent]\nmax_turns = "5"', "agent.max_turns", "expected a whole number"),
        ('[agent]\nroute = "yes"', "agent.route", "expected true or false"),
        ('[sampling]\nmax_tokens = "100"', "sampling.max_tokens", "expected a whole number"),
        ("[agent]\nmodel = 2026-01-01", "agent.model", "expected no date or time, got 2026-01-01"),
    ],
)
def test_a_value_of_the_wrong_type_is_an_error_never_coerced(tmp_path, text, key, message):
    path = _write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    line = info.value.problems[0]  # `args = [1, 2]`: one line for each
    assert line.startswith(f"{path}: {key}: ") and message in line


def test_every_bad_server_key_is_listed_with_the_entries_own_problems(tmp_path):
    path = _write(tmp_path, '[servers.a__b]\ncommand = "x"\n\n[servers."c d"]\ncommand = "x"\nargs = "-y pkg"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    keys = [line.removeprefix(f"{path}: ").split(": ")[0] for line in info.value.problems]
    assert keys == ["servers.a__b", "servers.c d", "servers.c d.args"]
    assert "must not contain '__'" in info.value.problems[0]
    assert "may only contain letters" in info.value.problems[1]


def test_both_command_and_url_is_reported_with_the_entrys_other_problems(tmp_path):
    path = _write(tmp_path, '[servers.a]\ncommand = "x"\nurl = "http://127.0.0.1:1/mcp"\ntimeout = "5"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert [line.removeprefix(f"{path}: ") for line in info.value.problems] == [
        'servers.a.timeout: expected a number, got the string "5" (write 5, without quotes)',
        "servers.a: needs exactly one of `command` (stdio) or `url` (remote)",
    ]


def test_a_variable_sets_a_number_or_a_boolean_where_the_key_takes_one(tmp_path):
    text = '[servers.a]\ncommand = "x"\ntimeout = "${T}"\nsandbox = { network = "${NET:-false}" }\nargs = ["${T}"]\n'
    path = _write(tmp_path, text)
    entry = load_config(path, environ={"T": "5"}).servers["a"]
    assert entry.timeout == 5 and entry.args == ("5",)
    assert entry.sandbox is not None and not isinstance(entry.sandbox, str) and entry.sandbox.network is False
    with pytest.raises(ConfigError, match=r'servers\.a\.timeout: expected a number, got the string "soon"'):
        load_config(path, environ={"T": "soon"})
