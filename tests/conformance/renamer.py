"""A thin HTTP proxy that undoes omega's `<server>__` names and does nothing else.

The conformance suite calls the reference server's tools and prompts by their own names; through
omega they are `ref__<name>` (`--names short`). This proxy adds the prefix to the names a request
carries (`tools/call`, `prompts/get`, and the `Mcp-Name` header of the 2026 era), strips it from
`tools/list` and `prompts/list` answers (JSON or SSE), adds omega's bearer token, and passes every
other byte, header and status through. Run with an empty prefix in front of the reference server,
it is the identity control: every scenario must still pass.

    python renamer.py --port P --upstream http://127.0.0.1:Q/mcp [--prefix ref__] [--token T]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

NAMED = ("tools/call", "prompts/get")
HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "authorization"}


def rename_request(message: Any, prefix: str) -> Any:
    if isinstance(message, list):
        return [rename_request(m, prefix) for m in message]  # pyright: ignore
    method = message.get("method") if isinstance(message, dict) else None  # pyright: ignore
    params = message.get("params") if isinstance(message, dict) else None  # pyright: ignore
    if not isinstance(params, dict):
        return message  # pyright: ignore
    if method == "completion/complete":  # a prompt is named in the reference it completes
        params = params.get("ref")  # pyright: ignore
        if not isinstance(params, dict) or params.get("type") != "ref/prompt":  # pyright: ignore
            return message  # pyright: ignore
    elif method not in NAMED:
        return message  # pyright: ignore
    if isinstance(params.get("name"), str):  # pyright: ignore
        params["name"] = prefix + params["name"]
    return message  # pyright: ignore


def rename_answer(message: Any, prefix: str) -> Any:
    if isinstance(message, list):
        return [rename_answer(m, prefix) for m in message]  # pyright: ignore
    result = message.get("result") if isinstance(message, dict) else None  # pyright: ignore
    if isinstance(result, dict):
        for key in ("tools", "prompts"):
            items = result.get(key)  # pyright: ignore
            if isinstance(items, list):
                result[key] = [  # only the renamed server's entries: omega's own built-ins are not its
                    {**item, "name": item["name"][len(prefix) :]}
                    for item in items  # pyright: ignore
                    if isinstance(item, dict) and str(item.get("name", "")).startswith(prefix)  # pyright: ignore
                ]
    return message  # pyright: ignore


def make_app(upstream: str, prefix: str, token: str | None) -> Starlette:
    client = httpx2.AsyncClient(timeout=httpx2.Timeout(60.0, read=None))

    async def proxy(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        headers["host"] = request.headers.get("host", "")
        if token:
            headers["authorization"] = f"Bearer {token}"
        elif "authorization" in request.headers:
            headers["authorization"] = request.headers["authorization"]
        body = await request.body()
        if prefix and body and request.method == "POST":
            try:
                body = json.dumps(rename_request(json.loads(body), prefix)).encode()
            except ValueError:
                pass  # not JSON: the server judges it
            if "mcp-name" in headers and headers.get("mcp-method") in NAMED:
                headers["mcp-name"] = prefix + headers["mcp-name"]
        url = upstream + (f"?{request.url.query}" if request.url.query else "")
        sent = client.build_request(request.method, url, headers=headers, content=body)
        answer = await client.send(sent, stream=True)
        out = {k: v for k, v in answer.headers.items() if k.lower() not in HOP | {"content-encoding"}}
        kind = answer.headers.get("content-type", "")
        if prefix and kind.startswith("application/json"):
            raw = await answer.aread()
            await answer.aclose()
            try:
                raw = json.dumps(rename_answer(json.loads(raw), prefix)).encode()
            except ValueError:
                pass
            return Response(raw, status_code=answer.status_code, headers=out)
        if prefix and kind.startswith("text/event-stream"):
            return StreamingResponse(
                _events(answer, prefix),
                status_code=answer.status_code,
                headers=out,
                background=BackgroundTask(answer.aclose),
            )
        return StreamingResponse(
            answer.aiter_raw(), status_code=answer.status_code, headers=out, background=BackgroundTask(answer.aclose)
        )

    return Starlette(routes=[Route("/mcp", proxy, methods=["GET", "POST", "DELETE"])])


async def _events(answer: httpx2.Response, prefix: str) -> AsyncIterator[bytes]:
    async for line in answer.aiter_lines():
        if line.startswith("data:"):
            try:
                line = "data: " + json.dumps(rename_answer(json.loads(line[5:]), prefix))
            except ValueError:
                pass
        yield (line + "\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--prefix", default="")
    parser.add_argument("--token")
    args = parser.parse_args()
    app = make_app(args.upstream, args.prefix, args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
