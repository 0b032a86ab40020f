package api_test

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/memstore"
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
	f := newServer(b, &memstore.Store{}, func(string) (agents.Model, error) { return model, nil }, 0)
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

// BenchmarkFollowedRun is a run of the calculator followed by eight event
// streams at once: the one that started it, and seven that joined while
// it ran. What the server allocates for it, its events' encoding above
// all, is the measure.
func BenchmarkFollowedRun(b *testing.B) {
	gate := make(chan struct{})
	model := agents.Model{LLM: agentstest.Func(script(gate)), Name: "func"}
	f := newServer(b, &memstore.Store{}, func(string) (agents.Model, error) { return model, nil }, 0)
	f.engine.Log = slog.New(slog.DiscardHandler)
	client := f.srv.Client()
	get := func(method, path, body string) *http.Response {
		req, _ := http.NewRequest(method, f.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		return resp
	}
	b.ReportAllocs()
	for b.Loop() {
		started := get(http.MethodPost, "/flow/execute", `{"flow_id": "calc", "input": "slow 6*7"}`)
		line, err := bufio.NewReader(started.Body).ReadString('}')
		_, id, ok := strings.Cut(line, `"instance_id":"`)
		if err != nil || !ok {
			b.Fatalf("%q: %v", line, err)
		}
		id, _, _ = strings.Cut(id, `"`)
		streams := []*http.Response{started}
		for range 7 {
			streams = append(streams, get(http.MethodGet, "/flow/instances/"+id+"/stream", ""))
		}
		gate <- struct{}{} // the calculator's two calls, its tool's round and its answer
		gate <- struct{}{}
		var wg sync.WaitGroup
		for _, s := range streams {
			wg.Go(func() {
				body, _ := io.ReadAll(s.Body)
				s.Body.Close()
				if !strings.Contains(string(body), `"status":"completed"`) {
					b.Errorf("%s", body)
				}
			})
		}
		wg.Wait()
	}
}
