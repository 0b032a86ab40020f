package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing returns the tracer provider OpenTelemetry's standard variables
// configure, or nil when they leave tracing off: neither
// OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set,
// OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none. Spans go to the
// endpoint over OTLP/HTTP (protobuf) in batches; the exporter and the SDK
// read the rest themselves from the process' environment: headers,
// timeout, compression, certificates (OTEL_EXPORTER_OTLP_*), sampling
// (OTEL_TRACES_SAMPLER), batching (OTEL_BSP_*), and the service's name
// (OTEL_SERVICE_NAME, default "superego") and resource attributes. Its
// caller shuts it down, which sends what is left.
func Tracing(ctx context.Context, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	if tracingOff(getenv) {
		return nil, nil
	}
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: superego exports traces with otlp, or none", e)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: superego sends OTLP over HTTP (http/protobuf); point the endpoint at the collector's OTLP/HTTP port, 4318 by default", protocol)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The environment's service name and attributes come after the
	// default, and win.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "superego")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// TracesTo says where Tracing's spans go, for the start-up log: the URL
// the exporter works out from the same variables (the traces endpoint as
// it is, else the endpoint with /v1/traces after its path), without a
// password or query, and the sampler; "off" when Tracing leaves tracing off.
func TracesTo(getenv func(string) string) string {
	if tracingOff(getenv) {
		return "off"
	}
	raw, signal := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), true
	if raw == "" {
		raw, signal = getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), false
	}
	to := raw
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		p := u.Path
		switch {
		case !signal:
			p = path.Join(u.Path, "/v1/traces")
		case p == "":
			p = "/"
		}
		to = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}).String()
	}
	sampler := getenv("OTEL_TRACES_SAMPLER")
	if sampler == "" {
		sampler = "parentbased_always_on"
	}
	if arg := getenv("OTEL_TRACES_SAMPLER_ARG"); arg != "" {
		sampler += " " + arg
	}
	return to + " (OTLP/HTTP, sampler " + sampler + ")"
}

// tracingOff reports whether OpenTelemetry's variables leave tracing off.
func tracingOff(getenv func(string) string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" ||
		strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none"
}

// Tracer is superego's tracer from a provider.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	return tp.Tracer("superego")
}

// LogHandler adds to each line logged with a context that holds a span
// the span's trace_id and span_id, so that a run's log lines lead to its
// trace.
func LogHandler(h slog.Handler) slog.Handler { return traceHandler{h} }

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
