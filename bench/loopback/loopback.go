// Package loopback serves superego inside a benchmark's own process, as
// `superego serve` would, on a loopback port, so that the benchmark
// measures the server its users run over real HTTP while it also sees the
// fake model's side of every call.
package loopback

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"superego/agents"
	"superego/api"
	"superego/flow"
	"superego/sqlite"
	"superego/tools"
)

// Serve starts the server with flows: its model the OpenAI-compatible fake
// at modelURL, its MCP servers m (nil: none), its store SQLite in
// dir/bench.db when store is "sqlite" and memory otherwise. stop ends the
// server and closes the store.
func Serve(flows map[string]*flow.Flow, modelURL, store, dir string, m *tools.MCP) (url string, stop func(), err error) {
	var st flow.Store = &flow.MemStore{}
	closeStore := func() {}
	if store == "sqlite" {
		s, err := sqlite.Open(filepath.Join(dir, "bench.db"))
		if err != nil {
			return "", nil, err
		}
		st, closeStore = s, func() { s.Close() }
	}
	p := &agents.Providers{Default: "openai:fake", OpenAIKey: "k", OpenAIBaseURL: modelURL + "/v1"}
	log := slog.New(slog.DiscardHandler)
	engine := &flow.Engine{Flows: flows, Exec: &flow.Executor{Agent: &agents.Agent{Model: p.Model, MCP: m, Timeout: time.Minute}}, Store: st, Log: log}
	srv := &http.Server{Handler: (&api.Server{Engine: engine, Model: "openai:fake", MCP: m, Log: log}).Handler(), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeStore()
		return "", nil, err
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		engine.Close(context.Background())
		closeStore()
	}, nil
}
