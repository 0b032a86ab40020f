package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"superego/internal/eventually"
	"superego/tools"
	"superego/tools/mcptest"
)

func TestMain(m *testing.M) {
	mcptest.Main()
	mcptest.ExitAtOnce()
	os.Exit(m.Run())
}

func TestParseMCP(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TOKEN": "tok-123", "HOME": "/home/u"}
	getenv := func(k string) string { return env[k] }
	good := `{"mcpServers": {
	  "fs": {"command": "sh", "args": ["-c", "${HOME}/x"], "env": {"KEY": "${TOKEN}", "MODE": "${MODE:-fast}"}},
	  "web": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "trust_annotations": true}
	}}`
	servers, err := tools.ParseMCP([]byte(good), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 2 || servers[0].Name != "fs" || servers[0].Args[1] != "/home/u/x" || servers[0].Env["KEY"] != "tok-123" || servers[0].Env["MODE"] != "fast" ||
		servers[1].Name != "web" || !servers[1].HTTP() || servers[1].Headers["Authorization"] != "Bearer tok-123" ||
		servers[0].TrustAnnotations || !servers[1].TrustAnnotations {
		t.Errorf("parsed %+v", servers)
	}
	// ${TOKEN} names a secret wherever it is used; ${HOME} and ${MODE} do not.
	if !slices.Equal(servers[0].Secrets, []string{"tok-123"}) || !slices.Equal(servers[1].Secrets, []string{"tok-123"}) {
		t.Errorf("secrets from variables: %q %q", servers[0].Secrets, servers[1].Secrets)
	}
	for _, c := range []struct{ name, file, want string }{
		{"syntax", "{\"mcpServers\": {\n  \"fs\": {\"command\": \"sh\",}\n}}", "line 2: malformed JSON"},
		{"unknown field", `{"mcpServers": {"fs": {"comand": "sh"}}}`, `mcpServers.fs: unknown field "comand"`},
		{"unknown top-level field", `{"mcpServers": {}, "servers": {}}`, `unknown field "servers"`},
		{"no servers", `{}`, `no "mcpServers" object`},
		{"no command", `{"mcpServers": {"fs": {"args": ["x"]}}}`, `mcpServers.fs: needs "command"`},
		{"missing command", `{"mcpServers": {"fs": {"command": "superego-no-such-program"}, "ok": {"command": "sh"}}}`, `mcpServers.fs: command "superego-no-such-program": not found`},
		{"type", `{"mcpServers": {"web": {"type": "sse", "url": "http://x"}}}`, `mcpServers.web: type "sse": want "stdio"`},
		{"no url", `{"mcpServers": {"web": {"type": "http"}}}`, `mcpServers.web: "type": "http" needs "url"`},
		{"bad url", `{"mcpServers": {"web": {"type": "http", "url": "ftp://x"}}}`, `mcpServers.web: url "ftp://x": want an http:// or https:// URL`},
		{"http with env", `{"mcpServers": {"web": {"type": "http", "url": "http://x", "env": {"A": "b"}}}}`, `mcpServers.web: "command", "args" and "env" are for a program`},
		{"stdio with url", `{"mcpServers": {"fs": {"command": "sh", "url": "http://x"}}}`, `mcpServers.fs: "url" and "headers" are for "type": "http"`},
		{"builtin", `{"mcpServers": {"builtin": {"command": "sh"}}}`, `mcpServers.builtin: the name "builtin" is the built-in tools' own`},
		{"name", `{"mcpServers": {"my__fs": {"command": "sh"}}}`, `mcpServers.my__fs: a server's name may hold letters`},
		{"unset variable", `{"mcpServers": {"fs": {"command": "sh", "env": {"K": "${NOPE}"}}}}`, `mcpServers.fs: the environment has no NOPE`},
		{"wrong type", `{"mcpServers": {"fs": {"command": "sh", "args": "x"}}}`, `mcpServers.fs: "args" must be a JSON slice`},
		{"trust as a string", `{"mcpServers": {"fs": {"command": "sh", "trust_annotations": "yes"}}}`, `mcpServers.fs: "trust_annotations" must be a JSON bool`},
	} {
		_, err := tools.ParseMCP([]byte(c.file), getenv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// logBuffer is a log's text, safe to write from the servers' goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startMCP(t *testing.T, servers ...tools.MCPServer) (*tools.MCP, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	m := &tools.MCP{Servers: servers, Log: slog.New(slog.NewTextHandler(logs, nil))}
	m.Start()
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.Wait(ctx)
	return m, logs
}

// waitState polls until the server is in state: the bounded wait a
// restart with backoff needs.
func waitState(t *testing.T, m *tools.MCP, name, state string) {
	t.Helper()
	eventually.Holds(t, 20*time.Second, func() string {
		states := m.States()
		if !slices.ContainsFunc(states, func(s tools.MCPState) bool { return s.Name == name && s.State == state }) {
			return fmt.Sprintf("server %s never reached %s: %+v", name, state, states)
		}
		return ""
	})
}

func callMCP(t *testing.T, m *tools.MCP, name, args string) (string, error) {
	t.Helper()
	tool, ok := m.Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	return tool.Call(context.Background(), json.RawMessage(args))
}

func TestMCPOverStdio(t *testing.T) {
	t.Setenv("SUPEREGO_ADMIN_TOKEN", "admin-secret-never-passed")
	t.Setenv("OPENAI_API_KEY", "sk-never-passed")
	t.Setenv("SUPEREGO_DB", "postgres://u:password@db/x")
	server := mcptest.Command(t, "t", map[string]string{"GIVEN": "yes"})
	server.TrustAnnotations = true
	m, _ := startMCP(t, server)
	if got := m.States(); len(got) != 1 || got[0] != (tools.MCPState{Name: "t", State: tools.MCPRunning, Tools: 4}) {
		t.Fatalf("states %+v", got)
	}
	var names []string
	readOnly := map[string]bool{}
	for _, tool := range m.Tools("t") {
		names = append(names, tool.Name)
		readOnly[tool.Name] = tool.ReadOnly
	}
	if strings.Join(names, " ") != "mcp__t__add_note mcp__t__echo mcp__t__env mcp__t__pid" {
		t.Errorf("tools %v", names)
	}
	if !readOnly["mcp__t__echo"] || readOnly["mcp__t__add_note"] {
		t.Errorf("read-only %v: readOnlyHint is read-only, and only it", readOnly)
	}
	if out, err := callMCP(t, m, "mcp__t__echo", `{"text": "hello"}`); out != "hello" || err != nil {
		t.Errorf("echo: %q %v", out, err)
	}
	for name, want := range map[string]string{"GIVEN": "true", "PATH": "true", "SUPEREGO_ADMIN_TOKEN": "false", "OPENAI_API_KEY": "false", "SUPEREGO_DB": "false"} {
		if out, _ := callMCP(t, m, "mcp__t__env", `{"name": "`+name+`"}`); out != want {
			t.Errorf("the server's environment has %s: %s, want %s", name, out, want)
		}
	}
	// The SDK validates arguments against the tool's schema: its error
	// is the tool's, and the server goes on.
	if _, err := callMCP(t, m, "mcp__t__echo", `{"text": 5}`); err == nil {
		t.Error("bad arguments: no error")
	}
	if _, err := callMCP(t, m, "mcp__t__nope", `{}`); err == nil || !strings.Contains(err.Error(), `mcp server "t" has no tool "nope"`) {
		t.Errorf("unknown tool: %v", err)
	}
	if _, ok := m.Tool("mcp__other__echo"); ok {
		t.Error("a tool of a server mcp.json does not have")
	}
	if got := m.States(); got[0].State != tools.MCPRunning {
		t.Errorf("after tool errors: %+v", got)
	}
}

// A server's annotations are its own claims: without trust_annotations,
// every tool of it changes things and reaches outside, whatever they say.
func TestMCPAnnotationsNeedTrust(t *testing.T) {
	t.Parallel()
	trusted := mcptest.Command(t, "trusted", nil)
	trusted.TrustAnnotations = true
	m, _ := startMCP(t, mcptest.Command(t, "t", nil), trusted)
	for _, server := range []string{"t", "trusted"} {
		for _, tool := range m.Tools(server) {
			annotated := tool.Name == tools.MCPName(server, "echo") || tool.Name == tools.MCPName(server, "pid") || tool.Name == tools.MCPName(server, "env")
			want := annotated && server == "trusted"
			if tool.ReadOnly != want || tool.ClosedWorld != want {
				t.Errorf("%s: read-only %v, closed-world %v; want %v", tool.Name, tool.ReadOnly, tool.ClosedWorld, want)
			}
		}
	}
}

func TestMCPOverHTTP(t *testing.T) {
	t.Parallel()
	h := mcptest.Handler()
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m, _ := startMCP(t, tools.MCPServer{Name: "web", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer tok-42"}})
	if got := m.States(); got[0].State != tools.MCPRunning || got[0].Tools != 4 {
		t.Fatalf("states %+v", got)
	}
	if out, err := callMCP(t, m, "mcp__web__add_note", `{"text": "buy milk"}`); out != "noted: buy milk" || err != nil {
		t.Errorf("add_note: %q %v", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) == 0 || auth[0] != "Bearer tok-42" {
		t.Errorf("headers: %v", auth)
	}
}

// A server that dies gives tool errors naming it, is started again with
// backoff, and never stops its caller; its env's values stay out of the
// log even when it prints them.
func TestMCPRestartsADeadServer(t *testing.T) {
	t.Parallel()
	down := filepath.Join(t.TempDir(), "down")
	const secret = "sk-live-SECRET-1234"
	m, logs := startMCP(t, mcptest.Command(t, "t", map[string]string{mcptest.DownEnv: down, mcptest.SecretEnv: secret}))
	out, err := callMCP(t, m, "mcp__t__pid", `{}`)
	pid, _ := strconv.Atoi(out)
	if err != nil || pid == 0 {
		t.Fatalf("pid: %q %v", out, err)
	}
	os.WriteFile(down, nil, 0o644) // it cannot start again until the file goes
	start := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	waitState(t, m, "t", tools.MCPRestarting)
	_, err = callMCP(t, m, "mcp__t__echo", `{"text": "x"}`)
	if err == nil || !strings.Contains(err.Error(), `mcp server "t" is not running`) {
		t.Errorf("a dead server's tool: %v", err)
	}
	if got := m.States()[0]; got.Tools != 4 {
		t.Errorf("a dead server's tools are still listed, to answer why: %+v", got)
	}
	os.Remove(down)
	waitState(t, m, "t", tools.MCPRunning)
	if out, err := callMCP(t, m, "mcp__t__echo", `{"text": "back"}`); out != "back" || err != nil {
		t.Errorf("after the restart: %q %v", out, err)
	}
	log := logs.String()
	// The first retry comes within a second, the next ones later.
	if !strings.Contains(log, "retry_in=500ms") || time.Since(start) > 15*time.Second {
		t.Errorf("backoff: %s", log)
	}
	if strings.Contains(log, secret) || !strings.Contains(log, "[redacted]") {
		t.Errorf("the server's secret reached the log, or its stderr was not logged:\n%s", log)
	}
}

// A tool's answer reaches the model as the tool gave it. What mcp.json
// marks as secret (a key named for one, a value from such a variable) stays
// out of the tool's errors and the log; every other env value stays in.
func TestMCPSecretsStayOutOfErrorsAndLogs(t *testing.T) {
	t.Parallel()
	const (
		token  = "ghp-SECRET-from-a-variable" // ${GITHUB_TOKEN}, under a plain key
		apiKey = "SECRET-under-API_KEY-5678"
	)
	child := mcptest.Command(t, "t", nil)
	env := map[string]string{"GIT_AUTHOR_NAME": "superego", "MODE": "production", "DATA": "/srv/data", "API_KEY": apiKey, "GH": "${GITHUB_TOKEN}"}
	maps.Copy(env, child.Env)
	file, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"t": map[string]any{"command": child.Command, "env": env}}})
	servers, err := tools.ParseMCP(file, func(k string) string { return map[string]string{"GITHUB_TOKEN": token}[k] })
	if err != nil {
		t.Fatal(err)
	}
	m, logs := startMCP(t, servers...)
	text := "superego production /srv/data " + token + " " + apiKey
	redacted := "superego production /srv/data [redacted] [redacted]"

	if out, err := callMCP(t, m, "mcp__t__echo", `{"text": "`+text+`"}`); out != text || err != nil {
		t.Errorf("the result: %q %v, want it as the tool gave it", out, err)
	}
	if _, err := callMCP(t, m, "mcp__t__echo", `{"text": "`+text+`", "fail": true}`); err == nil || err.Error() != redacted {
		t.Errorf("the error: %v, want %q", err, redacted)
	}
	// The server wrote the text to its standard error: its end is logged
	// when the server dies.
	out, _ := callMCP(t, m, "mcp__t__pid", `{}`)
	pid, _ := strconv.Atoi(out)
	syscall.Kill(pid, syscall.SIGKILL)
	waitState(t, m, "t", tools.MCPRestarting)
	waitState(t, m, "t", tools.MCPRunning)
	if log := logs.String(); !strings.Contains(log, redacted) || strings.Contains(log, token) || strings.Contains(log, apiKey) {
		t.Errorf("the log keeps every value but the secrets, which it redacts:\n%s", log)
	}
}

// A server that cannot start at all leaves its caller running, and its
// tools answer why.
func TestMCPServerThatNeverStarts(t *testing.T) {
	t.Parallel()
	down := filepath.Join(t.TempDir(), "down")
	os.WriteFile(down, nil, 0o644)
	m, logs := startMCP(t, mcptest.Command(t, "t", map[string]string{mcptest.DownEnv: down}))
	if got := m.States()[0]; got.State != tools.MCPRestarting || got.Tools != 0 {
		t.Errorf("state %+v", got)
	}
	if len(m.Tools("t")) != 0 {
		t.Error("a server that never ran has tools")
	}
	if _, err := callMCP(t, m, "mcp__t__echo", `{}`); err == nil || !strings.Contains(err.Error(), `mcp server "t" is not running (start: `) {
		t.Errorf("tool error: %v", err)
	}
	if !strings.Contains(logs.String(), "kept down by") {
		t.Errorf("its standard error is not in the log:\n%s", logs)
	}
}

// The MCP filesystem server from npm, which Claude Code users run: its
// annotations, trusted, say which tools are read-only. .ci/run installs it and names
// its program in SUPEREGO_MCP_NODE.
func TestNodeFilesystemServer(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("SUPEREGO_MCP_NODE")
	if bin == "" {
		t.Skip("SUPEREGO_MCP_NODE is not set: install @modelcontextprotocol/server-filesystem from npm and name its mcp-server-filesystem, as .ci/run does")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("from node"), 0o644)
	m, _ := startMCP(t, tools.MCPServer{Name: "fs", Command: bin, Args: []string{dir}, TrustAnnotations: true})
	readOnly := map[string]bool{}
	for _, tool := range m.Tools("fs") {
		readOnly[tool.Name] = tool.ReadOnly
	}
	if !readOnly["mcp__fs__read_text_file"] || !readOnly["mcp__fs__list_directory"] || readOnly["mcp__fs__write_file"] || readOnly["mcp__fs__move_file"] {
		t.Errorf("read-only: %v", readOnly)
	}
	args, _ := json.Marshal(map[string]string{"path": filepath.Join(dir, "a.txt")})
	if out, err := callMCP(t, m, "mcp__fs__read_text_file", string(args)); out != "from node" || err != nil {
		t.Errorf("read_text_file: %q %v", out, err)
	}
	if _, err := callMCP(t, m, "mcp__fs__read_text_file", `{"path": "/etc/passwd"}`); err == nil {
		t.Error("a path outside its directories: no error")
	}
}

// A call that gets no answer in time fails as a tool error, and the
// server is started again before the next call: that call reaches a new
// process, and the one that hung is gone.
func TestMCPHungCallRestartsTheServer(t *testing.T) {
	t.Parallel()
	m, logs := startMCP(t, mcptest.Command(t, "t", map[string]string{"SUPEREGO_TEST_MCP_SERVER": "actions", mcptest.LogEnv: filepath.Join(t.TempDir(), "calls.log")}))
	pid := func() int {
		out, err := callMCP(t, m, "mcp__t__pid", `{}`)
		n, _ := strconv.Atoi(out)
		if err != nil || n == 0 {
			t.Fatalf("pid: %q %v", out, err)
		}
		return n
	}
	before := pid()
	hold, _ := m.Tool("mcp__t__hold")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := hold.Call(ctx, json.RawMessage(`{"text": "never answered"}`)); err == nil ||
		err.Error() != `mcp server "t": hold gave no answer in the time a call may take; the server is started again` {
		t.Fatalf("the hung call: %v", err)
	}
	after := pid()
	if after == before || !mcptest.Gone(before) {
		t.Errorf("the next call reached process %d (the hung one was %d, gone: %v)", after, before, mcptest.Gone(before))
	}
	if got := m.States()[0]; got.State != tools.MCPRunning || got.Tools != 9 {
		t.Errorf("after the restart: %+v", got)
	}
	if !strings.Contains(logs.String(), "mcp server started again: a call got no answer in time") {
		t.Errorf("the restart is not logged:\n%s", logs)
	}
}

// What a server started ends with it: when it dies (its group is killed
// before it is started again) and when it is stopped, whether or not it
// ends itself once its input closes (the server here does; its child does
// not).
func TestMCPServerGroupEndsWithIt(t *testing.T) {
	t.Parallel()
	pids := filepath.Join(t.TempDir(), "pids")
	m, _ := startMCP(t, mcptest.Command(t, "t", map[string]string{mcptest.PidsEnv: pids}))
	server, child := mcptest.Pids(t, pids)
	syscall.Kill(server, syscall.SIGKILL)
	waitState(t, m, "t", tools.MCPRestarting)
	waitState(t, m, "t", tools.MCPRunning)
	mcptest.WaitGone(t, 5*time.Second, server, child)
	server, child = mcptest.Pids(t, pids)
	m.Close()
	mcptest.WaitGone(t, 5*time.Second, server, child)
}
