"""Fixtures for provider tests: a recording fake HTTP server and request validation against the
providers' official specs in `shared/specs/` (beside the repository checkout)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPECS = Path(__file__).resolve().parents[2] / ".." / "shared" / "specs"
sys.path.insert(0, str(Path(__file__).parent))  # stream_support sits next to the tests (importlib mode)

_OPENAPI = {
    "openai": ("openai-openapi.json", "CreateChatCompletionRequest"),
    "anthropic": ("anthropic-openapi-2026-05-31.yml", "CreateMessageParams"),
    "ollama": ("ollama-openapi.yaml", "ChatRequest"),
}

Reply = httpx2.Response | Callable[[httpx2.Request], httpx2.Response]


class FakeHTTP:
    """Answers requests from a queue and records them (bodies decoded)."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []
        self.client = httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.replies, f"unexpected extra request to {request.url}"
        reply = self.replies.pop(0)
        return reply(request) if callable(reply) else reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]


@pytest.fixture
def fake_http() -> Callable[..., FakeHTTP]:
    def make(*replies: Reply) -> FakeHTTP:
        return FakeHTTP(list(replies))

    return make


SPECS_MISSING = (
    "needs the providers' official API specs, kept outside the repository in ../shared/specs/ beside this "
    "checkout (see CONTRIBUTING.md): not found here"
)
"""One reason for every such skip, so pytest's summary counts them on one line (tests/conftest.py adds a note)."""


def _spec_path(name: str) -> Path:
    path = SPECS / name
    if not path.is_file():
        pytest.skip(SPECS_MISSING)
    return path


@functools.cache
def _openapi_validator(provider: str) -> Draft202012Validator:
    file_name, schema_name = _OPENAPI[provider]
    path = _spec_path(file_name)
    if path.suffix == ".json":
        document = json.loads(path.read_text(encoding="utf-8"))
    else:
        yaml = pytest.importorskip("yaml", reason="PyYAML (dev extra) parses the YAML specs")
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    uri = f"urn:spec:{provider}"
    registry = Registry().with_resource(uri, Resource.from_contents(document, default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"{uri}#/components/schemas/{schema_name}"}, registry=registry)


def _discovery_to_json_schema(node: Any, *, root: str | None = None) -> Any:
    """Google discovery schema → JSON Schema. Discovery has no `required` and no closed objects;
    fields are required when their description says "Required." and, since the API rejects unknown
    fields ("Cannot find field"), objects with declared properties are closed."""
    if isinstance(node, list):
        return [_discovery_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref":
            out["$ref"] = f"#/$defs/{value}"
        elif key == "type" and value == "any":
            continue
        elif key == "properties":
            out["properties"] = {name: _discovery_to_json_schema(sub) for name, sub in value.items()}
            required = [
                name
                for name, sub in value.items()
                if str(sub.get("description", "")).startswith("Required.") and not (root and name == "model")
            ]
            if required:
                out["required"] = required
        elif key in ("items", "additionalProperties"):
            out[key] = _discovery_to_json_schema(value)
        elif key in ("id", "enumDescriptions", "enumDeprecated", "readOnly", "deprecated", "format"):
            continue
        else:
            out[key] = value
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@functools.cache
def _gemini_validator() -> Draft202012Validator:
    document = json.loads(_spec_path("gemini-discovery-v1beta.json").read_text(encoding="utf-8"))
    defs = {
        name: _discovery_to_json_schema(schema, root=name if name == "GenerateContentRequest" else None)
        for name, schema in document["schemas"].items()
    }
    return Draft202012Validator({"$ref": "#/$defs/GenerateContentRequest", "$defs": defs})


@pytest.fixture
def check_request() -> Callable[[str, dict[str, Any]], None]:
    """`check_request(provider, body)` fails the test when `body` violates the provider's spec."""

    def check(provider: str, body: dict[str, Any]) -> None:
        validator = _gemini_validator() if provider == "gemini" else _openapi_validator(provider)
        error = best_match(validator.iter_errors(body))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            pytest.fail(f"{provider} request violates its spec at {where or '<root>'}: {error.message[:500]}")

    return check
