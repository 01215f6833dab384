"""Arguments and MCP `Tool` definitions of the built-in tools.

The pydantic models are the single source of truth: they validate incoming arguments and
generate the published `inputSchema` (cleaned of pydantic's titles and `anyOf: [X, null]`
noise so every model and provider can follow it). Unknown fields are rejected, so a model
that sends `path` instead of `file_path` is told so instead of being silently ignored, and
types are strict: a string is never taken for a number or a boolean. A whole number sent as
`5.0` is still an integer (JSON Schema's `integer` allows it).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "BUILTIN_TOOLS",
    "BashArgs",
    "BashOutputArgs",
    "EditArgs",
    "KillShellArgs",
    "ReadArgs",
    "WriteArgs",
]

MAX_BASH_TIMEOUT_SECONDS = 600.0
DEFAULT_READ_LIMIT = 2000


class _Args(BaseModel):
    # Strict: `"timeout": "5"` is a mistake the model should hear of, not a number.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BashArgs(_Args):
    command: str = Field(min_length=1, description="The shell command to run (bash -c).")
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=MAX_BASH_TIMEOUT_SECONDS,
        allow_inf_nan=False,
        description="Timeout in seconds (default from config, 120; max 600). On timeout the whole process tree is "
        "killed and the partial output is returned.",
    )
    run_in_background: bool = Field(
        default=False,
        description="Start the command in the background and return a shell id at once; read its output with "
        "bash_output and stop it with kill_shell.",
    )
    description: str | None = Field(default=None, description="Optional 5-10 word summary of what the command does.")


class ReadArgs(_Args):
    file_path: str = Field(min_length=1, description="Path of the file; relative paths resolve against the workspace.")
    offset: int | None = Field(default=None, ge=1, description="1-based line number to start reading from.")
    limit: int | None = Field(
        default=None, ge=1, description=f"Maximum number of lines to read (default {DEFAULT_READ_LIMIT})."
    )

    @field_validator("offset", "limit", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        return int(value) if isinstance(value, float) and value.is_integer() else value


class WriteArgs(_Args):
    file_path: str = Field(min_length=1, description="Path of the file; relative paths resolve against the workspace.")
    content: str = Field(description="The full new content of the file.")


class EditArgs(_Args):
    file_path: str = Field(min_length=1, description="Path of the file; relative paths resolve against the workspace.")
    old_string: str = Field(description="The exact text to replace (must occur in the file; not empty).")
    new_string: str = Field(description="The replacement text (inserted literally; must differ from old_string).")
    replace_all: bool = Field(default=False, description="Replace every occurrence instead of the first one.")


class BashOutputArgs(_Args):
    shell_id: str = Field(min_length=1, description="The id returned by bash with run_in_background.")


class KillShellArgs(_Args):
    shell_id: str = Field(min_length=1, description="The id returned by bash with run_in_background.")


def _clean(schema: Any) -> Any:
    """Drop pydantic's `title`s and collapse `anyOf: [X, {type: null}]` (defaulted None) to X."""
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():  # pyright: ignore[reportUnknownVariableType]
            if key == "title" and isinstance(value, str):
                continue
            if key == "default" and value is None:
                continue
            out[str(key)] = _clean(value)  # pyright: ignore[reportUnknownArgumentType]
        any_of = out.get("anyOf")
        if isinstance(any_of, list):
            branches = [b for b in any_of if b != {"type": "null"}]  # pyright: ignore[reportUnknownVariableType]
            if len(branches) == 1 and len(any_of) == 2:  # pyright: ignore[reportUnknownArgumentType]
                del out["anyOf"]
                out.update(branches[0])  # pyright: ignore[reportUnknownArgumentType]
        return out
    if isinstance(schema, list):
        return [_clean(item) for item in schema]  # pyright: ignore[reportUnknownVariableType]
    return schema


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The published JSON schema of an arguments model."""
    schema: dict[str, Any] = _clean(model.model_json_schema())
    schema["additionalProperties"] = False
    return schema


_BASH_DESCRIPTION = """Run a shell command with bash in the workspace directory and return its combined stdout and \
stderr, in order.

- The working directory is the workspace; relative paths are resolved against it. Each call starts a fresh shell: \
`cd`, variables and processes do not persist between calls (a call cannot see or kill another call's processes; \
background jobs left running are killed when the call returns).
- A non-zero exit status makes the result an error; when the command prints nothing the text is `exit code N`.
- Default timeout 120 s (`timeout`, max 600 s); on timeout the whole process tree is killed and the partial output \
is returned with `timed out`.
- Output over 30,000 characters is cut in the middle; the text says `output truncated` and gives the total size.
- Use `run_in_background: true` for servers and long jobs: it returns a shell id at once; poll with `bash_output` \
and stop with `kill_shell`.
- stdin is /dev/null: interactive commands (editors, prompts, pagers) cannot work; pass flags like `-y`.
- Writes may be confined by the sandbox (workspace, /tmp and configured roots) and network may be off."""

_READ_DESCRIPTION = """Read a text file and return its lines numbered like `cat -n` (line number, tab, text); \
an image (PNG, JPEG, GIF, WebP, up to 3.75 MiB) comes back as an image you can look at.

- Relative paths resolve against the workspace. Reads up to 2000 lines by default: use `offset` (1-based line) and \
`limit` to page through large files.
- Lines longer than 2000 characters are cut; output over 50,000 characters is truncated with `output truncated`.
- Undecodable bytes are replaced; control characters other than tab are shown as `\\xNN`.
- Other binary files (PDF, archives, executables, ...) are refused with their size and type: inspect them with bash.
- Directories, devices, FIFOs and sockets are refused with a clear error."""

_WRITE_DESCRIPTION = """Write a file, replacing it entirely if it exists (atomically: readers never see a partial \
file; the file mode is kept).

- Relative paths resolve against the workspace; missing parent directories are created.
- Writes outside the allowed roots (workspace, $OMEGA_HOME, /tmp, configured write_roots) are denied by the sandbox.
- Prefer `edit` to change part of an existing file."""

_EDIT_DESCRIPTION = """Replace text in an existing file: the first occurrence of `old_string` becomes `new_string`, \
or every occurrence with `replace_all: true`. The result reports how many occurrences were found.

- `old_string` must match the file exactly (including indentation) and must not be empty or equal to `new_string`.
- Replacement is literal: `$1`, `\\1` and `$&` are inserted as typed.
- Files with CRLF line endings keep them (write `\\n` in old_string/new_string; it is matched as CRLF).
- A missing file or an `old_string` that is not found is an error and the file is left unchanged."""

_BASH_OUTPUT_DESCRIPTION = """Return the output a background shell (started with bash `run_in_background: true`) \
produced since the last call, and whether it is still running (with its exit code once it finished)."""

_KILL_SHELL_DESCRIPTION = """Stop a background shell and its whole process tree."""


def _tool(
    name: str, title: str, description: str, model: type[BaseModel], annotations: types.ToolAnnotations
) -> types.Tool:
    return types.Tool(
        name=name, title=title, description=description, input_schema=input_schema(model), annotations=annotations
    )


BUILTIN_TOOLS: tuple[tuple[types.Tool, type[BaseModel]], ...] = (
    (
        _tool(
            "bash",
            "Run a shell command",
            _BASH_DESCRIPTION,
            BashArgs,
            types.ToolAnnotations(
                title="Run a shell command", read_only_hint=False, destructive_hint=True, open_world_hint=True
            ),
        ),
        BashArgs,
    ),
    (
        _tool(
            "read",
            "Read a file",
            _READ_DESCRIPTION,
            ReadArgs,
            types.ToolAnnotations(title="Read a file", read_only_hint=True, open_world_hint=False),
        ),
        ReadArgs,
    ),
    (
        _tool(
            "write",
            "Write a file",
            _WRITE_DESCRIPTION,
            WriteArgs,
            types.ToolAnnotations(
                title="Write a file",
                read_only_hint=False,
                destructive_hint=True,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        ),
        WriteArgs,
    ),
    (
        _tool(
            "edit",
            "Edit a file",
            _EDIT_DESCRIPTION,
            EditArgs,
            types.ToolAnnotations(
                title="Edit a file", read_only_hint=False, destructive_hint=True, open_world_hint=False
            ),
        ),
        EditArgs,
    ),
    (
        _tool(
            "bash_output",
            "Read background shell output",
            _BASH_OUTPUT_DESCRIPTION,
            BashOutputArgs,
            types.ToolAnnotations(title="Read background shell output", read_only_hint=True, open_world_hint=False),
        ),
        BashOutputArgs,
    ),
    (
        _tool(
            "kill_shell",
            "Stop a background shell",
            _KILL_SHELL_DESCRIPTION,
            KillShellArgs,
            types.ToolAnnotations(
                title="Stop a background shell", read_only_hint=False, destructive_hint=True, open_world_hint=False
            ),
        ),
        KillShellArgs,
    ),
)
