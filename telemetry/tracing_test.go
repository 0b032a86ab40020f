package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/memstore"
	"superego/telemetry"
	"superego/tools"
)

// TestTracingFromTheEnvironment sends a run's spans with the OTLP/HTTP
// exporter the OTEL_* variables configure, to a collector's stand-in that
// decodes OTLP's protobuf: the names, the service, the headers.
func TestTracingFromTheEnvironment(t *testing.T) {
	var mu sync.Mutex
	var got []*collectortrace.ExportTraceServiceRequest
	var headers []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not OTLP/HTTP", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got, headers = append(got, req), append(headers, r.Header.Get("X-Tenant"))
		mu.Unlock()
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team-a")
	t.Setenv("OTEL_SERVICE_NAME", "superego-test")
	tp, err := telemetry.Tracing(context.Background(), os.Getenv)
	if err != nil || tp == nil {
		t.Fatalf("tracing: %v %v", tp, err)
	}
	tel, err := telemetry.New(prometheus.NewRegistry(), telemetry.Options{Tracer: telemetry.Tracer(tp)})
	if err != nil {
		t.Fatal(err)
	}
	m := &scripted{}
	model := agents.Model{LLM: agentstest.Func(m.script), Name: "openai:gpt-test"}
	agent := &agents.Agent{Model: func(string) (agents.Model, error) { return model, nil }, Tools: tools.Set{"calculator": tools.Calculator()}, Observe: tel.Agents()}
	def, err := flow.Parse([]byte(testFlows["gated"]), flow.Catalog{Tools: []string{"calculator"}})
	if err != nil {
		t.Fatal(err)
	}
	e := &engine.Engine{Flows: map[string]*flow.Flow{"gated": {ID: "gated", Def: def}}, Exec: &engine.Executor{Agent: agent, Observe: tel.Flow()}, Store: &memstore.Store{}}
	if err := e.Run(context.Background(), engine.Request{FlowID: "gated", Input: "What is 6*7? hold me"}, func(flow.Event) {}); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(context.Background()); err != nil { // sends what is batched
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for _, req := range got {
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			if service != "superego-test" {
				t.Errorf("service.name %q", service)
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
					noMarkers(t, "an exported span", s.String())
				}
			}
		}
	}
	slices.Sort(names)
	want := []string{"chat gpt-test", "chat gpt-test", "chat gpt-test", "chat gpt-test", "execute_tool calculator",
		"invoke_agent assistant", "invoke_agent assistant", "invoke_agent input_superego", "invoke_agent output_superego", "run gated"}
	if !slices.Equal(names, want) {
		t.Errorf("exported spans %q, want %q", names, want)
	}
	if len(headers) == 0 || headers[0] != "team-a" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %q", headers)
	}
}

func TestTracingOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string // "" off, "on", or an error
	}{
		{map[string]string{}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, "on"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http/protobuf"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, "otlp, or none"},
	} {
		tp, err := telemetry.Tracing(context.Background(), func(k string) string { return c.env[k] })
		switch {
		case c.want == "" && (tp != nil || err != nil):
			t.Errorf("%v: %v %v, want off", c.env, tp, err)
		case c.want == "on" && (tp == nil || err != nil):
			t.Errorf("%v: %v %v, want on", c.env, tp, err)
		case c.want != "" && c.want != "on" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error about %s", c.env, err, c.want)
		}
		if tp != nil {
			tp.Shutdown(context.Background())
		}
	}
}
