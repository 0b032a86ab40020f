package telemetry_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/engine"
	"superego/flow"
	"superego/internal/eventually"
	"superego/memstore"
	"superego/telemetry"
	"superego/tools"
)

// Markers planted where no operator's view may carry them: in thinking,
// in agent_guidance, in a draft a superego withholds and in its tool
// call, and in a decision only a "*" transition takes.
const (
	thinkingMarker = "THINKING-5d1e"
	guidanceMarker = "GUIDANCE-a09b"
	draftMarker    = "DRAFT-77c1"
	toolMarker     = "731984265017" // a number: the calculator takes its expression, and no other key
	wordMarker     = "WORD_4F2E"    // a decision: upper case, as decisions are
)

var markers = []string{thinkingMarker, guidanceMarker, draftMarker, toolMarker, wordMarker}

var testFlows = map[string]string{
	// A guarded assistant with a calculator: an input superego, and an
	// output superego that judges the draft; HOLD withholds it too.
	"gated": `{"name": "Gated", "graph": {"start": "input_superego", "nodes": {
	  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Screen.",
	    "transitions": {"BLOCK": null, "ACCEPT": "assistant", "CAUTION": "assistant"}},
	  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "tools": ["calculator"],
	    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self"}},
	  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review.", "withhold": ["HOLD"],
	    "transitions": {"ACCEPT": null, "BLOCK": null, "HOLD": null}}}}}`,
	// The reviewer judges the draft as it streams.
	"chunked": `{"name": "Chunked", "graph": {"start": "assistant", "nodes": {
	  "assistant": {"type": "inner_agent", "agent_id": "assistant", "system_prompt": "Answer.", "transitions": {"COMPLETE": "output_superego"}},
	  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review.",
	    "judge_stream": {"chunk_chars": 30, "context_chars": 20}, "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`,
	// A judge whose "*" takes any decision word its model answers.
	"starred": `{"name": "Starred", "graph": {"start": "judge", "nodes": {
	  "judge": {"type": "superego", "agent_id": "judge", "constitution": "Judge.", "transitions": {"ACCEPT": null, "*": null}}}}}`,
}

// model plays the flows; the user's message picks the path. pause, when
// it is not nil, holds the assistant's reply to "pause" until it closes.
type scripted struct{ pause chan struct{} }

func (m *scripted) script(r agentstest.Request) agentstest.Answer {
	user := r.LastUser()
	switch r.Node() {
	case "input_superego":
		switch {
		case strings.Contains(user, "bomb"):
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "I can't help with that.")
		case strings.Contains(user, "broken model"):
			return agentstest.Answer{Status: 503, Text: "upstream overloaded: " + user}
		}
		return agentstest.Reply(thinkingMarker, "CAUTION", guidanceMarker+" verify", "Checking.")
	case "assistant":
		if strings.Contains(user, "long draft") {
			text := "Part one is fine and plain. Part two is fine as well. " + draftMarker + " part three must not go out. Part four is after it."
			return agentstest.Answer{Text: agentstest.JSON(thinkingMarker, "COMPLETE", guidanceMarker, text), Chunk: 6, Pace: 2 * time.Millisecond}
		}
		if strings.Contains(user, "pause") {
			return agentstest.Answer{Text: agentstest.JSON(thinkingMarker, "COMPLETE", guidanceMarker, "Paused "+draftMarker), Pause: m.pause}
		}
		if res := r.ToolResults(); len(res) > 0 {
			return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, draftMarker+" the answer is "+res[0].Text+".")
		}
		return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_1", Name: "calculator", Args: `{"expression":"6*7+0*` + toolMarker + `"}`}}}
	case "output_superego":
		switch {
		case strings.Contains(user, "part three"):
			// The part, or the whole draft: a draft that ends before its
			// part's judgement does goes to the final judgement whole.
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "That part is not for sharing.")
		case strings.Contains(user, "Judge this part"):
			return agentstest.Reply(thinkingMarker, "ACCEPT", "", "")
		case strings.Contains(user, "block me"):
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "The draft was not fit to send.")
		case strings.Contains(user, "hold me"):
			return agentstest.Reply(thinkingMarker, "HOLD", guidanceMarker, "Held back for review.")
		}
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
	case "judge":
		return agentstest.Reply(thinkingMarker, wordMarker, guidanceMarker, "Judged.")
	}
	return agentstest.Answer{Status: 400, Text: "unknown node"}
}

type fixture struct {
	url    string
	engine *engine.Engine
	spans  *tracetest.InMemoryExporter
	logs   *syncBuffer
	model  *scripted
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve runs the test flows on the real engine, agents and API, with a
// fake OpenAI provider over HTTP, observed by telemetry: its metrics at
// GET /metrics, its spans, with traces, in memory, synchronously.
func serve(t *testing.T, traces, content bool) *fixture {
	t.Helper()
	m := &scripted{pause: make(chan struct{})}
	provider := agentstest.OpenAI(t, m.script)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: provider.URL + "/v1"}
	set := tools.Set{"calculator": tools.Calculator()}
	flows := map[string]*flow.Flow{}
	for id, def := range testFlows {
		d, err := flow.Parse([]byte(def), flow.Catalog{Tools: set.Names()})
		if err != nil {
			t.Fatal(err)
		}
		flows[id] = &flow.Flow{ID: id, Def: d}
	}
	f := &fixture{logs: &syncBuffer{}, model: m}
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	opt := telemetry.Options{Content: content}
	if traces {
		f.spans = tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(f.spans))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		opt.Tracer = telemetry.Tracer(tp)
	}
	reg := prometheus.NewRegistry()
	tel, err := telemetry.New(reg, opt)
	if err != nil {
		t.Fatal(err)
	}
	agent := &agents.Agent{Model: p.Model, Tools: set, Timeout: 5 * time.Second, Observe: tel.Agents()}
	f.engine = &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: agent, Observe: tel.Flow()}, Store: &memstore.Store{}, Log: log}
	srv := httptest.NewServer((&api.Server{Engine: f.engine, Log: log, Metrics: telemetry.Handler(reg), Streams: tel.StreamSubscribers()}).Handler())
	t.Cleanup(func() {
		srv.Close()
		f.close(t)
	})
	f.url = srv.URL
	return f
}

// close lets the runs in flight end, as a shutdown with time to spare does:
// a run's last event reaches its client before the run has quite ended.
func (f *fixture) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.engine.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

type event struct{ name, data string }

// execute runs a flow through POST /flow/execute, reading its stream
// until done; each event goes to seen, which may stop reading early.
func (f *fixture) execute(t *testing.T, flowID, input string, seen func(event) bool) []event {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"flow_id": flowID, "input": input})
	return f.executeBody(t, string(body), seen)
}

// executeBody is execute with the request's body as given.
func (f *fixture) executeBody(t *testing.T, body string, seen func(event) bool) []event {
	t.Helper()
	resp, err := http.Post(f.url+"/flow/execute", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []event
	var cur event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[len("data: "):]
		case line == "" && cur.name != "":
			out = append(out, cur)
			if seen != nil && !seen(cur) || cur.name == "done" {
				return out
			}
			cur = event{}
		}
	}
	return out
}

func status(t *testing.T, evs []event) string {
	t.Helper()
	var d struct{ Status string }
	if len(evs) == 0 || evs[len(evs)-1].name != "done" || json.Unmarshal([]byte(evs[len(evs)-1].data), &d) != nil {
		t.Fatalf("no done event: %v", evs)
	}
	return d.Status
}

// scrape reads GET /metrics with the Prometheus text parser.
func (f *fixture) scrape(t *testing.T) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, b)
	}
	return families, string(b)
}

// value is the value of the family's series with exactly these labels:
// a counter's or gauge's value, a histogram's count.
func value(t *testing.T, families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	fam := families[name]
	if fam == nil {
		t.Fatalf("no family %s", name)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fam.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}

func TestMetricsAfterScriptedRuns(t *testing.T) {
	t.Parallel()
	f := serve(t, false, false)
	for _, c := range []struct{ flow, input, status string }{
		{"gated", "What is 6*7?", "completed"},
		{"gated", "What is 6*7? hold me", "completed"},
		{"gated", "What is 6*7? block me", "blocked"},
		{"gated", "How do I make a bomb?", "blocked"},
		{"gated", "broken model", "failed"},
		{"starred", "Judge " + wordMarker, "completed"},
	} {
		if got := status(t, f.execute(t, c.flow, c.input, nil)); got != c.status {
			t.Fatalf("%s %q: %s, want %s", c.flow, c.input, got, c.status)
		}
	}

	// While a client streams a run that waits on its model: one run in
	// flight, one subscriber. An earlier stream's handler may still be
	// returning after its client read done: wait until it has.
	eventually.Holds(t, 5*time.Second, func() string {
		families, _ := f.scrape(t)
		if v := value(t, families, "superego_stream_subscribers"); v != 0 {
			return fmt.Sprintf("%v stream subscribers after every stream ended", v)
		}
		return ""
	})
	var families map[string]*dto.MetricFamily
	f.execute(t, "gated", "pause", func(ev event) bool {
		if ev.name != "node_start" || !strings.Contains(ev.data, `"assistant"`) {
			return true
		}
		families, _ = f.scrape(t)
		return false
	})
	if v := value(t, families, "superego_runs_in_flight"); v != 1 {
		t.Errorf("runs in flight during a run: %v", v)
	}
	if v := value(t, families, "superego_stream_subscribers"); v != 1 {
		t.Errorf("stream subscribers during a stream: %v", v)
	}
	close(f.model.pause)
	f.close(t)

	families, text := f.scrape(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"superego_runs_started_total", []string{"flow", "gated"}, 6},
		{"superego_runs_started_total", []string{"flow", "starred"}, 1},
		{"superego_runs_finished_total", []string{"flow", "gated", "status", "completed"}, 3},
		{"superego_runs_finished_total", []string{"flow", "gated", "status", "blocked"}, 2},
		{"superego_runs_finished_total", []string{"flow", "gated", "status", "failed"}, 1},
		{"superego_runs_finished_total", []string{"flow", "starred", "status", "completed"}, 1},
		{"superego_runs_in_flight", nil, 0},
		{"superego_stream_subscribers", nil, 0},
		{"superego_steps_total", []string{"flow", "gated", "node", "input_superego", "decision", "CAUTION"}, 4},
		{"superego_steps_total", []string{"flow", "gated", "node", "input_superego", "decision", "BLOCK"}, 1},
		{"superego_steps_total", []string{"flow", "gated", "node", "assistant", "decision", "NEEDS_TOOL"}, 3},
		{"superego_steps_total", []string{"flow", "gated", "node", "assistant", "decision", "COMPLETE"}, 4},
		{"superego_steps_total", []string{"flow", "gated", "node", "output_superego", "decision", "ACCEPT"}, 2},
		{"superego_steps_total", []string{"flow", "gated", "node", "output_superego", "decision", "HOLD"}, 1},
		{"superego_steps_total", []string{"flow", "gated", "node", "output_superego", "decision", "BLOCK"}, 1},
		{"superego_steps_total", []string{"flow", "starred", "node", "judge", "decision", "*"}, 1},
		{"superego_drafts_total", []string{"flow", "gated", "node", "assistant", "outcome", "released"}, 2},
		{"superego_drafts_total", []string{"flow", "gated", "node", "assistant", "outcome", "withheld"}, 2},
		// 17 calls answered: 11 prompt and 7 completion tokens each, as
		// the fake provider reports them.
		{"superego_model_call_seconds", []string{"provider", "openai", "model", "gpt-test", "outcome", "ok"}, 17},
		{"superego_model_call_seconds", []string{"provider", "openai", "model", "gpt-test", "outcome", "error"}, 1},
		{"superego_model_tokens_total", []string{"provider", "openai", "model", "gpt-test", "kind", "prompt"}, 17 * 11},
		{"superego_model_tokens_total", []string{"provider", "openai", "model", "gpt-test", "kind", "completion"}, 17 * 7},
		{"superego_tool_call_seconds", []string{"tool", "calculator", "outcome", "ok"}, 3},
	} {
		if got := value(t, families, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := value(t, families, "superego_store_write_seconds"); n < 7 {
		t.Errorf("store writes: %v", n)
	}
	types := map[string]dto.MetricType{
		"superego_runs_started_total": dto.MetricType_COUNTER, "superego_runs_finished_total": dto.MetricType_COUNTER,
		"superego_runs_in_flight": dto.MetricType_GAUGE, "superego_steps_total": dto.MetricType_COUNTER,
		"superego_model_call_seconds": dto.MetricType_HISTOGRAM, "superego_model_tokens_total": dto.MetricType_COUNTER,
		"superego_tool_call_seconds": dto.MetricType_HISTOGRAM, "superego_stream_subscribers": dto.MetricType_GAUGE,
		"superego_store_write_seconds": dto.MetricType_HISTOGRAM, "superego_drafts_total": dto.MetricType_COUNTER,
	}
	for name, typ := range types {
		if fam := families[name]; fam == nil || fam.GetType() != typ {
			t.Errorf("%s: want a %s", name, typ)
		}
	}
	// No label names an instance or a run, or carries a user's text.
	allowed := map[string]bool{"flow": true, "status": true, "node": true, "decision": true, "outcome": true,
		"provider": true, "model": true, "kind": true, "tool": true, "le": true}
	for name, fam := range families {
		if _, ours := types[name]; !ours {
			continue
		}
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if !allowed[l.GetName()] || strings.ContainsAny(l.GetValue(), " ?") {
					t.Errorf("%s has label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	noMarkers(t, "the metrics", text)
	noMarkers(t, "the log", f.logs.String())
}

// noMarkers fails if s holds a planted marker.
func noMarkers(t *testing.T, where, s string) {
	t.Helper()
	for _, m := range markers {
		if strings.Contains(s, m) {
			t.Errorf("%s hold marker %s", where, m)
		}
	}
}

// spanTree renders spans as an indented tree, children in the order they
// started, each with the attributes named in show.
func spanTree(spans tracetest.SpanStubs, show ...string) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.IsValid() {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		b.WriteString(strings.Repeat("  ", depth) + s.Name)
		for _, kv := range s.Attributes {
			if slices.Contains(show, string(kv.Key)) {
				b.WriteString(" " + string(kv.Key) + "=" + kv.Value.String())
			}
		}
		b.WriteString("\n")
		kids := children[s.SpanContext.SpanID()]
		slices.SortFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// everything is every text a span carries: its name, attributes, events,
// links, status and resource.
func everything(s tracetest.SpanStub) string {
	var b strings.Builder
	b.WriteString(s.Name + "\n" + s.Status.Description + "\n")
	for _, kv := range s.Attributes {
		b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
	}
	for _, e := range s.Events {
		b.WriteString(e.Name + "\n")
		for _, kv := range e.Attributes {
			b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
	}
	for _, l := range s.Links {
		for _, kv := range l.Attributes {
			b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
	}
	if s.Resource != nil {
		for _, kv := range s.Resource.Attributes() {
			b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
	}
	return b.String()
}

func runStart(t *testing.T, evs []event) (run, instance string) {
	t.Helper()
	d := map[string]any{}
	if len(evs) == 0 || evs[0].name != "run_start" || json.Unmarshal([]byte(evs[0].data), &d) != nil {
		t.Fatalf("no run_start: %v", evs)
	}
	return fmt.Sprint(d["run_id"]), fmt.Sprint(d["instance_id"])
}

func TestTraceOfAGuardedRun(t *testing.T) {
	t.Parallel()
	for _, content := range []bool{false, true} {
		t.Run(fmt.Sprintf("content=%v", content), func(t *testing.T) {
			f := serve(t, true, content)
			evs := f.execute(t, "gated", "What is 6*7? block me", nil)
			if got := status(t, evs); got != "blocked" {
				t.Fatalf("status %s", got)
			}
			runID, instanceID := runStart(t, evs)
			f.close(t)
			spans := f.spans.GetSpans()
			want := `run gated superego.status=blocked
  invoke_agent input_superego superego.decision=CAUTION
    chat gpt-test superego.outcome=ok
  invoke_agent assistant superego.decision=NEEDS_TOOL
    chat gpt-test superego.outcome=ok
    execute_tool calculator superego.outcome=ok
  invoke_agent assistant superego.decision=COMPLETE
    chat gpt-test superego.outcome=ok
  invoke_agent output_superego superego.decision=BLOCK
    chat gpt-test superego.outcome=ok
`
			if got := spanTree(spans, "superego.status", "superego.decision", "superego.outcome"); got != want {
				t.Errorf("span tree:\n%s\nwant:\n%s", got, want)
			}
			for _, s := range spans {
				if s.SpanContext.TraceID() != spans[0].SpanContext.TraceID() {
					t.Errorf("%s is in another trace", s.Name)
				}
				noMarkers(t, "span "+s.Name, everything(s))
				if strings.Contains(everything(s), "What is 6*7") != (content && strings.HasPrefix(s.Name, "chat ")) {
					t.Errorf("%s: the user's message is where it should not be, or not where it should (content %v):\n%s", s.Name, content, everything(s))
				}
				switch {
				case strings.HasPrefix(s.Name, "run "):
					if attr(s, "superego.run_id") != runID || attr(s, "superego.instance_id") != instanceID || attr(s, "superego.flow_id") != "gated" {
						t.Errorf("run span: %v; run %s, instance %s", s.Attributes, runID, instanceID)
					}
				case strings.HasPrefix(s.Name, "invoke_agent "):
					if attr(s, "gen_ai.operation.name") != "invoke_agent" || attr(s, "gen_ai.agent.name") != strings.TrimPrefix(s.Name, "invoke_agent ") || attr(s, "superego.step_id") == "" {
						t.Errorf("node span: %v", s.Attributes)
					}
				case strings.HasPrefix(s.Name, "chat "):
					if attr(s, "gen_ai.operation.name") != "chat" || attr(s, "gen_ai.system") != "openai" || attr(s, "gen_ai.request.model") != "gpt-test" ||
						attr(s, "gen_ai.usage.input_tokens") != "11" || attr(s, "gen_ai.usage.output_tokens") != "7" || s.SpanKind != trace.SpanKindClient {
						t.Errorf("model call span: %v", s.Attributes)
					}
				case strings.HasPrefix(s.Name, "execute_tool "):
					if attr(s, "gen_ai.operation.name") != "execute_tool" || attr(s, "gen_ai.tool.name") != "calculator" {
						t.Errorf("tool call span: %v", s.Attributes)
					}
				}
			}
			if !content {
				return
			}
			// With content, what a client saw is there, and what it did not
			// is "[hidden]": the judge's prompt has the draft taken out, the
			// assistant's the guidance and its tool round.
			var judged, revised string
			for _, s := range spans {
				if s.Name != "chat gpt-test" {
					continue
				}
				in := attr(s, "gen_ai.input.messages")
				switch {
				case strings.Contains(in, "Review."):
					judged = in
				case strings.Contains(in, `"role":"tool"`):
					revised = in
				}
				if strings.Contains(in, "Screen.") && !strings.Contains(attr(s, "gen_ai.output.messages"), "Checking.") {
					t.Errorf("the input superego's visible response is not on its span: %v", s.Attributes)
				}
				if strings.Contains(in, "Answer.") && attr(s, "gen_ai.output.messages") != "" {
					t.Errorf("a held turn's response is on its span: %v", s.Attributes)
				}
			}
			if !strings.Contains(judged, "The draft from assistant:\\n[hidden]") || !strings.Contains(revised, "(hidden from the user):\\n[hidden]") {
				t.Errorf("prompts with content:\njudge %s\nassistant %s", judged, revised)
			}
		})
	}
}

// A failed run's spans say how it failed, by its error code: a provider's
// error may quote the request, and is nowhere in them.
func TestTraceOfAFailedRun(t *testing.T) {
	t.Parallel()
	f := serve(t, true, true)
	evs := f.execute(t, "gated", "broken model "+draftMarker, nil)
	if got := status(t, evs); got != "failed" {
		t.Fatalf("status %s", got)
	}
	runID, instanceID := runStart(t, evs)
	f.close(t)
	want := `run gated superego.status=failed superego.error_code=llm_unavailable
  invoke_agent input_superego superego.error_code=llm_unavailable
    chat gpt-test superego.outcome=error
`
	spans := f.spans.GetSpans()
	if got := spanTree(spans, "superego.status", "superego.error_code", "superego.decision", "superego.outcome"); got != want {
		t.Errorf("span tree:\n%s\nwant:\n%s", got, want)
	}
	for _, s := range spans {
		if s.Status.Code != codes.Error {
			t.Errorf("%s: status %v", s.Name, s.Status)
		}
		if strings.Contains(everything(s), "upstream overloaded") {
			t.Errorf("%s carries the provider's error:\n%s", s.Name, everything(s))
		}
	}
	// The run's log lines name it, its instance and its trace.
	logs := f.logs.String()
	var failed string
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `msg="run failed"`) {
			failed = line
		}
	}
	for _, want := range []string{"run_id=" + runID, "instance_id=" + instanceID, "trace_id=" + spans[0].SpanContext.TraceID().String(), "code=llm_unavailable"} {
		if !strings.Contains(failed, want) {
			t.Errorf("the run's failure is logged without %s:\n%s", want, logs)
		}
	}
}

// A draft judged as it streams, and withheld at its third part (or, on a
// machine slow enough that the draft ends before that part's judgement
// does, by the final judgement of the draft): the judgements of its parts
// are spans under the drafting agent's, and its text is in none of them,
// with content or without.
func TestTraceOfAChunkedDraft(t *testing.T) {
	t.Parallel()
	f := serve(t, true, true)
	evs := f.execute(t, "chunked", "Write me a long draft", nil)
	if got := status(t, evs); got != "blocked" {
		t.Fatalf("status %s", got)
	}
	f.close(t)
	spans := f.spans.GetSpans()
	chunks := 0
	for _, s := range spans {
		noMarkers(t, "span "+s.Name, everything(s))
		if strings.Contains(everything(s), "Part one") {
			t.Errorf("%s carries the draft:\n%s", s.Name, everything(s))
		}
		if attr(s, "superego.chunk") == "true" {
			chunks++
			if attr(s, "gen_ai.agent.name") != "output_superego" {
				t.Errorf("a chunk's judgement: %v", s.Attributes)
			}
		}
	}
	if chunks < 2 {
		t.Errorf("%d chunk judgements traced:\n%s", chunks, spanTree(spans, "superego.decision", "superego.chunk"))
	}
	noMarkers(t, "the log", f.logs.String())
}

// superego_instances_waiting counts, by flow and status, the instances
// waiting for a review, a client's results or the user's answer, and no
// other.
func TestInstancesWaiting(t *testing.T) {
	t.Parallel()
	store := &memstore.Store{}
	ignore := func(error) {}
	for i, c := range []struct{ flow, status string }{
		{"a", flow.StatusAwaitingInput}, {"a", flow.StatusAwaitingInput}, {"b", flow.StatusAwaitingInput},
		{"a", flow.StatusAwaitingReview}, {"b", flow.StatusAwaitingToolResult}, {"a", flow.StatusCompleted},
	} {
		id := fmt.Sprint("i", i)
		store.Create(flow.Instance{ID: id, FlowID: c.flow}, ignore)
		store.Append(id, []flow.Event{{ID: 1, Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: id, FlowID: c.flow}},
			{ID: 2, Name: flow.EventDone, Data: flow.Done{InstanceID: id, Status: c.status}}}, ignore)
	}
	reg := prometheus.NewRegistry()
	if err := telemetry.Waiting(reg, store); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got = append(got, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	want := []string{
		"superego_instances_waiting{flow=a,status=awaiting_input} 2",
		"superego_instances_waiting{flow=a,status=awaiting_review} 1",
		"superego_instances_waiting{flow=b,status=awaiting_input} 1",
		"superego_instances_waiting{flow=b,status=awaiting_tool_result} 1",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
