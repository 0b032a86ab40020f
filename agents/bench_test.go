package agents_test

import (
	"context"
	"encoding/json"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/tools"
)

// The guarded-calculator workload of bench/guarded_calculator (whose
// program runs it against its peers, with constitution.txt as the judges'
// constitution): four model calls, one tool call, five steps, through the
// real executor, agents and calculator, on an instant in-process model,
// the constitutions here short markers. The client encodes every event it would
// send, hidden fields removed.
func BenchmarkGuardedCalculator(b *testing.B) {
	model := agents.Model{LLM: agentstest.Func(calcScript), Name: "func"}
	agent := &agents.Agent{Model: func(string) (agents.Model, error) { return model, nil }, Tools: tools.Set{"calculator": tools.Calculator()}}
	def, err := flow.Parse([]byte(calcFlow), flow.Catalog{Tools: []string{"calculator"}})
	if err != nil {
		b.Fatal(err)
	}
	x := &engine.Executor{Agent: agent}
	var bytes int
	emit := engine.Sink{Emit: func(evs ...flow.Event) error {
		for _, e := range evs {
			data, err := json.Marshal(e.Data)
			if err != nil {
				return err
			}
			bytes += len(data)
		}
		return nil
	}}
	b.ReportAllocs()
	for b.Loop() {
		out := x.Execute(context.Background(), engine.Turn{FlowID: "calc", Def: def, InstanceID: "i", RunID: "r", Input: "What is 5*10?"}, emit)
		if out.Status != flow.StatusCompleted {
			b.Fatal(out)
		}
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/flow")
}
