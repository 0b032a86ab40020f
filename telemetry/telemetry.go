// Package telemetry is what an operator sees of superego: Prometheus
// metrics of runs, steps, drafts, model and tool calls and store writes,
// and OpenTelemetry traces, a trace per run with a span per
// node iteration, model call and tool call. It adapts the observers that
// flow and agents declare; neither of them knows of Prometheus or of
// OpenTelemetry.
//
// Labels and span attributes carry identifiers only: flow ids, node names,
// decisions as the flow's definition bounds them, statuses, providers,
// models and tool names. No label carries an instance id, and nothing
// carries a user's text, a thinking, an agent_guidance, or a draft a
// superego may withhold. The one exception is asked for by name: with
// Content (SUPEREGO_TRACE_CONTENT=1), model call spans carry the prompt,
// with every text a client has not been shown replaced by "[hidden]", and
// the response of a turn that is not held.
package telemetry

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"superego/agents"
	"superego/engine"
	"superego/flow"
)

// Telemetry feeds superego's metrics and, with a tracer, its traces. Make
// one with New.
type Telemetry struct {
	tracer  trace.Tracer // nil: no spans
	content bool

	runsStarted  *vec[[1]string, prometheus.Counter]
	runsFinished *vec[[2]string, prometheus.Counter]
	runsInFlight prometheus.Gauge
	runsMax      prometheus.Gauge
	steps        *vec[[3]string, prometheus.Counter]
	drafts       *vec[[3]string, prometheus.Counter]
	modelCalls   *vec[[3]string, prometheus.Observer]
	tokens       *vec[[3]string, prometheus.Counter]
	toolCalls    *vec[[2]string, prometheus.Observer]
	subscribers  prometheus.Gauge
	storeWrites  prometheus.Histogram
	judgements   *vec[[4]string, prometheus.Counter]
	rules        *vec[[2]string, prometheus.Counter]
	judgeWait    *vec[[3]string, prometheus.Observer]
	bases        *vec[[3]string, prometheus.Counter]
}

// Options are what New needs besides the registry.
type Options struct {
	// Tracer, where set, makes a trace of every run; nil traces nothing.
	Tracer trace.Tracer
	// Content puts prompts and visible responses on model call spans
	// (SUPEREGO_TRACE_CONTENT=1); see the package comment.
	Content bool
	// MaxRuns is the server's --max-runs, exported as superego_runs_max so
	// that an alert on runs in flight follows the limit; 0 where unknown.
	MaxRuns int
}

// New registers superego's metrics with reg and returns the telemetry
// that feeds them.
func New(reg prometheus.Registerer, opt Options) (*Telemetry, error) {
	runsStarted := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_runs_started_total",
		Help: "Runs started on this server, resumed and taken-over runs included."}, []string{"flow"})
	runsFinished := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_runs_finished_total",
		Help: `Runs ended on this server, by status; "interrupted" is a run a shutdown stopped, to resume later.`}, []string{"flow", "status"})
	steps := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_steps_total",
		Help: `Node steps recorded, by decision; "*" is a decision only the node's "*" transition accepted.`}, []string{"flow", "node", "decision"})
	drafts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_drafts_total",
		Help: "Held inner-agent turns (gated output), by the inner agent's node, released or withheld."}, []string{"flow", "node", "outcome"})
	modelCalls := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "superego_model_call_seconds",
		Help:    "Model calls, by outcome: ok, error, timeout, cancelled, or cached (no call).",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60, 120}}, []string{"provider", "model", "outcome"})
	tokens := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_model_tokens_total",
		Help: "Tokens of model calls as their providers report them, prompt or completion."}, []string{"provider", "model", "kind"})
	toolCalls := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "superego_tool_call_seconds",
		Help:    "Tool calls, by outcome: ok, error (the tool's own, which goes back to the model), timeout, or panic.",
		Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 15, 60, 120}}, []string{"tool", "outcome"})
	judgements := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_tool_judgements_total",
		Help: "Judgements of tool calls (kind call) and of their results (kind result) by an agent's judges (docs/actions.md), by the decision they stand for."}, []string{"flow", "node", "kind", "decision"})
	rules := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_tool_rules_total",
		Help: "Tool calls a permission rule decided, with no model: allow, ask or deny."}, []string{"flow", "effect"})
	judgeWait := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "superego_tool_judge_wait_seconds",
		Help:    "How long a tool call, or its result, waited for its judge's verdict.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60, 120}}, []string{"flow", "node", "kind"})
	bases := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "superego_decisions_by_basis_total",
		Help: `Decisions of superegos judging under a stack of constitutions (docs/stacks.md), by what they rest on: "floor", a library constitution's name, or "other".`}, []string{"flow", "node", "basis"})
	t := &Telemetry{
		bases:        newVec(func(k [3]string) prometheus.Counter { return bases.WithLabelValues(k[:]...) }),
		judgements:   newVec(func(k [4]string) prometheus.Counter { return judgements.WithLabelValues(k[:]...) }),
		rules:        newVec(func(k [2]string) prometheus.Counter { return rules.WithLabelValues(k[:]...) }),
		judgeWait:    newVec(func(k [3]string) prometheus.Observer { return judgeWait.WithLabelValues(k[:]...) }),
		tracer:       opt.Tracer,
		content:      opt.Content,
		runsStarted:  newVec(func(k [1]string) prometheus.Counter { return runsStarted.WithLabelValues(k[:]...) }),
		runsFinished: newVec(func(k [2]string) prometheus.Counter { return runsFinished.WithLabelValues(k[:]...) }),
		runsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "superego_runs_in_flight",
			Help: "Runs executing on this server now."}),
		runsMax: prometheus.NewGauge(prometheus.GaugeOpts{Name: "superego_runs_max",
			Help: "Runs this server executes at once (--max-runs); past it, new runs get 429."}),
		steps:      newVec(func(k [3]string) prometheus.Counter { return steps.WithLabelValues(k[:]...) }),
		drafts:     newVec(func(k [3]string) prometheus.Counter { return drafts.WithLabelValues(k[:]...) }),
		modelCalls: newVec(func(k [3]string) prometheus.Observer { return modelCalls.WithLabelValues(k[:]...) }),
		tokens:     newVec(func(k [3]string) prometheus.Counter { return tokens.WithLabelValues(k[:]...) }),
		toolCalls:  newVec(func(k [2]string) prometheus.Observer { return toolCalls.WithLabelValues(k[:]...) }),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "superego_stream_subscribers",
			Help: "Clients streaming a run's events now (SSE, and /v1 streams)."}),
		storeWrites: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "superego_store_write_seconds",
			Help:    "Writes of events the engine queued to its store, from queued to durable: how long a client waits to be shown them (a write carries one or more events).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
	}
	t.runsMax.Set(float64(opt.MaxRuns))
	for _, c := range []prometheus.Collector{runsStarted, runsFinished, t.runsInFlight, t.runsMax, steps, drafts,
		modelCalls, tokens, toolCalls, t.subscribers, t.storeWrites, judgements, rules, judgeWait, bases} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// vec keeps a metric vector's children by their label values, so that
// finding one is a map lookup: the vector's WithLabelValues allocates and
// checks each value's UTF-8 at every call, and a run makes a few dozen.
// The map is copied on write: label values are bounded (see the package
// comment), so writes stop soon, and a read takes no lock that runs on
// both cores would contend for.
type vec[K comparable, M any] struct {
	of func(K) M
	m  atomic.Pointer[map[K]M]
	mu sync.Mutex // serialises writers
}

func newVec[K comparable, M any](of func(K) M) *vec[K, M] {
	v := &vec[K, M]{of: of}
	v.m.Store(&map[K]M{})
	return v
}

func (v *vec[K, M]) get(k K) M {
	if m, ok := (*v.m.Load())[k]; ok {
		return m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	old := *v.m.Load()
	if m, ok := old[k]; ok {
		return m
	}
	m := v.of(k)
	next := make(map[K]M, len(old)+1)
	maps.Copy(next, old)
	next[k] = m
	v.m.Store(&next)
	return m
}

// Handler serves the metrics of g in Prometheus' text format, or in
// OpenMetrics where the scraper asks for it (Prometheus does), which
// carries the exemplars that lead from a model or tool call's latency to
// its trace.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// observe records v, with the trace of ctx as its exemplar where that trace
// is sampled: OpenMetrics shows it beside v's bucket.
func observe(ctx context.Context, o prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if e, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(v)
}

// StreamSubscribers is the gauge of clients streaming events, for the API
// to count them.
func (t *Telemetry) StreamSubscribers() prometheus.Gauge { return t.subscribers }

// Span attributes: OpenTelemetry's gen_ai.* where they fit, superego.*
// for the rest.
const (
	attrOperation    = attribute.Key("gen_ai.operation.name")
	attrSystem       = attribute.Key("gen_ai.system")
	attrRequestModel = attribute.Key("gen_ai.request.model")
	attrInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	attrInputMsgs    = attribute.Key("gen_ai.input.messages")
	attrOutputMsgs   = attribute.Key("gen_ai.output.messages")
	attrAgentName    = attribute.Key("gen_ai.agent.name")
	attrAgentID      = attribute.Key("gen_ai.agent.id")
	attrToolName     = attribute.Key("gen_ai.tool.name")
	attrFlow         = attribute.Key("superego.flow_id")
	attrRun          = attribute.Key("superego.run_id")
	attrInstance     = attribute.Key("superego.instance_id")
	attrResumed      = attribute.Key("superego.resumed")
	attrStatus       = attribute.Key("superego.status")
	attrErrorCode    = attribute.Key("superego.error_code")
	attrNodeType     = attribute.Key("superego.node_type")
	attrStep         = attribute.Key("superego.step_id")
	attrSpeculative  = attribute.Key("superego.speculative")
	attrDecision     = attribute.Key("superego.decision")
	attrChunk        = attribute.Key("superego.chunk")
	attrOutcome      = attribute.Key("superego.outcome")
)

// Flow is the observer the engine and its executor are given.
func (t *Telemetry) Flow() *engine.Observer {
	o := &engine.Observer{
		RunStarted: t.runStarted,
		RunEnded:   t.runEnded,
		Stepped: func(flowID, node, decision string) {
			t.steps.get([3]string{flowID, node, decision}).Inc()
		},
		Drafted: func(flowID, node string, released bool) {
			outcome := "withheld"
			if released {
				outcome = "released"
			}
			t.drafts.get([3]string{flowID, node, outcome}).Inc()
		},
		Wrote: func(d time.Duration) { t.storeWrites.Observe(d.Seconds()) },
		Judged: func(flowID, judge, kind, decision string, wait time.Duration) {
			t.judgements.get([4]string{flowID, judge, kind, decision}).Inc()
			t.judgeWait.get([3]string{flowID, judge, kind}).Observe(wait.Seconds())
		},
		Ruled: func(flowID, effect string) { t.rules.get([2]string{flowID, effect}).Inc() },
		Based: func(flowID, node, basis string) { t.bases.get([3]string{flowID, node, basis}).Inc() },
	}
	if t.tracer != nil {
		o.NodeStarted, o.NodeEnded = t.nodeStarted, t.nodeEnded
	}
	return o
}

// recording reports whether ctx's span records: a run whose trace is not
// sampled makes no spans under its own. Every sampler OpenTelemetry's
// variables name decides by the trace (its id, or its root's decision), so
// they would not be sampled either, and skipping them costs nothing.
func recording(ctx context.Context) bool {
	return trace.SpanFromContext(ctx).IsRecording()
}

// A span's attributes are all set when it ends, in one call: the SDK
// copies those given to Start, and grows a span's attributes at each call;
// setting them once took a tenth off a traced flow. No sampler
// OpenTelemetry's variables name reads them (see recording).

func (t *Telemetry) nodeStarted(ctx context.Context, it engine.Iteration) context.Context {
	if !recording(ctx) {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, "invoke_agent "+it.Node.Name)
	return ctx
}

func (t *Telemetry) nodeEnded(ctx context.Context, it engine.Iteration, decision, code string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := append(make([]attribute.KeyValue, 0, 7), attrOperation.String("invoke_agent"), attrAgentName.String(it.Node.Name),
		attrAgentID.String(it.Node.AgentID), attrNodeType.String(it.Node.Type), attrStep.String(it.StepID))
	if it.Speculative {
		attrs = append(attrs, attrSpeculative.Bool(true))
	}
	if code != "" {
		attrs = append(attrs, attrErrorCode.String(code))
		span.SetStatus(codes.Error, code)
	} else {
		attrs = append(attrs, attrDecision.String(decision))
	}
	span.SetAttributes(attrs...)
	span.End()
}

func (t *Telemetry) runStarted(ctx context.Context, run engine.RunInfo) context.Context {
	t.runsStarted.get([1]string{run.FlowID}).Inc()
	t.runsInFlight.Inc()
	if t.tracer == nil {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, "run "+run.FlowID, trace.WithNewRoot())
	return ctx
}

func (t *Telemetry) runEnded(ctx context.Context, run engine.RunInfo, status, code string) {
	t.runsFinished.get([2]string{run.FlowID, status}).Inc()
	t.runsInFlight.Dec()
	if t.tracer == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() { // most runs' traces may be sampled out: they cost no attributes
		span.End()
		return
	}
	attrs := append(make([]attribute.KeyValue, 0, 6), attrFlow.String(run.FlowID), attrRun.String(run.RunID),
		attrInstance.String(run.InstanceID), attrResumed.Bool(run.Resumed), attrStatus.String(status))
	if code != "" {
		attrs = append(attrs, attrErrorCode.String(code))
		span.SetStatus(codes.Error, code)
	}
	span.SetAttributes(attrs...)
	span.End()
}

// Agents is the observer the agents are given.
func (t *Telemetry) Agents() *agents.Observer {
	o := &agents.Observer{ModelEnded: t.modelEnded, ToolEnded: t.toolEnded}
	if t.tracer != nil {
		o.ModelStarted, o.ToolStarted, o.Content = t.modelStarted, t.toolStarted, t.content
	}
	return o
}

func (t *Telemetry) modelStarted(ctx context.Context, c agents.ModelCall) context.Context {
	if !recording(ctx) {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, "chat "+c.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(c.Start))
	return ctx
}

func (t *Telemetry) modelEnded(ctx context.Context, c agents.ModelCall, res agents.ModelResult) {
	observe(ctx, t.modelCalls.get([3]string{c.Provider, c.Model, res.Outcome}), res.Duration.Seconds())
	if u := res.Usage; u != nil {
		t.tokens.get([3]string{c.Provider, c.Model, "prompt"}).Add(float64(u.PromptTokens))
		t.tokens.get([3]string{c.Provider, c.Model, "completion"}).Add(float64(u.CompletionTokens))
	}
	if t.tracer == nil || !recording(ctx) {
		return
	}
	span := trace.SpanFromContext(ctx)
	attrs := append(make([]attribute.KeyValue, 0, 10), attrOperation.String("chat"), attrSystem.String(c.Provider),
		attrRequestModel.String(c.Model), attrOutcome.String(res.Outcome))
	if c.Task.Chunk != nil {
		// A judgement of a streaming draft's part (judge_stream): under
		// the drafting agent's span, naming its judge.
		attrs = append(attrs, attrChunk.Bool(true), attrAgentName.String(c.Task.Node.Name))
	}
	if u := res.Usage; u != nil {
		attrs = append(attrs, attrInputTokens.Int(u.PromptTokens), attrOutputTokens.Int(u.CompletionTokens))
	}
	if c.Prompt != nil {
		attrs = append(attrs, attrInputMsgs.String(messagesJSON(c.Prompt)))
	}
	if res.Response != "" {
		attrs = append(attrs, attrOutputMsgs.String(messagesJSON([]agents.Message{{Role: "assistant", Text: res.Response}})))
	}
	if res.Outcome != "ok" && res.Outcome != "cached" {
		span.SetStatus(codes.Error, res.Outcome)
	}
	span.SetAttributes(attrs...)
	span.End()
}

func (t *Telemetry) toolStarted(ctx context.Context, c agents.ToolCall) context.Context {
	if !recording(ctx) {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, "execute_tool "+c.Tool, trace.WithTimestamp(c.Start))
	return ctx
}

func (t *Telemetry) toolEnded(ctx context.Context, c agents.ToolCall, outcome string) {
	observe(ctx, t.toolCalls.get([2]string{c.Tool, outcome}), time.Since(c.Start).Seconds())
	if t.tracer == nil || !recording(ctx) {
		return
	}
	span := trace.SpanFromContext(ctx)
	if outcome != "ok" {
		span.SetStatus(codes.Error, outcome)
	}
	span.SetAttributes(attrOperation.String("execute_tool"), attrToolName.String(c.Tool), attrOutcome.String(outcome))
	span.End()
}

// messagesJSON is messages as OpenTelemetry's gen_ai.*.messages have them.
func messagesJSON(msgs []agents.Message) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	type message struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]message, len(msgs))
	for i, m := range msgs {
		out[i] = message{Role: m.Role, Parts: []part{{Type: "text", Content: m.Text}}}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// waiting counts, at each scrape, the instances whose last run ended
// waiting for a person or a client: superego_instances_waiting.
type waiting struct {
	desc  *prometheus.Desc
	store flow.Store
}

// waitingStatuses are the statuses an instance waits in.
var waitingStatuses = []string{flow.StatusAwaitingReview, flow.StatusAwaitingToolResult, flow.StatusAwaitingInput}

// Waiting registers superego_instances_waiting{flow,status}, read from the
// store at each scrape: the instances waiting for a person's review, for a
// client's tool results, or for the user's answer.
func Waiting(reg prometheus.Registerer, store flow.Store) error {
	return reg.Register(&waiting{store: store, desc: prometheus.NewDesc("superego_instances_waiting",
		"Instances waiting for a person's review, a client's tool results or the user's answer, by flow.", []string{"flow", "status"}, nil)})
}

func (w *waiting) Describe(ch chan<- *prometheus.Desc) { ch <- w.desc }

func (w *waiting) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// One listing for the three statuses: a store reads every instance
	// for it, whatever the status asked.
	list, err := w.store.List(ctx, flow.ListOptions{})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(w.desc, err)
		return
	}
	counts := map[string]map[string]int{} // status → flow → instances
	for _, s := range list {
		if slices.Contains(waitingStatuses, s.Status) {
			if counts[s.Status] == nil {
				counts[s.Status] = map[string]int{}
			}
			counts[s.Status][s.FlowID]++
		}
	}
	for _, status := range waitingStatuses {
		for _, id := range slices.Sorted(maps.Keys(counts[status])) {
			ch <- prometheus.MustNewConstMetric(w.desc, prometheus.GaugeValue, float64(counts[status][id]), id, status)
		}
	}
}
