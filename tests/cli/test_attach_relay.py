"""The per-window side of `omega-mcp attach`, in-process: its JSON (the C scanner of `_json`, not the
`json` module), its quick reading of the command line against argparse's, the greeting's answers,
and what a window process imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from omega_mcp.cli.attach import _Options  # pyright: ignore[reportPrivateUsage]
from omega_mcp.cli.attach_relay import Greeting, dumps, loads
from omega_mcp.server.instructions import CLIENT_MARK, WORKSPACE_MARK

VALUES = [
    {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": {"progressToken": "p"}}},
    {"s": 'quote " backslash \\ newline \n tab \t é 𝄞 \u0000', "n": [0, -1, 2**70, 1.5, -2.25e-9, True, False, None]},
    [],
    {},
    "x",
    12,
]


@pytest.mark.parametrize("value", VALUES)
def test_the_window_json_reads_and_writes_what_the_json_module_does(value: object) -> None:
    assert loads(json.dumps(value).encode()) == value
    assert loads(json.dumps(value, indent=2).encode()) == value
    assert json.loads(dumps(value)) == value


@pytest.mark.parametrize("text", [b"", b"{", b'{"a": 1} x', b"\xff", b"[" * 100_000, b"{'a': 1}"])
def test_the_window_json_refuses_what_is_no_json_with_a_value_error(text: bytes) -> None:
    with pytest.raises(ValueError):
        loads(text)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--config", "a.toml", "--workspace", "w"],
        ["--config=a.toml", "--mode", "rx", "--names=short", "--client-prefix", "mcp__omega__"],
        ["--mode", "sandbox", "--mode", "rwx", "--log-level", "debug"],
        ["--conf", "a.toml"],  # argparse's abbreviation: not the quick path's, same result
    ],
)
def test_the_quick_reading_of_the_flags_agrees_with_argparse(argv: list[str]) -> None:
    quick = _Options._quick(argv)  # pyright: ignore[reportPrivateUsage]
    assert quick is None or quick == _Options._parsed(argv)  # pyright: ignore[reportPrivateUsage]
    assert _Options(argv).values == _Options._parsed(argv)  # pyright: ignore[reportPrivateUsage]


def test_the_greeting_answers_only_what_it_knows() -> None:
    greeting = Greeting({
        "initialize 2025-06-18": '"result":{"protocolVersion":"2025-06-18"}',
        "initialize *": '"result":{"protocolVersion":"2025-11-25"}',
        "discover": '"error":{"code":-32601}',
        "discover 2026-07-28": '"result":{"supportedVersions":["2026-07-28"]}',
    })  # fmt: skip
    info = {"capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}
    ask = greeting.answer
    assert ask({"method": "initialize", "params": {"protocolVersion": "2025-06-18", **info}}) == (
        '"result":{"protocolVersion":"2025-06-18"}'
    )
    assert ask({"method": "initialize", "params": {"protocolVersion": "1999-01-01", **info}}) == (
        '"result":{"protocolVersion":"2025-11-25"}'
    )
    assert ask({"method": "initialize", "params": {"protocolVersion": "2025-06-18"}}) is None  # malformed: the hub's
    assert ask({"method": "server/discover"}) == '"error":{"code":-32601}'
    modern = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    assert ask({"method": "server/discover", "params": modern}) == '"result":{"supportedVersions":["2026-07-28"]}'
    future = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}
    assert ask({"method": "server/discover", "params": future}) is None
    assert ask({"method": "tools/list"}) is None


def test_a_window_fills_the_greetings_instructions_with_its_own_workspace_and_tree() -> None:
    template = f"workspace {WORKSPACE_MARK}. write under {WORKSPACE_MARK}, {CLIENT_MARK}/scratch, /tmp"
    answer = f'"result":{json.dumps({"instructions": template, "protocolVersion": "2025-06-18"})}'
    window = {"mode": "sandbox", "workspace": "/hub/ws", "tree": "/h/clients/window-"}
    greeting = Greeting({"initialize *": answer}, window)
    opening = {"method": "initialize", "params": {"protocolVersion": "x", "capabilities": {}, "clientInfo": {}}}
    opening["params"]["clientInfo"] = {"name": "c", "version": "1"}  # type: ignore[index]

    def told(filled: Greeting | None) -> str:
        assert filled is not None
        text = filled.answer(opening)
        assert text is not None
        return json.loads("{" + text + "}")["result"]["instructions"]

    own = '/home/josé/a "quoted" \\ dir'
    assert told(greeting.for_window("7-ab", own, None)) == (
        f"workspace {own}. write under {own}, /h/clients/window-7-ab/scratch, /tmp"
    )
    assert told(greeting.for_window("7-ab", None, "sandbox")).startswith("workspace /hub/ws. write under /hub/ws,")
    assert greeting.for_window("7-ab", own, "rx") is None  # another mode: only the hub can tell
    assert Greeting({"initialize *": answer}).for_window("7-ab", own, None) is None  # an older hub's greeting


def test_a_window_process_imports_no_json_re_pathlib_socket_or_argparse() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import omega_mcp.cli\n"
        "import omega_mcp.cli.attach\n"
        "heavy = ('json', 're', 'pathlib', 'socket', 'selectors', 'argparse', 'hashlib', 'typing', 'anyio', 'mcp')\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
