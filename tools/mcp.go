package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"superego/backoff"
)

// MCP keeps the tool servers of an mcp.json running and offers their tools,
// named mcp__SERVER__TOOL. A server that cannot start, or dies, is started
// again with backoff, and meanwhile its tools answer an error naming it: no
// server's failure ever reaches the caller as anything but a tool error.
// Start it once; Close stops every server. A program that starts stdio
// servers calls KeeperMain first thing in main.
type MCP struct {
	Servers []MCPServer
	Log     *slog.Logger

	conns  map[string]*mcpConn // by server name; set by Start, then only read
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// States of an MCP server, as /healthz shows them.
const (
	MCPStarting   = "starting"   // its first start is under way
	MCPRunning    = "running"    // connected; its tools are offered
	MCPRestarting = "restarting" // it failed or died, and is started again after a wait
	MCPStopped    = "stopped"    // the server is shutting down
)

// MCPState is a server's state: /healthz's mcp entries.
type MCPState struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Tools int    `json:"tools"`
}

// mcpConn is one server and what its supervising goroutine learned of it.
type mcpConn struct {
	cfg     MCPServer
	secrets []string
	started chan struct{} // closed when the first start has succeeded or failed

	mu      sync.Mutex
	state   string
	session *mcp.ClientSession
	stop    chan struct{} // the session's: stall closes it to have run end it
	tools   []Tool
	why     error // why it is not running
	// back, while the server is started again after a call that got no
	// answer, is closed once it runs, or failed to start: calls wait.
	back chan struct{}
}

// A server that failed is started again after firstRetry, and after
// twice as long each time it fails again, up to maxRetry (docs/actions.md: the
// first retry within a second, then at most 30 s apart).
const (
	firstRetry = 500 * time.Millisecond
	maxRetry   = 30 * time.Second
)

// maxToolOutput bounds what one MCP tool call returns to the model and to
// the step, as the built-in tools bound theirs.
const maxToolOutput = 64 << 10

// toolName is what providers accept as a tool's name (OpenAI's rule for a
// function's name).
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether providers accept name as a tool's name: a
// client's tool, a sample's simulated one, an MCP server's as prefixed.
func ValidName(name string) bool { return toolName.MatchString(name) }

// MCPName is the name a flow and a model know a server's tool by.
func MCPName(server, tool string) string { return "mcp__" + server + "__" + tool }

// SplitMCPName reads mcp__SERVER__TOOL (TOOL may be "*"); ok is false for
// any other name.
func SplitMCPName(name string) (server, tool string, ok bool) {
	rest, ok := strings.CutPrefix(name, "mcp__")
	if !ok {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, "__")
	return server, tool, ok && server != "" && tool != ""
}

// Start starts every server, each supervised by a goroutine of its own
// until Close, and returns at once; Wait waits for their first starts.
func (m *MCP) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.conns = map[string]*mcpConn{}
	for _, s := range m.Servers {
		c := &mcpConn{cfg: s, secrets: s.secrets(), state: MCPStarting, started: make(chan struct{}),
			why: fmt.Errorf("mcp server %q is starting", s.Name)}
		m.conns[s.Name] = c
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.supervise(ctx, c)
		}()
	}
}

// Wait returns when every server's first start has succeeded or failed,
// or when ctx ends.
func (m *MCP) Wait(ctx context.Context) {
	for _, c := range m.conns {
		select {
		case <-c.started:
		case <-ctx.Done():
			return
		}
	}
}

// Close stops every server and waits for them.
func (m *MCP) Close() {
	if m == nil || m.cancel == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
}

// Names are the servers' names, sorted.
func (m *MCP) Names() []string {
	var out []string
	if m != nil {
		for _, s := range m.Servers {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return out
}

// States are the servers' states, sorted by name; none for a nil MCP.
func (m *MCP) States() []MCPState {
	out := []MCPState{}
	for _, name := range m.Names() {
		c := m.conns[name]
		if c == nil { // not started
			out = append(out, MCPState{Name: name, State: MCPStopped})
			continue
		}
		c.mu.Lock()
		out = append(out, MCPState{Name: name, State: c.state, Tools: len(c.tools)})
		c.mu.Unlock()
	}
	return out
}

// Tools are a server's tools as it last listed them; none while it has
// never run, or for a server mcp.json does not have.
func (m *MCP) Tools(server string) []Tool {
	c := m.conn(server)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tools)
}

// Tool finds a tool by its name, mcp__SERVER__TOOL. A tool of a server in
// mcp.json is found even while the server is not running, or before it has
// listed the tool: calling it answers why it cannot be called.
func (m *MCP) Tool(name string) (Tool, bool) {
	server, tool, ok := SplitMCPName(name)
	c := m.conn(server)
	if !ok || c == nil || tool == "*" {
		return Tool{}, false
	}
	for _, t := range m.Tools(server) {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{
		Name:        name,
		Description: fmt.Sprintf("a tool of the MCP server %q, which has not listed it", server),
		Parameters:  map[string]any{"type": "object"},
		Call: func(ctx context.Context, args json.RawMessage) (string, error) {
			if _, err := c.live(ctx); err != nil {
				return "", err
			}
			return "", fmt.Errorf("mcp server %q has no tool %q", server, tool)
		},
	}, true
}

func (m *MCP) conn(server string) *mcpConn {
	if m == nil {
		return nil
	}
	return m.conns[server]
}

func (m *MCP) logger() *slog.Logger {
	if m.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Log
}

// supervise keeps one server running until ctx ends: it starts it, lists
// its tools, and when it fails or dies, waits and starts it again; when a
// call to it got no answer, it starts it again at once.
func (m *MCP) supervise(ctx context.Context, c *mcpConn) {
	log := m.logger().With("mcp_server", c.cfg.Name)
	failures := 0 // in a row
	var started sync.Once
	defer started.Do(func() { close(c.started) })
	for {
		stderr := &tail{}
		up := time.Now()
		err := c.run(ctx, stderr, func(tools int) {
			failures = 0 // it ran: the next failure starts the backoff again
			started.Do(func() { close(c.started) })
			log.Info("mcp server running", "tools", tools)
		})
		if ctx.Err() != nil {
			c.set(MCPStopped, nil, nil, nil, errors.New("the superego server is shutting down"))
			return
		}
		if errors.Is(err, errStalled) {
			log.Warn("mcp server started again: a call got no answer in time", "ran", time.Since(up).Round(time.Millisecond))
			continue
		}
		wait := backoff.Doubling(firstRetry, maxRetry, failures)
		failures++
		why := fmt.Errorf("mcp server %q is not running (%s; it is started again within %s)", c.cfg.Name, c.redact(err.Error()), wait.Round(time.Millisecond))
		c.set(MCPRestarting, nil, nil, nil, why)
		log.Warn("mcp server stopped", "err", c.redact(err.Error()), "ran", time.Since(up).Round(time.Millisecond), "retry_in", wait, "stderr", c.redact(stderr.String()))
		started.Do(func() { close(c.started) })
		select {
		case <-ctx.Done():
			c.set(MCPStopped, nil, nil, nil, errors.New("the superego server is shutting down"))
			return
		case <-time.After(wait):
		}
	}
}

// run starts the server once and returns when it ends, or ctx does.
func (c *mcpConn) run(ctx context.Context, stderr *tail, running func(tools int)) error {
	relist := make(chan struct{}, 1) // a pending "tools changed"; one is as good as many
	client := mcp.NewClient(&mcp.Implementation{Name: "superego", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case relist <- struct{}{}:
			default:
			}
		},
	})
	var transport mcp.Transport
	var group *keeper
	if c.cfg.HTTP() {
		transport = &mcp.StreamableClientTransport{Endpoint: c.cfg.URL, HTTPClient: &http.Client{Transport: headers{c.cfg.Headers, http.DefaultTransport}}}
	} else {
		var err error
		if group, err = startKeeper(); err != nil {
			return fmt.Errorf("start its keeper: %w", err)
		}
		// Whatever of the program's group is left when it has ended (the
		// node that npx started) ends with it.
		defer group.end()
		cmd := exec.Command(c.cfg.Command, c.cfg.Args...)
		cmd.Env = environ(c.cfg.Env)
		cmd.Stderr = stderr
		group.join(cmd)
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	// A first start may download the server (npx): give it time, but not
	// forever.
	connectCtx, cancel := context.WithTimeout(ctx, time.Minute)
	session, err := client.Connect(connectCtx, transport, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	ended := make(chan error, 1) // Wait's result; read once, whichever way run returns
	go func() { ended <- session.Wait() }()
	stop := make(chan struct{})
	defer func() {
		session.Close()
		<-ended
	}()
	list := func() (int, error) {
		listCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		tools, err := c.list(listCtx, session)
		if err != nil {
			return 0, fmt.Errorf("list tools: %w", err)
		}
		if tools == nil {
			tools = []Tool{}
		}
		c.set(MCPRunning, session, stop, tools, nil)
		return len(tools), nil
	}
	n, err := list()
	if err != nil {
		return err
	}
	running(n)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ended:
			ended <- err // for the deferred read
			if err == nil {
				err = errors.New("it closed the connection")
			}
			return fmt.Errorf("exited: %w", err)
		case <-relist:
			if _, err := list(); err != nil {
				return err
			}
		case <-stop:
			group.kill() // it does not answer: it gets no time to shut down
			return errStalled
		}
	}
}

// list asks the server for its tools, and makes each a Tool that calls it.
func (c *mcpConn) list(ctx context.Context, session *mcp.ClientSession) ([]Tool, error) {
	var out []Tool
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		name := MCPName(c.cfg.Name, t.Name)
		if !ValidName(name) {
			continue // a provider would refuse the whole request for it
		}
		params, _ := t.InputSchema.(map[string]any)
		if params == nil {
			params = map[string]any{"type": "object"}
		}
		tool := Tool{Name: name, Description: t.Description, Parameters: params, Call: c.caller(t.Name)}
		if a := t.Annotations; a != nil && c.cfg.TrustAnnotations {
			// MCP's default for openWorldHint is true: only a server that
			// says false makes a tool closed-world.
			tool.ReadOnly, tool.ClosedWorld = a.ReadOnlyHint, a.OpenWorldHint != nil && !*a.OpenWorldHint
		}
		out = append(out, tool)
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// caller calls the server's tool on whatever session is live when it is
// called, so that a tool listed before a restart works after it.
func (c *mcpConn) caller(tool string) func(context.Context, json.RawMessage) (string, error) {
	return func(ctx context.Context, args json.RawMessage) (string, error) {
		session, err := c.live(ctx)
		if err != nil {
			return "", err
		}
		var arguments map[string]any
		if err := json.Unmarshal(args, &arguments); err != nil {
			return "", errors.New("the arguments must be a JSON object")
		}
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: arguments})
		if err != nil {
			var protocol *jsonrpc.Error
			switch {
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				// It may never answer: the next call goes to the server
				// started again.
				c.stall(session)
				return "", fmt.Errorf("mcp server %q: %s gave no answer in the time a call may take; the server is started again", c.cfg.Name, tool)
			case ctx.Err() == nil && !errors.As(err, &protocol):
				// The server is gone (a dead program, an HTTP server
				// that does not answer): its supervisor starts it again.
				session.Close()
			}
			return "", fmt.Errorf("mcp server %q: %s: %s", c.cfg.Name, tool, c.redact(err.Error()))
		}
		out := resultText(res)
		if len(out) > maxToolOutput {
			out = out[:maxToolOutput] + fmt.Sprintf("\n[… %d more bytes left out]", len(out)-maxToolOutput)
		}
		if res.IsError {
			return "", fmt.Errorf("%s", c.redact(out))
		}
		return out, nil
	}
}

// live is the running session, or why there is none. While the server
// is started again after a call that got no answer, it waits for it, as
// long as ctx lets it.
func (c *mcpConn) live(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	back := c.back
	c.mu.Unlock()
	if back != nil {
		select {
		case <-back:
		case <-ctx.Done():
			return nil, fmt.Errorf("mcp server %q is starting again, and was not running in time", c.cfg.Name)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil {
		return nil, c.why
	}
	return c.session, nil
}

// errStalled ends a session that a call got no answer from.
var errStalled = errors.New("a call got no answer in time")

// stall ends session, a call to which got no answer in time, unless it
// has ended already: run ends it, supervise starts the server again at
// once, and calls wait for that.
func (c *mcpConn) stall(session *mcp.ClientSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != session {
		return
	}
	close(c.stop)
	c.state, c.session, c.stop = MCPRestarting, nil, nil
	c.why = fmt.Errorf("mcp server %q is starting again: a call got no answer in time", c.cfg.Name)
	c.back = make(chan struct{})
}

// set records the server's state: with session and its stop channel while
// it runs.
func (c *mcpConn) set(state string, session *mcp.ClientSession, stop chan struct{}, tools []Tool, why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stop != nil {
		select {
		case <-stop:
			return // stalled as it listed its tools again: run ends it
		default:
		}
	}
	if c.back != nil {
		close(c.back) // it runs again, or failed to: calls waiting go on
		c.back = nil
	}
	c.state, c.session, c.stop, c.why = state, session, stop, why
	if tools != nil {
		// Otherwise a stopped server's tools stay listed, and answer why
		// they cannot be called, until it lists them again.
		c.tools = tools
	}
}

// redact takes the server's secrets out of text that might quote them: an
// error, its standard error.
func (c *mcpConn) redact(s string) string {
	for _, v := range c.secrets {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// resultText is a tool result as the model is given it: its text, and a
// line for each part that is not text.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, p := range res.Content {
		switch p := p.(type) {
		case *mcp.TextContent:
			parts = append(parts, p.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[an image, %s, %d bytes]", p.MIMEType, len(p.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio, %s, %d bytes]", p.MIMEType, len(p.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[a resource: %s %s]", p.URI, p.Description))
		case *mcp.EmbeddedResource:
			if p.Resource != nil && p.Resource.Text != "" {
				parts = append(parts, p.Resource.Text)
			} else if p.Resource != nil {
				parts = append(parts, fmt.Sprintf("[a resource: %s, %s, %d bytes]", p.Resource.URI, p.Resource.MIMEType, len(p.Resource.Blob)))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		return string(b)
	}
	return strings.Join(parts, "\n")
}

// entrusted are the variables that hold what superego is trusted with: its
// own tokens, its providers' keys, its database's URL (and password), its
// trace collector's headers. A server program is not given them unless its
// env in mcp.json asks for them ("OPENAI_API_KEY": "${OPENAI_API_KEY}").
var entrusted = []string{"SUPEREGO_ADMIN_TOKEN", "SUPEREGO_API_KEYS", "SUPEREGO_DB", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}

// environ is the environment a server program starts with: the superego
// server's own, as Claude Code gives its servers, less what superego is
// entrusted with, and the server's env from mcp.json.
func environ(extra map[string]string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(entrusted, name)
	})
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// headers adds a server's headers to each HTTP request.
type headers struct {
	set  map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.set) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.set {
			r.Header.Set(k, v)
		}
	}
	return h.next.RoundTrip(r)
}

// tail keeps the end of a server's standard error, for the log line that
// says why it stopped.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
