package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/proto"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
)

// Off by default: no exporter, a no-op provider.
func TestOffByDefault(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	tp, shutdown, err := Setup(context.Background(), "shardsched", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if _, ok := tp.(*sdktrace.TracerProvider); ok {
		t.Fatal("tracing is on without any OTEL_* variable")
	}
}

// OTLP over HTTP/protobuf reaches a collector at OTEL_EXPORTER_OTLP_ENDPOINT,
// with the service name from OTEL_SERVICE_NAME and the shard as instance.
func TestOTLPHTTP(t *testing.T) {
	var got atomic.Pointer[collectortrace.ExportTraceServiceRequest]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		got.Store(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "sched-prod")
	tp, shutdown, err := Setup(context.Background(), "shardsched", "shard-3", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "scheduler.cycle")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := got.Load()
	if req == nil || len(req.ResourceSpans) == 0 {
		t.Fatal("the collector received no spans")
	}
	attrs := map[string]string{}
	for _, kv := range req.ResourceSpans[0].Resource.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	if attrs["service.name"] != "sched-prod" || attrs["service.instance.id"] != "shard-3" {
		t.Errorf("resource %v: want service.name sched-prod (OTEL_SERVICE_NAME) and instance shard-3", attrs)
	}
	if name := req.ResourceSpans[0].ScopeSpans[0].Spans[0].Name; name != "scheduler.cycle" {
		t.Errorf("span %q, want scheduler.cycle", name)
	}
}

// A bad exporter or protocol is a start-up error naming the variable.
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon", "OTEL_EXPORTER_OTLP_PROTOCOL"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
			t.Setenv(tc.key, tc.value)
			_, _, err := Setup(context.Background(), "shardsched", "s", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s=%s: got %v, want an error naming %s", tc.key, tc.value, err, tc.want)
			}
		})
	}
}
