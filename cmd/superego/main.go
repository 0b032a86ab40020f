// Command superego serves flows of superego and inner agents over HTTP and
// Server-Sent Events, runs a flow from the terminal, and validates flow files.
//
//	superego serve                      # the server (the default)
//	superego run FLOW "message"         # one run, printed as it streams
//	superego validate [FILE...]         # check flow files
//	superego experiment run FILE        # an experiment, and its report
//	superego version                    # the version and VCS revision
//
// Configuration is flags, then environment variables, then defaults; see
// config.go and docs/operations.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"superego/agents"
	"superego/api"
	"superego/backoff"
	"superego/engine"
	"superego/experiment"
	"superego/flow"
	"superego/memstore"
	"superego/postgres"
	"superego/replica"
	"superego/sqlite"
	"superego/tools"
)

func main() {
	tools.KeeperMain()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes. A run's exit code says how it ended.
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2
	exitBlocked   = 3
	exitAwaiting  = 4
	exitIterLimit = 5
	exitCancelled = 6
)

var statusExit = map[string]int{
	flow.StatusCompleted:      exitOK,
	flow.StatusFailed:         exitFailed,
	flow.StatusBlocked:        exitBlocked,
	flow.StatusAwaitingInput:  exitAwaiting,
	flow.StatusAwaitingReview: exitAwaiting,
	flow.StatusIterationLimit: exitIterLimit,
	flow.StatusCancelled:      exitCancelled,
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if cmd == "version" {
		fmt.Fprintln(stdout, "superego "+version())
		return exitOK
	}
	cfg, rest, err := parseConfig(cmd, args, getenv, stderr)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "superego:", err)
		return exitUsage
	}
	switch cmd {
	case "serve":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "superego serve: unexpected argument %q\n", rest[0])
			return exitUsage
		}
		if err := serve(ctx, cfg, stdout, stderr, nil); err != nil {
			fmt.Fprintln(stderr, "superego:", err)
			return exitFailed
		}
		return exitOK
	case "run":
		return runFlow(ctx, cfg, rest, stdout, stderr)
	case "validate":
		return validateFlows(cfg, rest, stdout, stderr)
	case "export":
		return export(ctx, cfg, stdout, stderr)
	case "experiment":
		return experimentCmd(ctx, cfg, rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "superego: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

const usage = `usage:
  superego serve [flags]                       serve flows over HTTP (the default)
  superego run [flags] FLOW "message"          run a flow once and print it as it streams
  superego validate [flags] [FILE.json ...]    check flow files (default: every file in --flows)
  superego export [flags] > runs.jsonl         every instance with its steps, one JSON object a line
  superego experiment run FILE [--out DIR]     run an experiment: a labelled prompt set through conditions
  superego experiment resume|report|compare|replay|list …   (superego experiment -h)
  superego version                             the module's version and the VCS revision it was built from
  superego COMMAND -h                          flags of a command
`

// sqliteFile reports whether --db names a SQLite file.
func sqliteFile(db string) bool {
	return db != "memory" && !strings.HasPrefix(db, "postgres://") && !strings.HasPrefix(db, "postgresql://")
}

// openStore opens the store --db names: "memory", a postgres:// or
// postgresql:// URL, or else a SQLite file.
func openStore(cfg config) (flow.Store, func() error, error) {
	switch {
	case cfg.DB == "memory":
		return &memstore.Store{}, func() error { return nil }, nil
	case !sqliteFile(cfg.DB):
		s, err := postgres.Open(context.Background(), cfg.DB)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}
	s, err := sqlite.Open(cfg.DB)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// readUsers reads SUPEREGO_API_KEYS_FILE, where it is set: each key's
// user and stack, whose names lib must hold. A file set but unreadable, or
// with no key, stops the server: better than serving without the stacks
// its users rely on.
func readUsers(path string, lib flow.Library) (map[string]api.User, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("SUPEREGO_API_KEYS_FILE: %w", err)
	}
	users, err := api.ReadUsers(bytes.NewReader(b), lib)
	if err == nil && len(users) == 0 {
		err = errors.New("it has no key")
	}
	if err != nil {
		return nil, fmt.Errorf("SUPEREGO_API_KEYS_FILE %s: %w", path, err)
	}
	return users, nil
}

// wiring is the program's parts, built from the configuration.
type wiring struct {
	engine    *engine.Engine
	refused   []flow.Refused
	providers *agents.Providers
	lab       *experiment.Lab
	mcp       *tools.MCP
	// close stops the MCP servers and releases the store, once the
	// engine is done with them.
	close func()
}

// mcpWait bounds how long a start waits for the MCP servers' first starts;
// a server still starting then is left to start in the background.
const mcpWait = 15 * time.Second

// wire builds the engine from the configuration: flows, tools, models, the
// store, the MCP servers, which it starts, and the lab that runs
// experiments on them. Model calls go through a transport that waits out a
// provider's 429 (backoff.Transport), and replies are kept in the store's
// reply cache for runs with a cache scope.
func wire(cfg config, log *slog.Logger) (*wiring, error) {
	workspaces := &tools.Workspaces{Root: cfg.Workspaces}
	set := tools.Builtin(&tools.Search{URL: cfg.SearchURL}, workspaces)
	texts, err := flow.Constitutions(cfg.Constitutions)
	if err != nil {
		return nil, err
	}
	servers := &tools.MCP{Servers: cfg.MCPServers, Log: log}
	flows, refused, err := flow.LoadDir(cfg.Flows, flow.Catalog{Tools: set.Names(), MCPServers: servers.Names(), Providers: agents.ProviderNames, Texts: texts})
	if err != nil {
		return nil, err
	}
	limited := &backoff.Transport{}
	providers := &agents.Providers{
		Default:          cfg.Model,
		OpenAIKey:        cfg.OpenAIKey,
		OpenAIBaseURL:    cfg.OpenAIBaseURL,
		AnthropicKey:     cfg.AnthropicKey,
		AnthropicBaseURL: cfg.AnthropicBaseURL,
		OllamaHost:       cfg.OllamaHost,
		HTTPClient:       &http.Client{Transport: limited},
	}
	if _, err := providers.Model(""); err != nil {
		return nil, err
	}
	rules, err := flow.LoadContextDir(cfg.Rules, "rule")
	if err != nil {
		return nil, err
	}
	references, err := flow.LoadContextDir(cfg.References, "reference")
	if err != nil {
		return nil, err
	}
	store, closeStore, err := openStore(cfg)
	if err != nil {
		return nil, err
	}
	// The SQL stores keep experiments and replies beside the log; in
	// memory, a store of the lab's own does.
	experiments, ok := store.(experiment.Store)
	if !ok {
		experiments = &experiment.MemStore{}
	}
	servers.Start()
	ctx, cancel := context.WithTimeout(context.Background(), mcpWait)
	servers.Wait(ctx)
	cancel()
	agent := &agents.Agent{Model: providers.Model, Tools: set, MCP: servers, Timeout: cfg.ModelTimeout, Workspaces: workspaces}
	if cache, ok := experiments.(agents.ReplyCache); ok {
		agent.Cache = cache
	}
	engine := &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: agent, Context: append(rules, references...), Library: texts}, Store: store, MaxRuns: cfg.MaxRuns, MaxInput: int64(cfg.MaxInputMiB) << 20, Log: log}
	lab := &experiment.Lab{Engine: engine, Store: experiments, Log: log, RateLimited: limited.Waits,
		Env: experiment.Env{Flows: flows, Constitutions: texts, Providers: agents.ProviderNames, Dir: cfg.Experiments, Confined: true, MaxOutcomes: cfg.MaxOutcomes,
			Version: version()}}
	return &wiring{engine: engine, refused: refused, providers: providers, lab: lab, mcp: servers,
		close: func() { servers.Close(); closeStore() }}, nil
}

// serve runs the HTTP server until ctx ends, then shuts down gracefully:
// new runs get 503, runs in flight get cfg.Grace to finish.
func serve(ctx context.Context, cfg config, stdout, stderr io.Writer, ready chan<- string) error {
	log := newLogger(cfg, stderr, slog.LevelInfo)
	ops, log, err := watch(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ops.stop(stop)
	}()
	w, err := wire(cfg, log)
	if err != nil {
		return err
	}
	defer w.close()
	engine, refused := w.engine, w.refused
	users, err := readUsers(cfg.KeysFile, engine.Exec.Library)
	if err != nil {
		return err
	}
	apiKeys := slices.Concat(cfg.APIKeys, slices.Collect(maps.Keys(users)))
	if err := ops.observe(engine); err != nil {
		return err
	}
	for _, r := range refused {
		log.Warn("flow refused", "flow", r.ID, "errors", strings.Join(r.Errors, "; "))
	}
	if pg, ok := engine.Store.(*postgres.Store); ok {
		// On PostgreSQL, servers are replicas: runs are jobs any of them
		// takes, and a run resumes on another when its server dies.
		replicas, err := replica.Open(ctx, pg, cfg.MaxRuns, log)
		if err != nil {
			return err
		}
		engine.Replicas = replicas
		if err := replicas.Start(ctx, engine); err != nil {
			return err
		}
		defer replicas.Close(context.Background())
	}
	if n, err := engine.Recover(ctx, nil); err != nil {
		return err
	} else if n > 0 {
		log.Info("resumed interrupted runs", "runs", n)
	}
	go engine.ExpireWaits(ctx, cfg.ToolWait)
	// Experiments a crash or a shutdown left running go on: their runs in
	// flight were resumed just now, and are followed to their end.
	if n, err := w.lab.ResumeAll(ctx); err != nil {
		return err
	} else if n > 0 {
		log.Info("resumed experiments", "experiments", n)
	}
	model, _ := w.providers.Model("")
	srv := &http.Server{
		Handler: (&api.Server{Engine: engine, Experiments: w.lab, Workspaces: &tools.Workspaces{Root: cfg.Workspaces}, Refused: refused, Model: healthModel(model.Name), ModelNote: healthNote(model.Name),
			MCP: w.mcp, AdminToken: cfg.AdminToken, APIKeys: apiKeys, Users: users, UpstreamModels: cfg.UpstreamModels, ExperimentsAuth: cfg.ExperimentsAuth, Log: log, WriteTimeout: cfg.WriteTimeout, MaxStreams: cfg.MaxStreams,
			Metrics: ops.metrics, Streams: ops.tel.StreamSubscribers()}).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Bounds a request's body; handlers lift it once they have read it,
		// so that it never ends a stream or a long run's answer. Writes get
		// a deadline each, from the API, for the same reason.
		ReadTimeout: cfg.ReadTimeout,
		IdleTimeout: cfg.IdleTimeout,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	log.Info("listening", "addr", "http://"+addr, "model", model.Name, "flows", len(engine.Flows), "refused", len(refused), "db", redactedDB(cfg.DB), "traces", ops.traces)
	if model.Name == agents.OfflineName {
		log.Warn("the model is the built-in offline model, not a language model: set SUPEREGO_MODEL, OPENAI_API_KEY or ANTHROPIC_API_KEY for real judgments")
	}
	fmt.Fprintf(stdout, "superego is serving on http://%s.\n", addr)
	if _, ok := engine.Flows["basic_calculator"]; ok {
		fmt.Fprintf(stdout, "Run a flow:\n\n  curl -N http://%s/flow/execute -H 'Content-Type: application/json' -d '{\"flow_id\":\"basic_calculator\",\"input\":\"What is 5*10?\"}'\n\n", addr)
	}
	if ready != nil {
		ready <- addr
	}
	errc := make(chan error, 1) // Serve's result, read once whichever way serve ends
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", cfg.Grace)
	grace, cancel := context.WithTimeout(context.Background(), cfg.Grace)
	defer cancel()
	w.lab.Stop(experiment.ErrShutdown) // no outcome starts; the runs in flight get the grace
	if err := engine.Close(grace); err != nil {
		log.Warn("shutdown", "err", err)
	}
	w.lab.Close(grace)
	final, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	return srv.Shutdown(final)
}

// redactedDB is --db as a log line may show it: a database URL without its
// password.
func redactedDB(db string) string {
	if u, err := url.Parse(db); err == nil && u.User != nil {
		return u.Redacted()
	}
	return db
}

// healthModel is the model as /healthz names it: the built-in one is
// "offline", which clients know it by; healthNote says plainly what it is.
func healthModel(name string) string {
	if name == agents.OfflineName {
		return "offline"
	}
	return name
}

func healthNote(name string) string {
	if name == agents.OfflineName {
		return offlineNote
	}
	return ""
}

// offlineNote is /healthz's model_note for the offline model.
const offlineNote = "the built-in offline model: not a language model; it judges nothing, and answers every call with a fixed, labelled reply. Set SUPEREGO_MODEL, OPENAI_API_KEY or ANTHROPIC_API_KEY for real judgments"

// validateFlows checks flow files and prints every problem; it exits 1 if
// any file is refused.
func validateFlows(cfg config, files []string, stdout, stderr io.Writer) int {
	texts, err := flow.Constitutions(cfg.Constitutions)
	if err != nil {
		fmt.Fprintln(stderr, "superego validate:", err)
		return exitUsage
	}
	cat := flow.Catalog{Tools: tools.Builtin(nil, &tools.Workspaces{Root: cfg.Workspaces}).Names(), MCPServers: (&tools.MCP{Servers: cfg.MCPServers}).Names(),
		Providers: agents.ProviderNames, Texts: texts}
	var refused []flow.Refused
	var ok []string
	if len(files) == 0 {
		flows, r, err := flow.LoadDir(cfg.Flows, cat)
		if err != nil {
			fmt.Fprintln(stderr, "superego validate:", err)
			return exitUsage
		}
		refused = r
		for id := range flows {
			ok = append(ok, id)
		}
	}
	for _, f := range files {
		if _, err := flow.LoadFile(f, cat); err != nil {
			refused = append(refused, flow.Refusal(f, err))
			continue
		}
		ok = append(ok, f)
	}
	sort.Strings(ok)
	for _, id := range ok {
		fmt.Fprintf(stdout, "ok       %s\n", id)
	}
	for _, r := range refused {
		fmt.Fprintf(stdout, "refused  %s\n", r.ID)
		for _, e := range r.Errors {
			fmt.Fprintf(stdout, "         %s\n", e)
		}
	}
	if len(refused) > 0 {
		return exitFailed
	}
	return exitOK
}
