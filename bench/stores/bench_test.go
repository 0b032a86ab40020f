// Package stores_test runs the guarded calculator through the engine, the
// real agents and the calculator on each store (docs/benchmarks.md):
// flow/storetest's Flows, with what flow's packages may not import.
//
//	go test -run '^$' -bench . -benchmem -count 6 ./bench/stores
//
// PostgreSQL runs where SUPEREGO_TEST_POSTGRES names a server, as .ci/run
// sets it; elsewhere it is skipped, saying so.
package stores_test

import (
	"context"
	"path/filepath"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/flow"
	"superego/flow/storetest"
	"superego/memstore"
	"superego/postgres"
	"superego/postgres/pgtest"
	"superego/sqlite"
	"superego/tools"
)

var stores = []storetest.Store{
	{Name: "memory", Open: func(testing.TB) flow.Store { return &memstore.Store{} }},
	{Name: "sqlite", Open: func(tb testing.TB) flow.Store {
		s, err := sqlite.Open(filepath.Join(tb.TempDir(), "superego.db"))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	}},
	{Name: "postgres", Open: func(tb testing.TB) flow.Store {
		u, _ := pgtest.Database(tb)
		s, err := postgres.Open(context.Background(), u)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	}},
}

// BenchmarkGuardedCalculator is the guarded calculator through the real
// agents: prompts, the model protocol, reply parsing and the calculator
// tool, on an instant in-process model, every event encoded as delivered.
func BenchmarkGuardedCalculator(b *testing.B) {
	def, err := flow.Parse([]byte(storetest.Guarded), flow.Catalog{Tools: []string{"calculator"}})
	if err != nil {
		b.Fatal(err)
	}
	model := agents.Model{LLM: agentstest.Func(func(r agentstest.Request) agentstest.Answer {
		switch r.Node() {
		case "input_superego":
			return agentstest.Reply("Benign arithmetic request.", "CAUTION", "verify", "ok")
		case "calculator":
			if res := r.ToolResults(); len(res) > 0 {
				return agentstest.Reply("done", "COMPLETE", "none", "5*10 = "+res[0].Text)
			}
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_calc_1", Name: "calculator", Args: `{"expression":"5*10"}`}}}
		}
		return agentstest.Reply("The draft agrees with the tool.", "ACCEPT", "none", "")
	}), Name: "func"}
	agent := &agents.Agent{Model: func(string) (agents.Model, error) { return model, nil }, Tools: tools.Set{"calculator": tools.Calculator()}}
	storetest.Flows(b, stores, def, agent)
}
