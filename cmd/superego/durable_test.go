package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"superego/agents/agentstest"
	"superego/flow"
	"superego/internal/eventually"
	"superego/tools/mcptest"
)

// The test binary doubles as the superego binary: a child started with
// this variable runs main, so the tests below can kill a real server
// process without building one. It doubles as an MCP server too
// (mcptest.Command).
func TestMain(m *testing.M) {
	mcptest.Main()
	mcptest.ExitAtOnce()
	if os.Getenv("SUPEREGO_TEST_AS_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

const durableFlow = `{"name": "calc", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Judge.",
    "transitions": {"BLOCK": null, "ACCEPT": "calculator", "CAUTION": "calculator"}},
  "calculator": {"type": "inner_agent", "agent_id": "calculator", "system_prompt": "Calculate.", "tools": ["calculator"],
    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self"}},
  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review.",
    "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`

// gatedModel answers the calc flow; the calculator's answer after its tool
// call waits at the gate, so a test can hold a run at a known step.
type gatedModel struct {
	*agentstest.Server
	entered chan struct{} // a calculator call reached the gate
	mu      sync.Mutex
	gate    chan struct{}
}

func newGatedModel(t *testing.T) *gatedModel {
	g := &gatedModel{entered: make(chan struct{}, 10), gate: make(chan struct{})}
	g.Server = agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		switch r.Node() {
		case "input_superego":
			return agentstest.Reply("HIDDEN-THINKING", "CAUTION", "HIDDEN-GUIDANCE", "")
		case "calculator":
			if res := r.ToolResults(); len(res) > 0 {
				g.mu.Lock()
				gate := g.gate
				g.mu.Unlock()
				g.entered <- struct{}{}
				<-gate
				return agentstest.Reply("t", "COMPLETE", "g", "6*7 = "+res[0].Text)
			}
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_1", Name: "calculator", Args: `{"expression":"6*7"}`}}}
		}
		return agentstest.Reply("t", "ACCEPT", "g", "")
	})
	return g
}

func (g *gatedModel) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.gate:
	default:
		close(g.gate)
	}
}

type server struct {
	cmd  *exec.Cmd
	addr string
	logs *lockedBuffer // the child's stderr
	done chan error
}

var servingRe = regexp.MustCompile(`serving on http://(\S+)\.`)

// startServer runs the test binary as `superego serve` on dir's flows and
// database, and waits until it listens.
func startServer(t *testing.T, dir string, model *gatedModel, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--flows", filepath.Join(dir, "flows"), "--db", filepath.Join(dir, "superego.db")}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SUPEREGO_TEST_AS_MAIN=1", "OPENAI_API_KEY=k", "OPENAI_BASE_URL="+model.URL+"/v1", "SUPEREGO_MODEL=openai:gpt-test")
	return launch(t, cmd)
}

// launch starts a `superego serve` child and waits until it says where it
// listens; the child is killed when the test ends.
func launch(t *testing.T, cmd *exec.Cmd) *server {
	t.Helper()
	stdout, _ := cmd.StdoutPipe()
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, logs: logs, done: make(chan error, 1)}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
			s.addr = m[1]
			break
		}
	}
	if s.addr == "" {
		cmd.Process.Kill()
		t.Fatalf("server did not start:\n%s", logs)
	}
	go io.Copy(io.Discard, stdout)
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return s
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func writeFlows(t *testing.T) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "flows"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "flows", "calc.json"), []byte(durableFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startRun posts a run and returns its instance id once the run_start event
// arrives; the stream goes on being read, and dropped, in the background.
func startRun(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "calc", "input": "What is 6*7?"}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			var rs flow.RunStart
			json.Unmarshal([]byte(line[6:]), &rs)
			go func() { io.Copy(io.Discard, br); resp.Body.Close() }()
			return rs.InstanceID
		}
	}
}

type logEvent struct {
	id   string
	name string
	data string
}

// history reads an instance's whole event log from a server's stream route.
func history(t *testing.T, addr, id string) []logEvent {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/flow/instances/" + id + "/stream?after=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []logEvent
	var cur logEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
			out = append(out, cur)
		}
	}
	return out
}

// checkCompletedOnce checks a resumed run's log: it completed, every step is
// there once, in order, and the resumption is marked.
func checkCompletedOnce(t *testing.T, events []logEvent) {
	t.Helper()
	var steps, starts []string
	for _, e := range events {
		switch e.name {
		case "complete_step":
			var s flow.Step
			json.Unmarshal([]byte(e.data), &s)
			steps = append(steps, s.StepID+":"+s.AgentID+":"+s.Decision)
		case "run_start":
			starts = append(starts, e.data)
		}
		if strings.Contains(e.data, "HIDDEN-") {
			t.Errorf("event %s leaks a hidden field: %s", e.id, e.data)
		}
	}
	want := "1:user: 2:input_superego:CAUTION 3:calculator:NEEDS_TOOL 4:calculator:COMPLETE 5:output_superego:ACCEPT"
	if strings.Join(steps, " ") != want {
		t.Errorf("steps:\n %s\nwant\n %s", strings.Join(steps, " "), want)
	}
	if len(starts) != 2 || strings.Contains(starts[0], "resumed") || !strings.Contains(starts[1], `"resumed":true`) {
		t.Errorf("run_start events: %v", starts)
	}
	last := events[len(events)-1]
	if last.name != "done" || !strings.Contains(last.data, `"status":"completed","response":"6*7 = 42"`) {
		t.Errorf("last event %+v", last)
	}
	for i := 1; i < len(events); i++ {
		if fmt.Sprint(events[i].id) <= fmt.Sprint(events[i-1].id) && len(events[i].id) <= len(events[i-1].id) {
			t.Errorf("event ids not increasing: %s after %s", events[i].id, events[i-1].id)
		}
	}
}

func TestKillNineMidRunThenResume(t *testing.T) {
	t.Parallel()
	dir := writeFlows(t)
	model := newGatedModel(t)
	first := startServer(t, dir, model)
	id := startRun(t, first.addr)
	<-model.entered // steps 1-3 are recorded; the calculator's answer is pending
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	model.open()

	second := startServer(t, dir, model)
	events := history(t, second.addr, id)
	checkCompletedOnce(t, events)
	// Work not yet durable at the crash, never shown to a client, is done
	// again: at least the calculator's answer is asked for twice.
	if n := len(model.Requests()); n < 5 {
		t.Errorf("%d model calls: want the 4 of the run, plus what the crash undid", n)
	}
	if !strings.Contains(second.logs.String(), "resuming interrupted run") {
		t.Errorf("second server's log:\n%s", second.logs)
	}
	second.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-second.done; err != nil {
		t.Errorf("SIGTERM exit: %v", err)
	}
}

func TestSIGTERMRefusesNewRunsAndInterruptsAfterGrace(t *testing.T) {
	t.Parallel()
	dir := writeFlows(t)
	model := newGatedModel(t)
	first := startServer(t, dir, model, "--grace", "300ms")
	id := startRun(t, first.addr)
	<-model.entered
	first.cmd.Process.Signal(syscall.SIGTERM)
	// Until it exits, the server answers, but takes no new run.
	eventually.Holds(t, 10*time.Second, func() string {
		resp, err := http.Get("http://" + first.addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "shutting_down") {
			return "/healthz does not say shutting_down: " + string(b)
		}
		return ""
	})
	resp, err := http.Post("http://"+first.addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "calc", "input": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || strings.TrimSpace(string(b)) != `{"error":{"code":"shutting_down","message":"the server is shutting down"}}` {
		t.Errorf("during shutdown: %d %s", resp.StatusCode, b)
	}
	if err := <-first.done; err != nil {
		t.Errorf("exit after grace: %v\n%s", err, first.logs)
	}
	if !strings.Contains(first.logs.String(), "it resumes when the server starts again") {
		t.Errorf("shutdown log:\n%s", first.logs)
	}
	model.open()
	second := startServer(t, dir, model)
	checkCompletedOnce(t, history(t, second.addr, id))
}

func TestExport(t *testing.T) {
	t.Parallel()
	dir := writeFlows(t)
	model := newGatedModel(t)
	model.open()
	s := startServer(t, dir, model)
	id := startRun(t, s.addr)
	history(t, s.addr, id) // to the end of the run
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done

	db := env("SUPEREGO_DB", filepath.Join(dir, "superego.db"))
	code, out, errs := runCmd(t, db, "export")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("export: %d %q\n%s", code, errs, out)
	}
	var line struct {
		InstanceID string           `json:"instance_id"`
		Status     string           `json:"status"`
		Steps      []map[string]any `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &line); err != nil || line.InstanceID != id || line.Status != "completed" || len(line.Steps) != 5 {
		t.Errorf("export line %+v %v", line, err)
	}
	if strings.Contains(out, "HIDDEN-") || strings.Contains(out, `"thinking"`) {
		t.Errorf("export without --include-hidden leaks:\n%s", out)
	}
	_, full, _ := runCmd(t, db, "export", "--include-hidden")
	if !strings.Contains(full, `"thinking":"HIDDEN-THINKING"`) || !strings.Contains(full, `"agent_guidance":"HIDDEN-GUIDANCE"`) {
		t.Errorf("export --include-hidden lacks the hidden fields:\n%s", full)
	}
	for _, args := range [][]string{{"export", "--flow", "other"}, {"export", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)}} {
		if code, out, _ := runCmd(t, db, args...); code != 0 || out != "" {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
	if code, _, errs := runCmd(t, db, "export", "--since", "yesterday"); code != exitUsage || !strings.Contains(errs, `"yesterday" is not a date`) {
		t.Errorf("bad --since: %d %q", code, errs)
	}
}
