package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/flow"
)

// BenchmarkExecuteSSE is POST /flow/execute and its whole event stream over
// loopback HTTP, with an in-process instant model: the cost of the engine,
// the agents and the HTTP layer, not of a provider.
func BenchmarkExecuteSSE(b *testing.B) {
	benchExecute(b, "text/event-stream")
}

// BenchmarkExecuteJSON is the same run answered as one JSON document.
func BenchmarkExecuteJSON(b *testing.B) {
	benchExecute(b, "application/json")
}

func benchExecute(b *testing.B, accept string) {
	model := agents.Model{LLM: agentstest.Func(script(nil)), Name: "func"}
	f := newServer(b, &flow.MemStore{}, func(string) (agents.Model, error) { return model, nil }, 0)
	f.engine.Log = slog.New(slog.DiscardHandler)
	client := f.srv.Client()
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, f.url+"/flow/execute", strings.NewReader(`{"flow_id": "calc", "input": "What is 6*7?"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"status":"completed"`) {
			b.Fatalf("%s", body)
		}
	}
}
