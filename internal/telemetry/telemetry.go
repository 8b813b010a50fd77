// Package telemetry builds the OpenTelemetry tracer provider of a shard
// process from the standard OTEL_* environment variables. Tracing is off by
// default; OTEL_TRACES_EXPORTER=otlp (with OTEL_EXPORTER_OTLP_ENDPOINT and
// friends, gRPC) or =console turns it on. The provider is passed explicitly
// to the components: nothing here sets OpenTelemetry's global state.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Setup returns a tracer provider and its shutdown. With tracing off it
// returns a no-op provider. console writes spans to w (stdout if nil).
func Setup(ctx context.Context, service, instance string, w io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	exp := os.Getenv("OTEL_TRACES_EXPORTER")
	if exp == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp = "otlp"
	}
	var sexp sdktrace.SpanExporter
	var err error
	switch exp {
	case "", "none":
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	case "otlp":
		sexp, err = otlptracegrpc.New(ctx)
	case "console":
		if w == nil {
			w = os.Stdout
		}
		sexp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none", exp)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("trace exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.String("service.instance.id", instance))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(sexp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
