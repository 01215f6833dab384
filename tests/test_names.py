import pytest

from omega_mcp.names import MAX_NAME_LENGTH, Namespace, Naming, Route, exported_name, fit_name, normalize

BUILTINS = ("bash", "read", "write", "edit")


def test_normalize_replaces_every_character_outside_the_claude_code_set():
    assert normalize("get.weather/now é!") == "get_weather_now___"
    assert normalize("ok-name_1") == "ok-name_1"


def test_downstream_names_follow_mcp_server_tool():
    assert exported_name("time", "get_current_time") == "mcp__time__get_current_time"
    assert exported_name("my.server", "a b") == "mcp__my_server__a_b"


def test_long_names_are_cut_to_64_with_a_stable_hash_suffix():
    long_tool = "x" * 100
    name = exported_name("srv", long_tool)
    assert len(name) == MAX_NAME_LENGTH
    assert name == exported_name("srv", long_tool)
    assert name != exported_name("srv", "x" * 99 + "y")
    assert name.startswith("mcp__srv__xxx")


def test_fit_name_leaves_short_names_alone():
    assert fit_name("short") == "short"


def test_names_colliding_after_normalization_stay_unique_and_route_back():
    ns = Namespace(BUILTINS, [("s", "a.b"), ("s", "a_b")])
    first, second = ns.names[4:]
    assert first == "mcp__s__a_b"
    assert second != first and len(second) <= MAX_NAME_LENGTH
    assert ns.resolve(first) == Route("s", "a.b")
    assert ns.resolve(second) == Route("s", "a_b")


def test_colliding_long_names_stay_unique():
    prefix = "t" * 80
    ns = Namespace((), [("s", prefix + "1"), ("s", prefix + "2"), ("s", prefix + ".3"), ("s", prefix + "_3")])
    assert len(set(ns.names)) == 4
    assert all(len(n) <= MAX_NAME_LENGTH for n in ns.names)


def test_routes_are_never_recovered_by_splitting_on_double_underscore():
    # A tool whose own name contains `__` must route to the whole tool name.
    ns = Namespace(BUILTINS, [("a", "b__c")])
    assert ns.resolve("mcp__a__b__c") == Route("a", "b__c")


def test_order_is_builtins_then_downstream_in_given_order():
    ns = Namespace(BUILTINS, [("z", "t2"), ("z", "t1"), ("a", "t0")])
    assert ns.names == [*BUILTINS, "mcp__z__t2", "mcp__z__t1", "mcp__a__t0"]


def test_aliases_dot_and_double_underscore_resolve():
    ns = Namespace(BUILTINS, [("time", "get_current_time")])
    route = Route("time", "get_current_time")
    assert ns.resolve("time.get_current_time") == route
    assert ns.resolve("time__get_current_time") == route


def test_builtin_names_match_case_insensitively():
    ns = Namespace(BUILTINS, [])
    assert ns.resolve("Bash") == Route(None, "bash")
    assert ns.resolve("READ") == Route(None, "read")
    assert ns.resolve("mcp__time__get_current_time") is None


def test_suggestions_name_the_closest_tools():
    ns = Namespace(BUILTINS, [("time", "get_current_time"), ("time", "convert_time")])
    assert ns.suggest("baash")[0] == "bash"
    assert "mcp__time__get_current_time" in ns.suggest("mcp__time__get_curent_time")
    assert "mcp__time__convert_time" in ns.suggest("convert_time")


LONG_SERVER = "my-very-long-server-name"
LONG_TOOL = "get_repository_pull_request_review_comments_for_thread"


def test_names_fit_64_characters_together_with_the_clients_own_prefix() -> None:
    from omega_mcp.names import MAX_NAME_LENGTH, Namespace, Naming, Route

    naming = Naming(client_prefix="mcp__omega__")
    space = Namespace([], [(LONG_SERVER, LONG_TOOL), ("time", "get_current_time")], naming)
    long_name = space.name_of(Route(LONG_SERVER, LONG_TOOL))
    assert len("mcp__omega__" + long_name) <= MAX_NAME_LENGTH
    assert long_name.startswith(f"mcp__{LONG_SERVER}__get_")
    assert space.name_of(Route("time", "get_current_time")) == "mcp__time__get_current_time"  # fits: unchanged
    again = Namespace([], [(LONG_SERVER, LONG_TOOL)], naming)
    assert again.name_of(Route(LONG_SERVER, LONG_TOOL)) == long_name  # stable across restarts


def test_short_names_drop_the_mcp_prefix_and_the_full_name_is_still_accepted() -> None:
    from omega_mcp.names import Namespace, Naming, Route

    space = Namespace(["bash"], [("time", "get_current_time")], Naming("mcp__omega__", "short"))
    assert space.name_of(Route("time", "get_current_time")) == "time__get_current_time"
    assert space.resolve("mcp__time__get_current_time") == Route("time", "get_current_time")
    assert space.resolve("bash") == Route(None, "bash")


def test_names_that_collide_once_shortened_stay_unique() -> None:
    from omega_mcp.names import Namespace, Naming, Route

    tools = [(LONG_SERVER, LONG_TOOL + "_a"), (LONG_SERVER, LONG_TOOL + "_b")]
    space = Namespace([], tools, Naming("mcp__omega__"))
    names = {space.name_of(Route(s, t)) for s, t in tools}
    assert len(names) == 2 and all(len("mcp__omega__" + n) <= 64 for n in names)


@pytest.mark.parametrize(
    "naming", [Naming(), Naming(client_prefix="mcp__omega__"), Naming(style="short"), Naming("mcp__omega__", "short")]
)
def test_the_full_name_of_any_length_is_accepted_however_the_client_is_shown_it(naming: Naming):
    server, tool = "my-very-long-server-name", "get_repository_pull_request_review_comments_for_thread"
    namespace = Namespace(["bash"], [(server, tool), ("s", "a.b")], naming)
    full = f"mcp__{server}__{tool}"
    assert len(full) > 64 and all(len(naming.client_prefix + name) <= 64 for name in namespace.names)
    for name in (full, f"{server}__{tool}", f"{server}.{tool}", namespace.names[1]):
        assert namespace.resolve(name) == Route(server, tool), name
    for name in ("mcp__s__a.b", "mcp__s__a_b", "s__a_b", "s.a.b"):
        assert namespace.resolve(name) == Route("s", "a.b"), name
