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
	"superego/engine"
	"superego/flow"
	"superego/memstore"
	"superego/sqlite"
	"superego/tools"
)

// Server is a superego server to start over loopback: its flows, its
// model the OpenAI-compatible fake at ModelURL (and, for FLOW@anthropic:…,
// the Anthropic fake at AnthropicURL, a model of UpstreamModels), its MCP
// servers (nil: none), its store SQLite in Dir/bench.db when Store is
// "sqlite" and memory otherwise.
type Server struct {
	Flows          map[string]*flow.Flow
	ModelURL       string
	AnthropicURL   string
	UpstreamModels []string
	Store, Dir     string
	MCP            *tools.MCP
}

// Serve starts the server. stop ends it and closes the store.
func (s Server) Serve() (url string, stop func(), err error) {
	var st flow.Store = &memstore.Store{}
	closeStore := func() {}
	if s.Store == "sqlite" {
		db, err := sqlite.Open(filepath.Join(s.Dir, "bench.db"))
		if err != nil {
			return "", nil, err
		}
		st, closeStore = db, func() { db.Close() }
	}
	p := &agents.Providers{Default: "openai:fake", OpenAIKey: "k", OpenAIBaseURL: s.ModelURL + "/v1", AnthropicKey: "k", AnthropicBaseURL: s.AnthropicURL}
	log := slog.New(slog.DiscardHandler)
	engine := &engine.Engine{Flows: s.Flows, Exec: &engine.Executor{Agent: &agents.Agent{Model: p.Model, MCP: s.MCP, Timeout: time.Minute}}, Store: st, Log: log}
	api := &api.Server{Engine: engine, Model: "openai:fake", MCP: s.MCP, Log: log, UpstreamModels: s.UpstreamModels}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second}
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
