package telemetry_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/memstore"
	"superego/telemetry"
	"superego/tools"
)

const benchFlow = `{"name": "calc", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Judge.",
    "transitions": {"BLOCK": null, "ACCEPT": "calculator", "CAUTION": "calculator"}},
  "calculator": {"type": "inner_agent", "agent_id": "calculator", "system_prompt": "Calculate.", "tools": ["calculator"],
    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self"}},
  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review.",
    "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`

func benchScript(r agentstest.Request) agentstest.Answer {
	switch r.Node() {
	case "input_superego":
		return agentstest.Reply("benign", "CAUTION", "verify", "ok")
	case "calculator":
		if res := r.ToolResults(); len(res) > 0 {
			return agentstest.Reply("done", "COMPLETE", "", "5*10 = "+res[0].Text)
		}
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "c1", Name: "calculator", Args: `{"expression":"5*10"}`}}}
	}
	return agentstest.Reply("fine", "ACCEPT", "", "")
}

// BenchmarkObserved is the guarded calculator through the engine, the
// agents and the calculator on an instant in-process model, observed by
// nothing, by metrics, and by metrics and traces (the SDK's batching, to an
// exporter that drops them, or the OTLP/HTTP exporter to a sink).
func BenchmarkObserved(b *testing.B) {
	def, err := flow.Parse([]byte(benchFlow), flow.Catalog{Tools: []string{"calculator"}})
	if err != nil {
		b.Fatal(err)
	}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer sink.Close()
	for _, mode := range []string{"none", "metrics", "traces-drop", "traces-otlp"} {
		b.Run(mode, func(b *testing.B) {
			model := agents.Model{LLM: agentstest.Func(benchScript), Name: "openai:func"}
			agent := &agents.Agent{Model: func(string) (agents.Model, error) { return model, nil }, Tools: tools.Set{"calculator": tools.Calculator()}}
			x := &engine.Executor{Agent: agent}
			var tp *sdktrace.TracerProvider
			switch mode {
			case "traces-drop":
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			case "traces-otlp":
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
				var err error
				if tp, err = telemetry.Tracing(context.Background(), func(k string) string { return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink.URL}[k] }); err != nil {
					b.Fatal(err)
				}
			}
			if mode != "none" {
				opt := telemetry.Options{}
				if tp != nil {
					defer tp.Shutdown(context.Background())
					opt.Tracer = telemetry.Tracer(tp)
				}
				tel, err := telemetry.New(prometheus.NewRegistry(), opt)
				if err != nil {
					b.Fatal(err)
				}
				x.Observe, agent.Observe = tel.Flow(), tel.Agents()
			}
			e := &engine.Engine{Flows: map[string]*flow.Flow{"calc": {ID: "calc", Def: def}}, Exec: x, Store: &discardStore{}, Log: slog.New(slog.DiscardHandler)}
			var bytes int
			b.ReportAllocs()
			for b.Loop() {
				err := e.Run(context.Background(), engine.Request{FlowID: "calc", Input: "What is 5*10?"}, func(ev flow.Event) {
					data, _ := json.Marshal(ev.Data)
					bytes += len(data)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discardStore keeps nothing: each write is durable at once.
type discardStore struct{ memstore.Store }

func (*discardStore) Create(_ flow.Instance, done func(error))          { done(nil) }
func (*discardStore) Append(_ string, _ []flow.Event, done func(error)) { done(nil) }
func (*discardStore) Hold(_ string, _ flow.Event, done func(error))     { done(nil) }
func (*discardStore) Settle(_ string, _ []flow.Event, done func(error)) { done(nil) }

// BenchmarkSpan is what one span costs through superego's observer, beside
// a bare OpenTelemetry SDK span with the same name, the same attributes,
// the same tracer provider and the same exporter (OTLP/HTTP, batched, to
// a sink on loopback): their ratio is the observer's own cost. A node's
// span is made under a run's recording root span, as in a run; a run's
// span is a root of its own.
func BenchmarkSpan(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer sink.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL) // the exporter reads the environment itself
	tp, err := telemetry.Tracing(context.Background(), func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink.URL}[k]
	})
	if err != nil {
		b.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	tracer := telemetry.Tracer(tp)
	tel, err := telemetry.New(prometheus.NewRegistry(), telemetry.Options{Tracer: tracer})
	if err != nil {
		b.Fatal(err)
	}
	o := tel.Flow()
	node := &flow.Node{Name: "calculator", AgentID: "calculator", Type: flow.InnerAgent}
	run := engine.RunInfo{FlowID: "calc", InstanceID: "0b5e8c1c5d2a4f7e9a3b6c1d2e4f5a6b", RunID: "7c1d2e4f5a6b0b5e8c1c5d2a4f7e9a3b"}
	it := engine.Iteration{RunInfo: run, Node: node, StepID: "3"}
	root, rootSpan := tracer.Start(context.Background(), "run calc", trace.WithNewRoot())
	defer rootSpan.End()

	b.Run("node", func(b *testing.B) {
		paired(b, func() { o.NodeEnded(o.NodeStarted(root, it), it, "COMPLETE", "") }, func() {
			_, span := tracer.Start(root, "invoke_agent "+node.Name)
			span.SetAttributes(attribute.String("gen_ai.operation.name", "invoke_agent"), attribute.String("gen_ai.agent.name", node.Name),
				attribute.String("gen_ai.agent.id", node.AgentID), attribute.String("superego.node_type", node.Type),
				attribute.String("superego.step_id", it.StepID), attribute.String("superego.decision", "COMPLETE"))
			span.End()
		})
	})
	b.Run("run", func(b *testing.B) {
		paired(b, func() { o.RunEnded(o.RunStarted(context.Background(), run), run, flow.StatusCompleted, "") }, func() {
			_, span := tracer.Start(context.Background(), "run "+run.FlowID, trace.WithNewRoot())
			span.SetAttributes(attribute.String("superego.flow_id", run.FlowID), attribute.String("superego.run_id", run.RunID),
				attribute.String("superego.instance_id", run.InstanceID), attribute.Bool("superego.resumed", run.Resumed),
				attribute.String("superego.status", flow.StatusCompleted))
			span.End()
		})
	})
}

// paired times ours and the bare SDK's span in turns, blocks of 64 each,
// so that the machine's other load falls on both alike, and reports each
// one's ns a span and their ratio; ns/op is the pair's.
func paired(b *testing.B, ours, bare func()) {
	const block = 64
	var tOurs, tBare time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		for range block {
			ours()
		}
		mid := time.Now()
		for range block {
			bare()
		}
		tOurs, tBare = tOurs+mid.Sub(start), tBare+time.Since(mid)
	}
	b.ReportMetric(float64(tOurs.Nanoseconds())/float64(b.N*block), "superego-ns/span")
	b.ReportMetric(float64(tBare.Nanoseconds())/float64(b.N*block), "sdk-ns/span")
	b.ReportMetric(float64(tOurs)/float64(tBare), "ratio")
}
