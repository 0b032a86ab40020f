package storetest

// The engine's benchmarks on a store, which each store's package runs on
// itself (docs/benchmarks.md): the same code, so that their figures compare.
// Those that need the real agents are in bench/stores: flow's packages
// import nothing above flow.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"superego/engine"
	"superego/flow"
)

// StepEvent is the input superego's step of the guarded calculator, as
// event n: a step of the usual size, hidden fields and a constitution in it.
func StepEvent(n int64) flow.Event {
	next := "calculator"
	return flow.Event{ID: n, Name: flow.EventCompleteStep, Time: time.Now(), Data: &flow.Step{
		StepID: fmt.Sprint(n), AgentID: "input_superego", Node: "input_superego", Role: flow.RoleAssistant, Timestamp: time.Now(),
		Input: "What is 5*10?", Constitution: "Be helpful.", Decision: "CAUTION", Response: "ok", NextAgent: &next,
		Thinking: "Benign arithmetic request.", AgentGuidance: "verify"}}
}

// Append is one writer appending steps to s one after another, each
// durable before the next: the latency of one commit.
func Append(b *testing.B, s flow.Store) {
	flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: time.Now()}, done) })
	var n int64
	for b.Loop() {
		n++
		if err := flow.Wait(func(done func(error)) { s.Append("i", []flow.Event{StepEvent(n)}, done) }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}

// AppendConcurrent is 100 runs appending to s at once, each waiting for
// its own step to be durable, as runs do.
func AppendConcurrent(b *testing.B, s flow.Store) {
	const runs = 100
	for r := range runs {
		flow.Wait(func(done func(error)) {
			s.Create(flow.Instance{ID: fmt.Sprint(r), FlowID: "f", CreatedAt: time.Now()}, done)
		})
	}
	per := b.N/runs + 1
	b.ResetTimer()
	var wg sync.WaitGroup
	for r := range runs {
		wg.Go(func() {
			for n := int64(1); n <= int64(per); n++ {
				if err := flow.Wait(func(done func(error)) { s.Append(fmt.Sprint(r), []flow.Event{StepEvent(n)}, done) }); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(per*runs)/b.Elapsed().Seconds(), "steps/s")
}

type instant struct{}

func (instant) Act(_ context.Context, t *engine.Task, _ func(flow.Event)) (engine.Reply, error) {
	switch {
	case t.Node.Name == "calculator" && len(t.ToolRounds) == 0:
		return engine.Reply{ToolUsage: []flow.ToolUse{{ID: "c", ToolName: "calculator", Input: json.RawMessage(`{"expression":"5*10"}`), Output: "50"}}}, nil
	case t.Node.Name == "calculator":
		return engine.Reply{Decision: "COMPLETE", Response: "5*10 = 50"}, nil
	case t.Node.Name == "input_superego":
		return engine.Reply{Decision: "CAUTION", Response: "ok", Thinking: "benign", AgentGuidance: "verify"}, nil
	}
	return engine.Reply{Decision: "ACCEPT"}, nil
}

// Guarded is the guarded calculator's flow, as the engine's benchmarks
// run it.
const Guarded = `{"name": "g", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "c", "transitions": {"BLOCK": null, "CAUTION": "calculator"}},
  "calculator": {"type": "inner_agent", "agent_id": "calculator", "tools": ["calculator"], "transitions": {"COMPLETE": "output_superego"}},
  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "c", "transitions": {"ACCEPT": null}}}}}`

// Store is a store the engine's benchmarks run on, by name.
type Store struct {
	Name string
	Open func(testing.TB) flow.Store
}

// Flows runs flows of def one after another through the engine, with
// agent, a watcher encoding every event as it is delivered, on each store.
// bench/stores runs the guarded calculator with the real agents on it.
func Flows(b *testing.B, stores []Store, def *flow.Definition, agent engine.Agent) {
	for _, store := range stores {
		b.Run(store.Name, func(b *testing.B) {
			e := &engine.Engine{Flows: map[string]*flow.Flow{"g": {ID: "g", Def: def}}, Exec: &engine.Executor{Agent: agent}, Store: store.Open(b)}
			b.ReportAllocs()
			for b.Loop() {
				if err := e.Run(context.Background(), engine.Request{FlowID: "g", Input: "What is 5*10?"}, func(ev flow.Event) { json.Marshal(ev.Data) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Engine is the guarded calculator's four node iterations from an agent
// that answers at once: the engine and the store alone. Against memory, a
// store's figure is the cost of making every event durable before a
// client sees it.
func Engine(b *testing.B, stores []Store) {
	def, err := flow.Parse([]byte(Guarded), flow.Catalog{})
	if err != nil {
		b.Fatal(err)
	}
	Flows(b, stores, def, instant{})
}
