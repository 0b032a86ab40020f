package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"superego/experiment"
	"superego/tools"
)

// config is every setting, flat. Flags override environment variables,
// which override defaults (docs/operations.md).
type config struct {
	Addr          string
	Flows         string
	Constitutions string
	DB            string
	Model         string
	AdminToken    string
	APIKeys       []string // SUPEREGO_API_KEYS: the bearer tokens /v1/* accepts; none: /v1/* is open
	// UpstreamModels are the models a /v1 request may choose for a flow's
	// "client" agent (SUPEREGO_UPSTREAM_MODELS); ToolWait, how long an
	// instance waits for its client's tool results (docs/gateway.md).
	UpstreamModels []string
	ToolWait       time.Duration
	KeysFile       string // SUPEREGO_API_KEYS_FILE: keys with their users' stacks, accepted on /v1/* too
	SearchURL      string
	Workspaces     string
	Rules          string
	References     string
	// MCP is the mcp.json read (--mcp, else ./mcp.json if present), and
	// MCPServers its servers, for serve, run and validate.
	MCP          string
	MCPServers   []tools.MCPServer
	ModelTimeout time.Duration
	Grace        time.Duration
	MaxRuns      int
	MaxStreams   int
	MaxInputMiB  int // of input the runs in flight may hold
	// The HTTP server's timeouts: for a request's body, for a kept-alive
	// connection with no request, and for each write to a client.
	ReadTimeout, IdleTimeout, WriteTimeout time.Duration

	OpenAIKey        string
	OpenAIBaseURL    string
	AnthropicKey     string
	AnthropicBaseURL string
	OllamaHost       string

	// Operators' view (docs/operations.md): where /metrics is served, if not on
	// Addr; the log's format, json or text; whether traces carry prompts
	// (SUPEREGO_TRACE_CONTENT=1). OpenTelemetry's own OTEL_* variables,
	// read through getenv, configure traces.
	MetricsAddr  string
	LogFormat    string
	TraceContent bool
	getenv       func(string) string

	JSON bool // run: print events as JSON lines

	// export
	ExportFlow    string
	ExportSince   time.Time
	IncludeHidden bool

	// Experiments is where the datasets of experiments posted over HTTP
	// are (serve).
	Experiments string
	// MaxOutcomes bounds an experiment's outcomes (0: no bound);
	// ExperimentsAuth says who may start, resume, replay or cancel one
	// over HTTP: "open", "keys" (an API key or the admin token) or "admin".
	MaxOutcomes     int
	ExperimentsAuth string
	// experiment: its subcommand's flags.
	Out               string
	NoCache           bool
	RetryErrors       bool
	Format            string
	Adjust            string // report, run, resume, replay: holm, bh or none
	From, As          string
	NoLive            bool
	NodeConstitutions []string // replay: NODE=NAME
	NodeModels        []string // replay: NODE=MODEL
	Stack             *string  // replay: NAME[:LEVEL],…, the stack to ask again under
}

var errHelp = errors.New("help requested")

func parseConfig(cmd string, args []string, getenv func(string) string, stderr io.Writer) (config, []string, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	c := config{
		ReadTimeout:      30 * time.Second,
		IdleTimeout:      2 * time.Minute,
		WriteTimeout:     30 * time.Second,
		OpenAIKey:        getenv("OPENAI_API_KEY"),
		OpenAIBaseURL:    getenv("OPENAI_BASE_URL"),
		AnthropicKey:     getenv("ANTHROPIC_API_KEY"),
		AnthropicBaseURL: getenv("ANTHROPIC_BASE_URL"),
		OllamaHost:       getenv("OLLAMA_HOST"),
		AdminToken:       getenv("SUPEREGO_ADMIN_TOKEN"),
		KeysFile:         getenv("SUPEREGO_API_KEYS_FILE"),
		TraceContent:     getenv("SUPEREGO_TRACE_CONTENT") == "1",
		getenv:           getenv,
	}
	defaultModel := "offline"
	switch {
	case c.OpenAIKey != "":
		defaultModel = "openai:gpt-4o-mini"
	case c.AnthropicKey != "":
		defaultModel = "anthropic:claude-sonnet-4-5"
	}
	fs := flag.NewFlagSet("superego "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", env("SUPEREGO_ADDR", "127.0.0.1:8080"), "listen address (SUPEREGO_ADDR)")
	fs.StringVar(&c.Flows, "flows", env("SUPEREGO_FLOWS", "./flows"), "flow definitions directory (SUPEREGO_FLOWS)")
	fs.StringVar(&c.Constitutions, "constitutions", env("SUPEREGO_CONSTITUTIONS", "./constitutions"), "constitutions directory (SUPEREGO_CONSTITUTIONS)")
	fs.StringVar(&c.DB, "db", env("SUPEREGO_DB", "./superego.db"), `where instances are kept: a SQLite file, or "memory" (SUPEREGO_DB)`)
	c.Model = env("SUPEREGO_MODEL", defaultModel)
	if cmd == "experiment" {
		// experiment replay's --model NODE=MODEL changes one node; without
		// "=", --model is the default model, as for every command.
		fs.Func("model", `default model, "provider:model" (SUPEREGO_MODEL); for replay, NODE=MODEL changes one node's (repeatable)`, func(v string) error {
			if strings.Contains(v, "=") {
				c.NodeModels = append(c.NodeModels, v)
			} else {
				c.Model = v
			}
			return nil
		})
	} else {
		fs.StringVar(&c.Model, "model", c.Model, `default model, "provider:model": openai, anthropic, ollama or offline (SUPEREGO_MODEL)`)
	}
	fs.StringVar(&c.Workspaces, "workspaces", env("SUPEREGO_WORKSPACES", "./workspaces"), "where each instance's workspace directory is made, for the workspace tools (SUPEREGO_WORKSPACES)")
	fs.StringVar(&c.Rules, "rules", env("SUPEREGO_RULES", "./rules"), "rules every instance starts with, one Markdown file each (SUPEREGO_RULES)")
	fs.StringVar(&c.References, "references", env("SUPEREGO_REFERENCES", "./references"), "references every instance starts with, one Markdown file each (SUPEREGO_REFERENCES)")
	fs.StringVar(&c.MCP, "mcp", env("SUPEREGO_MCP", ""), "MCP tool servers, in the mcp.json format of Claude Code and Claude Desktop (SUPEREGO_MCP; default ./mcp.json if present)")
	fs.StringVar(&c.LogFormat, "log-format", env("SUPEREGO_LOG_FORMAT", "text"), "log lines as text or json (SUPEREGO_LOG_FORMAT)")
	if cmd == "serve" {
		fs.StringVar(&c.MetricsAddr, "metrics-addr", env("SUPEREGO_METRICS_ADDR", ""), "serve GET /metrics on this address instead of --addr (SUPEREGO_METRICS_ADDR)")
	}
	fs.StringVar(&c.SearchURL, "search-url", env("SUPEREGO_SEARCH_URL", ""), "SearXNG instance for the search tool (SUPEREGO_SEARCH_URL)")
	modelTimeout, grace, maxRuns, maxStreams := env("SUPEREGO_MODEL_TIMEOUT", "2m"), env("SUPEREGO_GRACE", "30s"), env("SUPEREGO_MAX_RUNS", "256"), env("SUPEREGO_MAX_STREAMS", "1024")
	toolWait := env("SUPEREGO_TOOL_WAIT", "24h")
	fs.StringVar(&modelTimeout, "model-timeout", modelTimeout, "longest wait for one model or tool call (SUPEREGO_MODEL_TIMEOUT)")
	fs.StringVar(&grace, "grace", grace, "at shutdown, how long runs in flight may take to finish (SUPEREGO_GRACE)")
	fs.StringVar(&toolWait, "tool-wait", toolWait, "how long an instance waits for a /v1 client's tool results before its calls are answered \"not run\" (SUPEREGO_TOOL_WAIT)")
	fs.StringVar(&maxRuns, "max-runs", maxRuns, "runs in flight at once; more get 429 (SUPEREGO_MAX_RUNS)")
	fs.StringVar(&maxStreams, "max-streams", maxStreams, "streams of instances (replays, reconnects) open at once; more get 429 (SUPEREGO_MAX_STREAMS)")
	fs.StringVar(&c.Experiments, "experiments", env("SUPEREGO_EXPERIMENTS", "./experiments"), "where the datasets of experiments posted over HTTP are (SUPEREGO_EXPERIMENTS)")
	maxInput := env("SUPEREGO_MAX_INPUT_MIB", "16")
	fs.StringVar(&maxInput, "max-input-mib", maxInput, "MiB of input (messages, conversations included) the runs in flight may hold; more get 429 (SUPEREGO_MAX_INPUT_MIB)")
	maxOutcomes := env("SUPEREGO_MAX_OUTCOMES", "100000")
	fs.StringVar(&maxOutcomes, "max-outcomes", maxOutcomes, "most outcomes an experiment may have (samples × conditions × repeats); 0: no limit (SUPEREGO_MAX_OUTCOMES)")
	if cmd == "serve" {
		fs.StringVar(&c.ExperimentsAuth, "experiments-auth", env("SUPEREGO_EXPERIMENTS_AUTH", ""), "who may start, resume, replay or cancel an experiment over HTTP: open, keys (an API key or the admin token) or admin; default keys when SUPEREGO_API_KEYS or SUPEREGO_ADMIN_TOKEN is set, else open (SUPEREGO_EXPERIMENTS_AUTH)")
	}
	since := ""
	switch cmd {
	case "experiment":
		fs.StringVar(&c.Out, "out", "", "run, resume, replay: where results.jsonl, results.csv and report.md, .json, .csv, .tex and .svg go, remembered for the experiment's later commands (default: where it last went, else results/ID)")
		fs.BoolVar(&c.NoCache, "no-cache", false, "run, resume, replay: make every model call again, the reply cache unused")
		fs.BoolVar(&c.RetryErrors, "retry-errors", false, "resume: run again the outcomes whose runs failed")
		fs.StringVar(&c.Format, "format", "md", "report: md, json, csv, latex or svg; compare: md or json")
		fs.StringVar(&c.Adjust, "adjust", experiment.AdjustHolm, "report, run, resume, replay: how the report adjusts its paired tests' p-values for their number: holm (Holm's step-down), bh (Benjamini–Hochberg) or none")
		fs.StringVar(&c.From, "from", "", "replay: the condition whose recorded runs are re-judged")
		fs.StringVar(&c.As, "as", "", "replay: the name of the new condition")
		fs.BoolVar(&c.NoLive, "no-live", false, `replay: a run whose path leaves the record ends "diverged" instead of running the rest live`)
		fs.Func("constitution", "replay: NODE=NAME, another constitution for a superego (repeatable)", func(v string) error {
			c.NodeConstitutions = append(c.NodeConstitutions, v)
			return nil
		})
		fs.Func("stack", `replay: the user constitutions the superegos are asked again under, NAME[:LEVEL] separated by commas, such as vegan:4,child_safe ("" for none)`, func(v string) error {
			c.Stack = &v
			return nil
		})
	case "run":
		fs.BoolVar(&c.JSON, "json", false, "print every event as a JSON line")
	case "export":
		fs.StringVar(&c.ExportFlow, "flow", "", "only instances of this flow")
		fs.StringVar(&since, "since", "", "only instances created at or after this time (2026-11-21 or RFC 3339)")
		fs.BoolVar(&c.IncludeHidden, "include-hidden", false, "include thinking and agent_guidance")
	}
	fs.Usage = func() {
		if cmd == "experiment" {
			fmt.Fprint(stderr, experimentUsage+"\nflags:\n")
		} else {
			fmt.Fprint(stderr, usage+"\nflags:\n")
		}
		fs.PrintDefaults()
	}
	// An experiment's flags may come after its arguments (superego
	// experiment run FILE --out DIR): parse up to an argument, keep it,
	// parse on, up to "--". Other commands stop at their first argument,
	// so that a message such as "-5 + 3" is not read as a flag.
	var rest, tail []string
	if i := slices.Index(args, "--"); i >= 0 && cmd == "experiment" {
		args, tail = args[:i], args[i+1:]
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return c, nil, errHelp
			}
			return c, nil, err
		}
		if args = fs.Args(); len(args) == 0 || cmd != "experiment" {
			rest = append(rest, args...)
			break
		}
		rest, args = append(rest, args[0]), args[1:]
	}
	rest = append(rest, tail...)
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return c, nil, fmt.Errorf("log-format: %q is not text or json", c.LogFormat)
	}
	var err error
	if c.ModelTimeout, err = positiveDuration("model-timeout", modelTimeout); err != nil {
		return c, nil, err
	}
	if c.Grace, err = positiveDuration("grace", grace); err != nil {
		return c, nil, err
	}
	if c.ToolWait, err = positiveDuration("tool-wait", toolWait); err != nil {
		return c, nil, err
	}
	for m := range strings.SplitSeq(getenv("SUPEREGO_UPSTREAM_MODELS"), ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.UpstreamModels = append(c.UpstreamModels, m)
		}
	}
	if c.MaxRuns, err = strconv.Atoi(maxRuns); err != nil || c.MaxRuns < 1 {
		return c, nil, fmt.Errorf("max-runs: %q is not a whole number of 1 or more", maxRuns)
	}
	if c.MaxStreams, err = strconv.Atoi(maxStreams); err != nil || c.MaxStreams < 1 {
		return c, nil, fmt.Errorf("max-streams: %q is not a whole number of 1 or more", maxStreams)
	}
	if c.MaxInputMiB, err = strconv.Atoi(maxInput); err != nil || c.MaxInputMiB < 1 {
		return c, nil, fmt.Errorf("max-input-mib: %q is not a whole number of 1 or more", maxInput)
	}
	if c.MaxOutcomes, err = strconv.Atoi(maxOutcomes); err != nil || c.MaxOutcomes < 0 {
		return c, nil, fmt.Errorf("max-outcomes: %q is not a whole number of 0 or more", maxOutcomes)
	}
	if keys := getenv("SUPEREGO_API_KEYS"); keys != "" {
		for k := range strings.SplitSeq(keys, ",") {
			if k = strings.TrimSpace(k); k != "" {
				c.APIKeys = append(c.APIKeys, k)
			}
		}
		if len(c.APIKeys) == 0 {
			// Set, yet empty: better refuse to start than leave /v1 open.
			return c, nil, errors.New("SUPEREGO_API_KEYS has no key: give keys separated by commas, or unset it")
		}
	}
	switch c.ExperimentsAuth {
	case "":
		c.ExperimentsAuth = "open"
		if len(c.APIKeys) > 0 || c.AdminToken != "" {
			c.ExperimentsAuth = "keys" // an operator who locked /v1 wants its paid calls locked everywhere
		}
	case "open":
	case "keys":
		if len(c.APIKeys) == 0 && c.AdminToken == "" {
			return c, nil, errors.New("experiments-auth: keys needs SUPEREGO_API_KEYS or SUPEREGO_ADMIN_TOKEN set")
		}
	case "admin":
		if c.AdminToken == "" {
			return c, nil, errors.New("experiments-auth: admin needs SUPEREGO_ADMIN_TOKEN set")
		}
	default:
		return c, nil, fmt.Errorf("experiments-auth: %q is not open, keys or admin", c.ExperimentsAuth)
	}
	if cmd == "experiment" && !experiment.KnownAdjust(c.Adjust) {
		return c, nil, fmt.Errorf("adjust: %q is not holm, bh or none", c.Adjust)
	}
	if cmd == "serve" || cmd == "run" || cmd == "validate" || cmd == "experiment" {
		if c.MCPServers, err = mcpServers(&c.MCP, getenv); err != nil {
			return c, nil, err
		}
	}
	if since != "" {
		if c.ExportSince, err = time.Parse(time.RFC3339, since); err != nil {
			if c.ExportSince, err = time.Parse(time.DateOnly, since); err != nil {
				return c, nil, fmt.Errorf("since: %q is not a date (2026-11-21) or an RFC 3339 time", since)
			}
		}
	}
	return c, rest, nil
}

func positiveDuration(name, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q is not a duration such as 30s or 2m", name, s)
	}
	return d, nil
}

// mcpServers reads the servers of the mcp.json at *path; with no path, of
// ./mcp.json if there is one, and then *path names it. A file that cannot
// be used is an error naming it, and the server with the problem.
func mcpServers(path *string, getenv func(string) string) ([]tools.MCPServer, error) {
	if *path == "" {
		if _, err := os.Stat("mcp.json"); err != nil {
			return nil, nil
		}
		*path = "mcp.json"
	}
	data, err := os.ReadFile(*path)
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	servers, err := tools.ParseMCP(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", *path, err)
	}
	return servers, nil
}
