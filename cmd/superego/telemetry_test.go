package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"superego/agents/agentstest"
)

// TestOperatorsView serves with --metrics-addr, --log-format json and
// OTEL_EXPORTER_OTLP_ENDPOINT: metrics on their own listener (and not on
// the API's), JSON log lines that name each run, spans at the collector.
func TestOperatorsView(t *testing.T) {
	model := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		switch {
		case strings.Contains(r.LastUser(), "fail"):
			return agentstest.Answer{Status: 503, Text: "overloaded"}
		case r.Node() == "calculator":
			return agentstest.Reply("THINKING-MARKER", "COMPLETE", "GUIDANCE-MARKER", "Fifty.")
		}
		return agentstest.Reply("THINKING-MARKER", "ACCEPT", "GUIDANCE-MARKER", "")
	})
	var mu sync.Mutex
	spans := map[string]int{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if proto.Unmarshal(body, req) != nil {
			http.Error(w, "not OTLP", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name]++
				}
			}
		}
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // the exporter reads its settings itself
	getenv := env(append(repoEnv, "OPENAI_API_KEY", "k", "OPENAI_BASE_URL", model.URL+"/v1", "SUPEREGO_MODEL", "openai:gpt-test",
		"SUPEREGO_WORKSPACES", t.TempDir(), "OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)...)
	cfg, _, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	logs := &lockedBuffer{}
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, io.Discard, logs, ready) }()
	addr := <-ready

	var metricsURL, traces string
	for line := range strings.Lines(logs.String()) {
		var l struct{ Msg, Addr, Traces string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving metrics" {
			metricsURL = l.Addr
		}
		if l.Msg == "listening" {
			traces = l.Traces
		}
	}
	// The start-up line says that tracing is on, and where spans go.
	if want := collector.URL + "/v1/traces (OTLP/HTTP, sampler parentbased_always_on)"; traces != want {
		t.Errorf("the listening line's traces: %q, want %q", traces, want)
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://" + addr + "/metrics"); code != http.StatusNotFound || !strings.Contains(body, "--metrics-addr") {
		t.Errorf("/metrics on the API's listener, with --metrics-addr: %d %s", code, body)
	}
	var instances []string
	for _, input := range []string{"What is 5*10?", "fail now"} {
		resp, err := http.Post("http://"+addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "basic_calculator", "input": "`+input+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for line := range strings.Lines(string(b)) {
			if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"run_id"`) {
				var rs struct {
					InstanceID string `json:"instance_id"`
				}
				json.Unmarshal([]byte(data), &rs)
				instances = append(instances, rs.InstanceID)
			}
		}
	}
	code, body := get(metricsURL)
	for _, want := range []string{`superego_runs_started_total{flow="basic_calculator"} 2`,
		`superego_model_call_seconds_count{model="gpt-test",outcome="error",provider="openai"} 1`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, no %s in\n%s", metricsURL, code, want, body)
		}
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after shutdown")
	}
	if _, err := http.Get(metricsURL); err == nil {
		t.Error("the metrics listener outlived the server")
	}

	var failed, request map[string]any
	for line := range strings.Lines(logs.String()) {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		switch {
		case l["msg"] == "run failed":
			failed = l
		case l["msg"] == "http" && l["method"] == "POST":
			request = l
		}
	}
	if failed == nil || failed["instance_id"] != instances[1] || failed["run_id"] == nil || failed["trace_id"] == nil || failed["code"] != "llm_unavailable" {
		t.Errorf("the failed run's log line: %v (instances %v)", failed, instances)
	}
	if request == nil || request["route"] != "/flow/execute" || request["status"] != 200.0 || request["duration_ms"] == nil || request["path"] != nil {
		t.Errorf("the request's log line: %v", request)
	}
	if strings.Contains(logs.String(), "MARKER") {
		t.Errorf("hidden fields in the log:\n%s", logs)
	}
	mu.Lock()
	defer mu.Unlock()
	if spans["run basic_calculator"] != 2 || spans["invoke_agent input_superego"] != 2 || spans["execute_tool calculator"] != 0 {
		t.Errorf("spans at the collector: %v", spans)
	}
}

// Without --metrics-addr, /metrics is on the API's listener.
func TestMetricsOnTheAPI(t *testing.T) {
	t.Parallel()
	cfg, _, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--max-runs", "7"}, env(repoEnv...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, io.Discard, io.Discard, ready) }()
	addr := <-ready
	resp, err := http.Post("http://"+addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "basic_calculator", "input": "What is 5*10?"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`superego_runs_started_total{flow="basic_calculator"} 1`, `superego_model_call_seconds_count{model="offline",outcome="ok",provider="offline"}`, "go_goroutines ", "\nsuperego_runs_max 7\n"} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET /metrics: %d, no %s in\n%s", resp.StatusCode, want, b)
		}
	}
	cancel()
	<-served
}

func TestOperatorsFlags(t *testing.T) {
	t.Parallel()
	cfg, _, err := parseConfig("serve", nil, env("SUPEREGO_LOG_FORMAT", "json", "SUPEREGO_METRICS_ADDR", ":9091", "SUPEREGO_TRACE_CONTENT", "1"), io.Discard)
	if err != nil || cfg.LogFormat != "json" || cfg.MetricsAddr != ":9091" || !cfg.TraceContent {
		t.Errorf("from the environment: %+v %v", cfg, err)
	}
	cfg, _, err = parseConfig("serve", []string{"--log-format", "text", "--metrics-addr", ""}, env("SUPEREGO_LOG_FORMAT", "json", "SUPEREGO_METRICS_ADDR", ":9091"), io.Discard)
	if err != nil || cfg.LogFormat != "text" || cfg.MetricsAddr != "" || cfg.TraceContent {
		t.Errorf("flags over the environment: %+v %v", cfg, err)
	}
	if _, _, err := parseConfig("serve", []string{"--log-format", "xml"}, env(), io.Discard); err == nil || !strings.Contains(err.Error(), "text or json") {
		t.Errorf("--log-format xml: %v", err)
	}
	if _, _, err := parseConfig("run", []string{"--metrics-addr", ":9091"}, env(), io.Discard); err == nil {
		t.Error("--metrics-addr is for serve only")
	}
}
