"""OpenTelemetry traces of the HTTP hub, exported over OTLP/HTTP when an endpoint is configured.

The mcp SDK creates its spans through `opentelemetry-api` alone: a server span per request (its
`OpenTelemetryMiddleware`, which `build_server(traced=True)` puts back in front of omega's fast
path) and a client span per request omega sends downstream, whose W3C trace context it injects
into the request's `_meta`. With only the API installed those spans go nowhere and cost next to
nothing. `start_tracing` changes that when `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set: it installs an SDK `TracerProvider` with a
`BatchSpanProcessor` and the OTLP/HTTP protobuf exporter, as the global provider the SDK's tracer
(a proxy) resolves to. Everything else is the OTel SDK's own reading of the standard variables
(`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`,
`OTEL_EXPORTER_OTLP_*` headers, timeout, compression); the service is `omega-mcp` unless they
name another. omega's own span per downstream call is made by `proxy/calls.py` (`forward_call`,
shared and per-session servers alike), only when the request's span records.

The SDK and the exporter are the optional extra `omega-mcp[otel]` (protobuf is heavy, and a hub
without a collector needs none of it): with the variable set and the extra missing, `serve` logs
one warning line and serves on untraced. `Tracing.stop` flushes the spans still queued and shuts
the provider down in a worker thread, bounded (`STOP_SECONDS`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

import anyio
import anyio.to_thread
from mcp.server.context import ServerMiddleware

from omega_mcp._sdk import OpenTelemetryMiddleware

__all__ = ["ENDPOINT_VARIABLES", "STOP_SECONDS", "Tracing", "request_spans", "start_tracing"]

logger = logging.getLogger("omega_mcp")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
STOP_SECONDS = 10.0
_SERVICE = "omega-mcp"
_MISSING = (
    "traces: an OTLP endpoint is set but the OpenTelemetry SDK is not installed; "
    "pip install 'omega-mcp[otel]' (serving untraced)"
)


class Tracing:
    """The installed provider; `stop` flushes and shuts it down (bounded)."""

    def __init__(self, shutdown: Callable[[], None]) -> None:
        self._shutdown = shutdown

    async def stop(self) -> None:
        """Export what is queued and shut the exporter down; gives up after `STOP_SECONDS`."""
        with anyio.move_on_after(STOP_SECONDS, shield=True):
            await anyio.to_thread.run_sync(self._shutdown, abandon_on_cancel=True)


def start_tracing(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """Install the OTLP exporting provider when an endpoint variable is set; None when tracing is off."""
    env = os.environ if environ is None else environ
    if not any(env.get(name) for name in ENDPOINT_VARIABLES):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning("%s", _MISSING)
        return None
    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, as the SDK reads them
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: _SERVICE}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    logger.info("traces: exported over OTLP/HTTP as service %s", resource.attributes.get(SERVICE_NAME))
    return Tracing(provider.shutdown)


def request_spans() -> ServerMiddleware[object]:
    """The SDK's server span per request (which omega's fast path otherwise replaces)."""
    return OpenTelemetryMiddleware()
