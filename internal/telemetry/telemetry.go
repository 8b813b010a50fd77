// Package telemetry builds the OpenTelemetry tracer provider of a shard
// process from the standard OTEL_* environment variables. Tracing is off by
// default; OTEL_TRACES_EXPORTER=otlp (with OTEL_EXPORTER_OTLP_ENDPOINT and
// friends; OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL grpc, the default, or
// http/protobuf) or =console turns it on. OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override the resource (service.name shardsched,
// service.instance.id the shard). The provider is passed explicitly to the
// components: nothing here sets OpenTelemetry's global state.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
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
		proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch proto {
		case "", "grpc":
			sexp, err = otlptracegrpc.New(ctx)
		case "http/protobuf":
			sexp, err = otlptracehttp.New(ctx)
		default:
			return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", proto)
		}
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
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.instance.id", instance)),
		resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(sexp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
