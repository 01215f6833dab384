"""What a model must never see or change by default: the hidden paths and the protected names.

Both lists are defaults a user edits in servers.toml (`[sandbox] hide`/`unhide`, `protect`/
`unprotect`), so `config/` validates against them and `sandbox/` enforces them; they live here,
below both, so neither package imports the other for them. Hidden paths are secrets (every common
agent's credentials, shell histories and rc files): bash, confined servers and `read` cannot see
them. Protected names are what runs next outside the sandbox when a model rewrites it (an MCP
client's server list, an editor's tasks, git's config and hooks): read-only for bash and denied to
the file tools at any depth of every write root. Pure data and path arithmetic.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "DEFAULT_HIDDEN",
    "DEFAULT_PROTECTED",
    "expand_user",
    "is_default_hidden",
    "is_default_protected",
    "normalize_protected",
]

DEFAULT_HIDDEN: tuple[str, ...] = (
    # keys and cloud credentials
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.config/hub",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.vault-token",
    "~/.password-store",
    "~/.local/share/keyrings",
    # agents' credentials and the configs that hold their servers' keys
    "~/.claude/.credentials.json",
    "~/.claude.json",
    "~/.config/Claude",
    "~/.codex/auth.json",
    "~/.gemini/oauth_creds.json",
    "~/.gemini/google_accounts.json",
    "~/.gemini/.env",
    "~/.config/github-copilot",
    "~/.cache/huggingface/token",
    "~/.huggingface/token",
    "~/.local/share/opencode/auth.json",
    "~/.ollama/id_ed25519",
    # shell histories and rc files (keys are exported there)
    "~/.bash_history",
    "~/.zsh_history",
    "~/.history",
    "~/.bashrc",
    "~/.bash_profile",
    "~/.bash_login",
    "~/.profile",
    "~/.zshrc",
    "~/.zshenv",
    "~/.zprofile",
    "~/.config/fish",
    "~/.local/share/fish/fish_history",
    "~/.python_history",
    "~/.node_repl_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
)
"""Hidden unless `[sandbox] unhide` names them; omega's token, state, config files, saved sessions and
the other sessions' private /tmp are hidden on top, always (`SandboxPolicy.hidden_paths`)."""

DEFAULT_PROTECTED: tuple[str, ...] = (
    ".mcp.json",
    ".claude/",
    ".codex/",
    ".cursor/",
    ".gemini/",
    ".vscode/",
    ".idea/",
    ".envrc",
    ".git/config",
    ".git/hooks/",
    # the user's tools' own configuration that makes them run or fetch code by themselves
    ".devcontainer/",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    "pip.conf",
    "uv.toml",
)
"""Protected unless `[sandbox] unprotect` names them: a name (one component) matches at any depth, a
path of several components matches those last components (`.git/config`), a trailing `/` is only a
reminder that everything below is protected too (any name protects what lies below it); `fnmatch`
globs (`*.code-workspace`) are allowed in every component."""


def expand_user(path: str | Path, base: Path | None = None) -> Path:
    """`~` expanded (the home of the user running omega), relative paths against `base`, normalised."""
    expanded = os.path.expanduser(str(path))
    return Path(os.path.normpath(os.path.join(base, expanded) if base is not None else expanded))


def is_default_hidden(path: str | Path) -> bool:
    """Whether `path` (as written in `[sandbox] unhide`) is one of `DEFAULT_HIDDEN`."""
    return expand_user(path) in {expand_user(p) for p in DEFAULT_HIDDEN}


def normalize_protected(name: str) -> str:
    """A protected name as it is compared: no leading `./`, no trailing `/`, single slashes.

    Raises:
        ValueError: empty, absolute, or with a `.`/`..` component (a name is matched inside the roots).
    """
    text = name.strip()
    parts = [p for p in text.split("/") if p]
    if not parts:
        raise ValueError("a protected name must not be empty")
    if text.startswith("/"):
        raise ValueError(f"{name!r} is absolute; a protected name is matched inside every write root (e.g. .envrc)")
    if parts[0] == ".":
        parts = parts[1:]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"{name!r} has a `.` or `..` component; write the name as it appears in a directory")
    return "/".join(parts)


def is_default_protected(name: str) -> bool:
    """Whether `name` (as written in `[sandbox] unprotect`) is one of `DEFAULT_PROTECTED`."""
    try:
        wanted = normalize_protected(name)
    except ValueError:
        return False
    return wanted in {normalize_protected(p) for p in DEFAULT_PROTECTED}
