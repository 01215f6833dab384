"""The one outcome rule (`proxy/outcome.py`), case by case: each kind of answer and what the client gets.

The SDK path and both relays call `outcome`; tests/fastpath/test_relay_matches_sdk.py shows they
answer alike end to end. Here the rule itself is pinned, one answer at a time, as plain dicts.
"""

from __future__ import annotations

from typing import Any

import pytest

from omega_mcp.proxy.outcome import (
    Broke,
    Called,
    Outcome,
    Oversized,
    TimedOut,
    WentAway,
    outcome,
    refused,
    timed_out,
    too_long,
    went_away,
)
from omega_mcp.wire.oversize import too_large_error

CALL = Called("srv", "tool", 1 << 20)
REMOTE = Called("srv", "tool", 1 << 20, remote=True)


def _result(result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "result": result}


def _error(error: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "error": error}


def _is_error(decided: Outcome) -> str:
    """The text of an isError result (and that it is one, with nothing else decided)."""
    assert decided.error is None and decided.result is not None
    assert decided.result["isError"] is True
    (block,) = decided.result["content"]
    return block["text"]


def test_a_result_with_content_is_handed_on_untouched() -> None:
    result = {"content": [{"type": "text", "text": "hi"}], "isError": False, "extra": {"kept": True}}
    decided = outcome(CALL, _result(result))
    assert decided.result is result  # the very dict: nothing parsed, nothing copied
    assert decided.error is None and decided.lose is None


def test_a_tool_s_own_is_error_result_is_handed_on_as_it_is() -> None:
    result = {"content": [{"type": "text", "text": "no such file"}], "isError": True}
    assert outcome(CALL, _result(result)).result is result


def test_a_result_without_a_content_list_is_checked_against_the_model() -> None:
    missing = _is_error(outcome(CALL, _result({"structuredContent": {"a": 1}})))
    assert missing == "server srv returned an invalid result for tool: `content`: Field required"
    invalid = _is_error(outcome(CALL, _result({"content": "not a list"})))
    assert invalid.startswith("server srv returned an invalid result for tool: `content`")


@pytest.mark.parametrize("rounds", [True, False])
def test_an_input_required_round_goes_back_as_it_is_only_where_rounds_pass(rounds: bool) -> None:
    result = {"resultType": "input_required", "inputRequests": {"a": {}}, "requestState": "s"}
    decided = outcome(Called("srv", "tool", 1 << 20, rounds=rounds), _result(result))
    if rounds:
        assert decided.result is result
    else:  # to a handshake-era client it is no result: checked, and it has no content
        assert decided.result is not None and decided.result is not result


def test_a_json_rpc_error_is_passed_on_as_it_is_with_its_sentence() -> None:
    error = {"code": -32042, "message": "needs input", "data": {"elicitations": []}}
    decided = outcome(CALL, _error(error))
    assert decided.error is error and decided.result is None and decided.lose is None
    assert decided.refusal == refused("srv", "tool", "needs input", -32042)
    assert decided.refusal == "server srv refused the call to tool: needs input (error -32042)"


def test_an_error_without_an_integer_code_is_an_is_error_refusal() -> None:
    assert _is_error(outcome(CALL, _error({"code": "x", "message": "odd"}))) == refused("srv", "tool", "odd", 0)


@pytest.mark.parametrize("message", [_error("not an object"), {"jsonrpc": "2.0", "id": 1}, _result([1, 2])])
def test_an_answer_with_no_result_object_is_an_invalid_result(message: dict[str, Any]) -> None:
    text = _is_error(outcome(CALL, message))
    assert text == "server srv returned an invalid result for tool: no `result` object"


def test_an_answer_over_the_bound_fails_that_call_only() -> None:
    stand_in = _error(too_large_error(1 << 20, 5 << 20))
    assert _is_error(outcome(CALL, stand_in)) == too_long("srv", "tool", 1 << 20)
    decided = outcome(CALL, Oversized())
    assert _is_error(decided) == too_long("srv", "tool", 1 << 20) and decided.lose is None
    assert "longer than max_message_mb (1 MiB)" in _is_error(decided)


def test_a_timeout_is_an_is_error_naming_the_setting() -> None:
    decided = outcome(CALL, TimedOut(2.5))
    assert _is_error(decided) == timed_out("srv", "tool", 2.5) and decided.lose is None
    assert "timed out after 2.5 s" in _is_error(decided) and "[servers.srv]" in _is_error(decided)


def test_a_server_that_went_away_is_restarted_or_reconnected_and_its_session_lost() -> None:
    decided = outcome(CALL, WentAway())
    assert _is_error(decided) == went_away("srv", "tool") and decided.lose == "the server closed the connection"
    assert _is_error(decided).endswith("omega will restart it")
    assert _is_error(outcome(REMOTE, WentAway())).endswith("omega will reconnect to it")
    stopped = outcome(CALL, WentAway("reloaded"))
    assert _is_error(stopped) == went_away("srv", "tool", why="reloaded") and stopped.lose == "reloaded"


def test_a_transport_failure_is_an_is_error_and_the_connection_is_lost() -> None:
    decided = outcome(REMOTE, Broke("ConnectError: refused"))
    assert _is_error(decided) == "server srv failed during the call to tool: ConnectError: refused"
    assert decided.lose == "ConnectError: refused"
