package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"superego/agents"
	"superego/engine"
	"superego/telemetry"
)

// newLogger is the log --log-format asks for, at level.
func newLogger(cfg config, w io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// operators is what serve gives operators to watch: metrics, and traces
// where OTEL_* variables ask for them.
type operators struct {
	reg     prometheus.Registerer
	tel     *telemetry.Telemetry
	metrics http.Handler
	traces  string // where spans go, for the start-up log; "off"
	// stop sends the spans still to be sent, and closes the metrics'
	// listener, if they have one.
	stop func(ctx context.Context)
}

// watch sets up metrics and traces, and observes the engine with them. With
// traces, log lines of a run name its trace; log is that logger.
func watch(ctx context.Context, cfg config, log *slog.Logger) (*operators, *slog.Logger, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tp, err := telemetry.Tracing(ctx, cfg.getenv)
	if err != nil {
		return nil, nil, err
	}
	opt := telemetry.Options{Content: cfg.TraceContent, MaxRuns: cfg.MaxRuns}
	var stops []func(context.Context)
	if tp != nil {
		opt.Tracer = telemetry.Tracer(tp)
		log = slog.New(telemetry.LogHandler(log.Handler()))
		stops = append(stops, func(ctx context.Context) {
			if err := tp.Shutdown(ctx); err != nil {
				log.Warn("traces not all sent", "err", err)
			}
		})
	}
	tel, err := telemetry.New(reg, opt)
	if err != nil {
		return nil, nil, err
	}
	ops := &operators{reg: reg, tel: tel, metrics: telemetry.Handler(reg), traces: telemetry.TracesTo(cfg.getenv)}
	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return nil, nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", ops.metrics)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go srv.Serve(ln)
		log.Info("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
		ops.metrics = nil // not on the API's listener
		stops = append(stops, func(ctx context.Context) { srv.Shutdown(ctx) })
	}
	ops.stop = func(ctx context.Context) {
		for _, stop := range stops {
			stop(ctx)
		}
	}
	return ops, log, nil
}

// observe has the engine's runs, and its agent's calls, observed.
func (ops *operators) observe(engine *engine.Engine) error {
	engine.Exec.Observe = ops.tel.Flow()
	if err := telemetry.Waiting(ops.reg, engine.Store); err != nil {
		return err
	}
	if a, ok := engine.Exec.Agent.(*agents.Agent); ok {
		a.Observe = ops.tel.Agents()
	}
	return nil
}
