package telemetry_test

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/engine"
	"superego/flow"
	"superego/memstore"
	"superego/telemetry"
)

// Decisions by basis are counted by flow, node and basis, and a basis
// label is only ever "floor", a library name or "other": what a model
// writes there, a marker here, is never a label; a judge that gives no
// basis counts nothing.
func TestDecisionsByBasis(t *testing.T) {
	t.Parallel()
	provider := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		said := map[string]string{"floor please": "floor", "vegan please": "Vegan", "junk": thinkingMarker}[r.LastUser()]
		if said == "" {
			return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
		}
		return agentstest.Answer{Text: `{"thinking": "t", "decision": "ACCEPT", "agent_guidance": "", "basis": "` + said + `", "response": ""}`}
	})
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: provider.URL + "/v1"}
	def, err := flow.Parse([]byte(`{"name": "s", "graph": {"start": "judge", "nodes": {
	  "judge": {"type": "superego", "agent_id": "judge", "constitution": "Judge.", "transitions": {"ACCEPT": null}}}}}`), flow.Catalog{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	tel, err := telemetry.New(reg, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	f := &fixture{engine: &engine.Engine{Flows: map[string]*flow.Flow{"s": {ID: "s", Def: def}},
		Exec: &engine.Executor{Agent: &agents.Agent{Model: p.Model}, Observe: tel.Flow(), Library: flow.Library{"vegan": "# Vegan"}}, Store: &memstore.Store{}, Log: log}}
	srv := httptest.NewServer((&api.Server{Engine: f.engine, Log: log, Metrics: telemetry.Handler(reg)}).Handler())
	t.Cleanup(func() {
		srv.Close()
		f.close(t)
	})
	f.url = srv.URL
	for _, input := range []string{"floor please", "floor please", "vegan please", "junk", "none given"} {
		if s := status(t, f.executeStacked(t, input)); s != flow.StatusCompleted {
			t.Fatalf("%s: %s", input, s)
		}
	}
	families, text := f.scrape(t)
	for basis, want := range map[string]float64{"floor": 2, "vegan": 1, "other": 1} {
		if got := value(t, families, "superego_decisions_by_basis_total", "basis", basis, "flow", "s", "node", "judge"); got != want {
			t.Errorf("basis %s: %v, want %v", basis, got, want)
		}
	}
	if n := len(families["superego_decisions_by_basis_total"].Metric); n != 3 {
		t.Errorf("%d series of decisions by basis, want 3:\n%s", n, text)
	}
	for _, m := range markers {
		if strings.Contains(text, m) {
			t.Errorf("the metrics carry %q", m)
		}
	}
}

// executeStacked runs flow s under a stack of vegan, reading its stream to
// done.
func (f *fixture) executeStacked(t *testing.T, input string) []event {
	t.Helper()
	body := `{"flow_id": "s", "input": "` + input + `", "constitutions": [{"name": "vegan"}]}`
	return f.executeBody(t, body, nil)
}
