// Package tracing sets up OpenTelemetry for a process and carries W3C trace context across
// the places where it leaves the Go call stack: the outbox row (its metadata), the job's
// envelope (worker.Trace) and outbound HTTP calls.
//
// Setup installs the global propagator (W3C trace context and baggage) and a tracer provider
// that exports spans with OTLP over HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; without an endpoint nothing is exported, but
// trace context still propagates, so a request's traceparent reaches its jobs. The service
// name is OTEL_SERVICE_NAME (default "listing"), as the OpenTelemetry SDK reads it.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is the name of the service's tracer.
const Tracer = "github.com/listingkit/listing"

// propagator is what the service reads and writes on HTTP: W3C trace context and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Setup installs the propagator and, when an OTLP endpoint is configured, an exporting tracer
// provider; shutdown flushes and stops it (a no-op otherwise). Handler and Transport
// propagate trace context without Setup; spans are recorded only with a tracer provider.
func Setup(ctx context.Context) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagator)
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "listing"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(name)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// Handler traces an HTTP server: a server span per request, continuing the caller's
// traceparent.
func Handler(h http.Handler, operation string) http.Handler {
	return otelhttp.NewHandler(h, operation, otelhttp.WithPropagators(propagator),
		otelhttp.WithSpanNameFormatter(func(op string, r *http.Request) string { return op + " " + r.Method }))
}

// Transport traces outbound HTTP calls (a client span each) and sends traceparent.
func Transport(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return otelhttp.NewTransport(rt, otelhttp.WithPropagators(propagator))
}

// Inject returns the W3C trace context of ctx's span: traceparent and tracestate (empty
// without a valid span).
func Inject(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// Extract returns ctx carrying the remote span context of traceparent and tracestate (ctx
// unchanged when traceparent is empty or malformed).
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// Start starts a span of the service's tracer.
func Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	return otel.Tracer(Tracer).Start(ctx, name, trace.WithSpanKind(kind))
}
