package tests

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/listingkit/listing/internal/servicetest"
)

var (
	spansOnce sync.Once
	spans     *tracetest.InMemoryExporter
)

// recordSpans installs, once per test binary, a tracer provider that keeps every span in
// memory. Tests that use it filter the spans by their own trace id.
func recordSpans() *tracetest.InMemoryExporter {
	spansOnce.Do(func() {
		spans = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	})
	return spans
}

// TestTraceFromRequestToWorker: a request's traceparent continues into the outbox row, the
// BullMQ job's data, the worker's log line for the job, and one trace from the HTTP server
// span to the worker's outbound call to the marketplace.
func TestTraceFromRequestToWorker(t *testing.T) {
	exporter := recordSpans()
	env := servicetest.StartAll(t)
	acct := env.Register("trace@example.com")
	storeID := seedVerifiedStore(t, env, acct, "trace")
	productID := seedProduct(t, env, acct)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	header := seedKey()
	header["traceparent"] = "00-" + traceID + "-00f067aa0ba902b7-01"
	header["X-Request-Id"] = "trace-test-request"
	pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: header, Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	op := env.WaitOperation(acct, seedField(t, pub, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)

	jobID := seedOutbox(t, env.DB, acct.WorkspaceID, "listing-publish").ID
	data := env.API.Redis.HGet(context.Background(), env.Config.BullMQPrefix+":listing-publish:"+jobID, "data").Val()
	require.Contains(t, data, `"traceparent":"00-`+traceID+`-`, "the job's trace")
	require.Contains(t, data, `"correlation_id":"trace-test-request"`)

	var jobLine string
	for _, line := range strings.Split(env.Logs(), "\n") {
		if strings.Contains(line, `"job_id":"`+jobID+`"`) && strings.Contains(line, `"msg":"job"`) {
			jobLine = line
		}
	}
	require.Contains(t, jobLine, `"trace_id":"`+traceID+`"`, "the worker's log line for the job")
	require.Contains(t, jobLine, `"correlation_id":"trace-test-request"`)

	var server, job, client []sdktrace.ReadOnlySpan
	for _, s := range exporter.GetSpans().Snapshots() {
		if s.SpanContext().TraceID().String() != traceID {
			continue
		}
		switch s.SpanKind() {
		case trace.SpanKindServer:
			server = append(server, s)
		case trace.SpanKindConsumer:
			job = append(job, s)
		case trace.SpanKindClient:
			client = append(client, s)
		}
	}
	require.Len(t, server, 1, "the request's server span")
	require.Len(t, job, 1, "the job's span")
	require.Equal(t, "job listing-publish", job[0].Name())
	require.Equal(t, server[0].SpanContext().SpanID(), job[0].Parent().SpanID(), "the job continues the request")
	require.NotEmpty(t, client, "the worker's calls to the marketplace")
	for _, c := range client {
		require.Equal(t, job[0].SpanContext().SpanID(), c.Parent().SpanID(), "a marketplace call of the job")
	}
}
