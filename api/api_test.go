package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/engine"
	"superego/flow"
	"superego/flow/storetest"
	"superego/memstore"
	"superego/sqlite"
	"superego/tools"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

const (
	thinkingMarker = "THINKING-MARKER-5d1e"
	guidanceMarker = "GUIDANCE-MARKER-a09b"
)

var testFlows = map[string]string{
	"calc": `{"name": "Calc", "description": "guarded calculator", "graph": {"start": "input_superego", "nodes": {
	  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Judge arithmetic.",
	    "transitions": {"BLOCK": null, "ACCEPT": "calculator", "CAUTION": "calculator", "NEEDS_CLARIFICATION": "calculator"}},
	  "calculator": {"type": "inner_agent", "agent_id": "calculator", "system_prompt": "You calculate.", "tools": ["calculator"],
	    "transitions": {"COMPLETE": "output_superego", "NEEDS_TOOL": "self"}},
	  "output_superego": {"type": "superego", "agent_id": "output_superego", "constitution": "Review answers.",
	    "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`,
	"other": `{"name": "Other", "graph": {"start": "s", "nodes": {
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "transitions": {"ACCEPT": null}}}}}`,
}

// script plays the calc flow; the user's message picks the path. Every
// reply plants markers in the hidden fields.
func script(gate <-chan struct{}) func(agentstest.Request) agentstest.Answer {
	return func(r agentstest.Request) agentstest.Answer {
		user := r.LastUser()
		switch r.Node() {
		case "input_superego":
			switch {
			case strings.Contains(user, "bomb"):
				return agentstest.Reply(thinkingMarker+" harmful", "BLOCK", guidanceMarker, "I can't help with that.")
			case strings.Contains(user, "hang"):
				return agentstest.Answer{Hang: true}
			case strings.Contains(user, "broken model"):
				return agentstest.Answer{Status: 503, Text: "upstream overloaded"}
			case strings.Contains(user, "garbage"):
				return agentstest.Answer{Text: "   "}
			case strings.Contains(user, "something"):
				return agentstest.Reply(thinkingMarker, "NEEDS_CLARIFICATION", guidanceMarker+" ask", "Which numbers?")
			}
			return agentstest.Reply(thinkingMarker+" benign", "CAUTION", guidanceMarker+" verify", "Checking.")
		case "calculator":
			if strings.Contains(user, "echo") { // a provider error that quotes the request
				return agentstest.Answer{Status: 400, Text: "invalid request: " + user}
			}
			if gate != nil && strings.Contains(user, "slow") {
				<-gate
			}
			if res := r.ToolResults(); len(res) > 0 {
				return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, "The answer is "+res[0].Text+".")
			}
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_1", Name: "calculator", Args: `{"expression":"6*7"}`}}}
		case "output_superego", "s":
			return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
		}
		return agentstest.Answer{Status: 400, Text: "unknown node"}
	}
}

type fixture struct {
	url    string
	srv    *httptest.Server
	engine *engine.Engine
	model  *agentstest.Server
	logs   *syncBuffer
	ws     *tools.Workspaces
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newFixture(t testing.TB, gate <-chan struct{}, maxRuns int) *fixture {
	return newFixtureOn(t, &memstore.Store{}, gate, maxRuns)
}

func newFixtureOn(t testing.TB, store flow.Store, gate <-chan struct{}, maxRuns int) *fixture {
	t.Helper()
	model := agentstest.OpenAI(t, script(gate))
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := newServer(t, store, p.Model, maxRuns)
	f.model = model
	return f
}

// stores are the stores the durability tests run on.
var stores = map[string]func(testing.TB) flow.Store{
	"memory": func(testing.TB) flow.Store { return &memstore.Store{} },
	"sqlite": func(t testing.TB) flow.Store {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "superego.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	},
}

// newServer serves the test flows with models from resolve.
func newServer(t testing.TB, store flow.Store, resolve func(string) (agents.Model, error), maxRuns int) *fixture {
	t.Helper()
	return serveFlows(t, testFlows, store, resolve, maxRuns)
}

// serveFlows serves flow definitions (id → JSON) with models from resolve;
// they may name the shipped constitutions.
func serveFlows(t testing.TB, defs map[string]string, store flow.Store, resolve func(string) (agents.Model, error), maxRuns int) *fixture {
	t.Helper()
	return serveWith(t, defs, store, resolve, maxRuns, nil)
}

// serveWith serves flows as serveFlows does, with settings of the server's
// own.
func serveWith(t testing.TB, defs map[string]string, store flow.Store, resolve func(string) (agents.Model, error), maxRuns int, set func(*api.Server)) *fixture {
	t.Helper()
	ws := &tools.Workspaces{Root: t.TempDir()}
	toolset := tools.Set{"calculator": tools.Calculator()}
	maps.Copy(toolset, ws.Tools())
	texts, err := flow.Constitutions("../constitutions")
	if err != nil {
		t.Fatal(err)
	}
	flows := map[string]*flow.Flow{}
	for id, def := range defs {
		d, err := flow.Parse([]byte(def), flow.Catalog{Tools: toolset.Names(), Texts: texts})
		if err != nil {
			t.Fatal(err)
		}
		flows[id] = &flow.Flow{ID: id, Def: d}
	}
	if _, bench := t.(*testing.B); !bench { // a benchmark measures the server, not the check
		store = storetest.Frozen(t, store)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	engine := &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: &agents.Agent{Model: resolve, Tools: toolset, Timeout: 2 * time.Second, Workspaces: ws}},
		Store: store, MaxRuns: maxRuns, Log: log}
	s := &api.Server{Engine: engine, Workspaces: ws, Model: "openai:gpt-test", AdminToken: "admin-secret", Log: log,
		Refused: []flow.Refused{{ID: "broken", Errors: []string{`graph.start: unknown node "x"`}}}}
	if set != nil {
		set(s)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		engine.Close(expired)
	})
	return &fixture{url: srv.URL, srv: srv, engine: engine, logs: logs, ws: ws}
}

type sseEvent struct {
	ID, Name, Data string
}

// readSSE parses an event stream until it ends.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.Name = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.Data = line[6:]
		}
	}
	return out
}

// do sends a request; a body goes as JSON.
func (f *fixture) do(t testing.TB, method, path, body string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	uuidRe      = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timestampRe = regexp.MustCompile(`"(timestamp|created_at|updated_at)":"[^"]+"`)
	latencyRe   = regexp.MustCompile(`,"latency_ms":\d+`)
)

// normalize replaces what changes from run to run.
func normalize(s string) string {
	ids := map[string]string{}
	s = uuidRe.ReplaceAllStringFunc(s, func(id string) string {
		if ids[id] == "" {
			ids[id] = "<uuid-" + string(rune('A'+len(ids))) + ">"
		}
		return ids[id]
	})
	s = timestampRe.ReplaceAllString(s, `"$1":"<time>"`)
	return latencyRe.ReplaceAllString(s, "")
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./api -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file; got:\n%s", name, got)
	}
}

// noLeak fails if any client-visible bytes hold a hidden marker.
func noLeak(t *testing.T, where, s string) {
	t.Helper()
	for _, m := range []string{thinkingMarker, guidanceMarker} {
		if strings.Contains(s, m) {
			t.Errorf("%s leaks %s:\n%s", where, m, s)
		}
	}
}

func TestExecuteStreamsGoldenTranscripts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	cases := []struct{ golden, input string }{
		{"calc_completed.sse", "What is 6*7?"},
		{"calc_blocked.sse", "How do I build a bomb?"},
		{"calc_llm_unavailable.sse", "broken model"},
		{"calc_llm_bad_output.sse", "garbage"},
	}
	for _, c := range cases {
		t.Run(c.golden, func(t *testing.T) {
			in, _ := json.Marshal(map[string]string{"flow_id": "calc", "input": c.input})
			resp := f.do(t, "POST", "/flow/execute", string(in))
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			raw := body(t, resp)
			noLeak(t, "POST /flow/execute", raw)
			golden(t, c.golden, normalize(raw))
		})
	}
	noLeak(t, "the server's log", f.logs.String())
}

func TestPartialOutputsAddUpToTheResponse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	events := readSSE(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`).Body)
	deltas := map[string]string{}
	responses := map[string]string{}
	for _, e := range events {
		switch e.Name {
		case "partial_output":
			var p flow.Partial
			json.Unmarshal([]byte(e.Data), &p)
			deltas[p.StepID] += p.Delta
		case "complete_step":
			var s flow.Step
			json.Unmarshal([]byte(e.Data), &s)
			responses[s.StepID] = s.Response
		}
	}
	if len(deltas) == 0 {
		t.Fatal("no partial outputs")
	}
	for id, d := range deltas {
		if d != responses[id] {
			t.Errorf("step %s: partials %q, response %q", id, d, responses[id])
		}
	}
}

func TestNoOutputPathLeaksHiddenFields(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) { testNoLeaks(t, newFixtureOn(t, open(t), nil, 0)) })
	}
}

func testNoLeaks(t *testing.T, f *fixture) {
	var seen strings.Builder
	check := func(where string, resp *http.Response) string {
		b := body(t, resp)
		noLeak(t, where, b)
		seen.WriteString(b)
		return b
	}
	stream := check("POST /flow/execute (SSE)", f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`))
	id := uuidRe.FindString(stream)
	check("POST /flow/execute (JSON)", f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`, "Accept", "application/json"))
	check("GET /flow/execute", f.do(t, "GET", "/flow/execute?flow_id=calc&input=6*7", ""))
	check("clarification", f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "compute something", "instance_id": "`+id+`"}`))
	check("failed run", f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "broken model"}`))
	echoed := check("provider error quoting the request", f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "echo 6*7"}`))
	if !strings.Contains(echoed, `invalid request: echo 6*7\n\nGuidance from input_superego (hidden from the user):\n[hidden]`) {
		t.Errorf("the provider's error is not shown, redacted:\n%s", echoed)
	}
	check("GET /flow/instances/{id}", f.do(t, "GET", "/flow/instances/"+id, ""))
	check("GET /flow/instances", f.do(t, "GET", "/flow/instances", ""))
	check("GET /flow/instances/{id}/stream", f.do(t, "GET", "/flow/instances/"+id+"/stream?after=0", ""))
	check("GET /flow/instances/{id}/stream with Last-Event-ID", f.do(t, "GET", "/flow/instances/"+id+"/stream", "", "Last-Event-ID", "3"))
	check("GET /flow/calc", f.do(t, "GET", "/flow/calc", ""))
	check("GET /flows", f.do(t, "GET", "/flows", ""))
	check("research view without a token", f.do(t, "GET", "/flow/instances/"+id+"?include_hidden=true", ""))
	check("research view with a wrong token", f.do(t, "GET", "/flow/instances/"+id+"?include_hidden=true", "", "Authorization", "Bearer wrong"))
	noLeak(t, "the server's log", f.logs.String())

	// The markers were really there: in the next node's prompt, and in the
	// research view with the admin token.
	carried := false
	for _, r := range f.model.Requests() {
		if r.Node() == "calculator" && strings.Contains(r.LastUser(), guidanceMarker) {
			carried = true
		}
	}
	if !carried {
		t.Error("the superego's agent_guidance never reached the calculator's prompt")
	}
	research := body(t, f.do(t, "GET", "/flow/instances/"+id+"?include_hidden=true", "", "Authorization", "Bearer admin-secret"))
	if !strings.Contains(research, thinkingMarker) || !strings.Contains(research, guidanceMarker) {
		t.Errorf("research view lacks the hidden fields:\n%s", research)
	}
	if !strings.Contains(seen.String(), "Which numbers?") || !strings.Contains(seen.String(), "The answer is 42.") {
		t.Error("the visible responses are missing: the leak checks looked at the wrong bytes")
	}
}

func TestJSONVariant(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	var res struct {
		InstanceID string      `json:"instance_id"`
		Status     string      `json:"status"`
		Response   string      `json:"response"`
		Steps      []flow.Step `json:"steps"`
		Error      *flow.ErrorData
	}
	resp := f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`, "Accept", "application/json")
	if err := json.Unmarshal([]byte(body(t, resp)), &res); err != nil || resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode, err)
	}
	if res.Status != "completed" || res.Response != "The answer is 42." || len(res.Steps) != 5 || res.InstanceID == "" {
		t.Errorf("result %+v", res)
	}
	resp = f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "broken model"}`, "Accept", "application/json")
	res.Error = nil
	if err := json.Unmarshal([]byte(body(t, resp)), &res); err != nil || resp.StatusCode != 200 || res.Status != "failed" || res.Error == nil || res.Error.Code != "llm_unavailable" {
		t.Errorf("failed run: %d %+v", resp.StatusCode, res)
	}
}

func TestClarificationContinuesTheInstance(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	events := readSSE(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "compute something"}`).Body)
	var done flow.Done
	json.Unmarshal([]byte(events[len(events)-1].Data), &done)
	lastID, _ := strconv.Atoi(events[len(events)-1].ID)
	if done.Status != "awaiting_input" || done.Response != "Which numbers?" {
		t.Fatalf("done %+v", done)
	}
	events = readSSE(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "6 and 7, multiplied", "instance_id": "`+done.InstanceID+`"}`).Body)
	json.Unmarshal([]byte(events[len(events)-1].Data), &done)
	if done.Status != "completed" || done.Response != "The answer is 42." {
		t.Fatalf("resumed run: done %+v", done)
	}
	if events[0].ID != strconv.Itoa(lastID+1) {
		t.Errorf("second run's events start at id %s; want the instance's sequence to continue at %d", events[0].ID, lastID+1)
	}
	var inst struct {
		Status string      `json:"status"`
		Steps  []flow.Step `json:"steps"`
	}
	json.Unmarshal([]byte(body(t, f.do(t, "GET", "/flow/instances/"+done.InstanceID, ""))), &inst)
	// user, superego's question; user's answer, resumed at the calculator
	// (tool call, answer), output superego.
	if inst.Status != "completed" || len(inst.Steps) != 6 || inst.Steps[2].StepID != "3" || inst.Steps[2].Response != "6 and 7, multiplied" || inst.Steps[3].Node != "calculator" {
		t.Errorf("instance %s with %d steps", inst.Status, len(inst.Steps))
	}
}

func TestClientDisconnectDoesNotStopTheRun(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			gate := make(chan struct{})
			testDisconnect(t, newFixtureOn(t, open(t), gate, 0), gate)
		})
	}
}

// testDisconnect: a client hangs up after the first event; the run goes on;
// a second client resumes with Last-Event-ID and gets every later event
// exactly once, ending with done.
func testDisconnect(t *testing.T, f *fixture, gate chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/flow/execute", strings.NewReader(`{"flow_id": "calc", "input": "slow 6*7"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	var id, lastID string
	for id == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "id: ") {
			lastID = strings.TrimSpace(line[4:])
		}
		id = uuidRe.FindString(line)
	}
	cancel()
	resp.Body.Close()
	if lastID != "1" {
		t.Fatalf("first event has id %s", lastID)
	}
	close(gate) // the calculator answers only after the client is gone

	// Two clients pick up after the first event and watch the same run.
	var wg sync.WaitGroup
	got := make([][]sseEvent, 2)
	for i := range got {
		wg.Go(func() {
			got[i] = readSSE(t, f.do(t, "GET", "/flow/instances/"+id+"/stream", "", "Last-Event-ID", lastID).Body)
		})
	}
	wg.Wait()
	for i, events := range got {
		if len(events) == 0 || events[len(events)-1].Name != "done" || !strings.Contains(events[len(events)-1].Data, `"status":"completed"`) {
			t.Fatalf("client %d: resumed stream %+v", i, events)
		}
		seen := map[string]bool{}
		var steps []string
		for _, e := range events {
			n, _ := strconv.Atoi(e.ID)
			if seen[e.ID] || n <= 1 {
				t.Errorf("client %d: event %s delivered again after Last-Event-ID 1", i, e.ID)
			}
			seen[e.ID] = true
			if e.Name == "complete_step" {
				var s flow.Step
				json.Unmarshal([]byte(e.Data), &s)
				steps = append(steps, s.StepID)
			}
		}
		if strings.Join(steps, " ") != "1 2 3 4 5" {
			t.Errorf("client %d: steps %v", i, steps)
		}
	}
	// Nothing after done: 204, which tells EventSource to stop.
	last := got[0][len(got[0])-1].ID
	resp = f.do(t, "GET", "/flow/instances/"+id+"/stream", "", "Last-Event-ID", last)
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("stream after done: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

// EventSource reconnects with Last-Event-ID when a stream closes; that must
// resume the instance's stream, never run the flow again.
func TestEventSourceReconnectDoesNotRerun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	events := readSSE(t, f.do(t, "GET", "/flow/execute?flow_id=calc&input=6*7", "").Body)
	var done flow.Done
	json.Unmarshal([]byte(events[len(events)-1].Data), &done)
	calls := len(f.model.Requests())

	resp := f.do(t, "GET", "/flow/execute?flow_id=calc&input=6*7", "", "Last-Event-ID", events[len(events)-1].ID)
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("reconnect without an instance: %d", resp.StatusCode)
	}
	resp.Body.Close()
	resumed := readSSE(t, f.do(t, "GET", "/flow/execute?flow_id=calc&input=6*7&instance_id="+done.InstanceID, "", "Last-Event-ID", "5").Body)
	if len(resumed) == 0 || resumed[0].ID != "6" || resumed[len(resumed)-1].Name != "done" {
		t.Errorf("reconnect with an instance resumed %+v", resumed)
	}
	if got := len(f.model.Requests()); got != calls {
		t.Errorf("a reconnect made %d more model calls", got-calls)
	}
}

func TestErrors(t *testing.T) {
	f := newFixture(t, nil, 2)
	// One run held in progress, to be busy.
	hung := f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "hang"}`)
	br := bufio.NewReader(hung.Body)
	first, _ := br.ReadString('\n')
	for !strings.HasPrefix(first, "data:") {
		first, _ = br.ReadString('\n')
	}
	busy := uuidRe.FindString(first)
	defer hung.Body.Close()

	big := `{"flow_id": "calc", "input": "` + strings.Repeat("x", api.MaxBody) + `"}`
	cases := []struct {
		name, method, path, body, ctype string
		header                          []string
		status                          int
		want                            string
	}{
		{"not JSON", "POST", "/flow/execute", `flow_id=calc`, "application/x-www-form-urlencoded", nil, 415,
			`{"error":{"code":"unsupported_media_type","message":"send the body as JSON with Content-Type: application/json"}}`},
		{"malformed JSON", "POST", "/flow/execute", `{"flow_id": "calc",`, "application/json", nil, 400,
			`{"error":{"code":"invalid_json","message":"the body is not a valid JSON object: unexpected EOF"}}`},
		{"unknown field", "POST", "/flow/execute", `{"flow_id": "calc", "input": "x", "flowid": "y"}`, "application/json", nil, 400,
			`{"error":{"code":"invalid_json","message":"the body is not a valid JSON object: unknown field \"flowid\""}}`},
		{"missing fields", "POST", "/flow/execute", `{}`, "application/json", nil, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"flow_id","message":"is required"},{"field":"input","message":"is required, unless objective is given"}]}}`},
		{"wrong type", "POST", "/flow/execute", `{"flow_id": "calc", "input": 5}`, "application/json", nil, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"input","message":"must be a JSON string"}]}}`},
		{"bad instance id", "POST", "/flow/execute", `{"flow_id": "calc", "input": "x", "instance_id": "abc"}`, "application/json", nil, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"instance_id","message":"must be an instance id (a UUID)"}]}}`},
		{"body too large", "POST", "/flow/execute", big, "application/json", nil, 413,
			`{"error":{"code":"body_too_large","message":"the body is over 1048576 bytes"}}`},
		{"unknown flow", "POST", "/flow/execute", `{"flow_id": "nope", "input": "x"}`, "application/json", nil, 404,
			`{"error":{"code":"not_found","message":"flow \"nope\": not found"}}`},
		{"unknown instance", "POST", "/flow/execute", `{"flow_id": "calc", "input": "x", "instance_id": "00000000-0000-4000-8000-000000000000"}`, "application/json", nil, 404,
			`{"error":{"code":"not_found","message":"instance \"00000000-0000-4000-8000-000000000000\": not found"}}`},
		{"instance of another flow", "POST", "/flow/execute", `{"flow_id": "other", "input": "x", "instance_id": "` + busy + `"}`, "application/json", nil, 400,
			`{"error":{"code":"invalid_request","message":"instance ` + busy + ` runs flow \"calc\", not \"other\": invalid"}}`},
		{"run in progress", "POST", "/flow/execute", `{"flow_id": "calc", "input": "x", "instance_id": "` + busy + `"}`, "application/json", nil, 409,
			`{"error":{"code":"run_in_progress","message":"instance ` + busy + `: a run is in progress on this instance"}}`},
		{"GET execute without input", "GET", "/flow/execute?flow_id=calc", "", "", nil, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"input","message":"is required, unless objective is given"}]}}`},
		{"unknown flow definition", "GET", "/flow/nope", "", "", nil, 404, `{"error":{"code":"not_found","message":"flow \"nope\": not found"}}`},
		{"create instance of unknown flow", "POST", "/flow/instances", `{"flow_id": "nope"}`, "application/json", nil, 404,
			`{"error":{"code":"not_found","message":"flow \"nope\": not found"}}`},
		{"list with bad limit", "GET", "/flow/instances?limit=lots", "", "", nil, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"limit","message":"must be a whole number"}]}}`},
		{"list with zero limit", "GET", "/flow/instances?limit=0", "", "", nil, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"limit","message":"must be at least 1"}]}}`},
		{"unknown instance history", "GET", "/flow/instances/nope", "", "", nil, 404, `{"error":{"code":"not_found","message":"instance \"nope\": not found"}}`},
		{"research view without token", "GET", "/flow/instances/" + busy + "?include_hidden=true", "", "", nil, 403,
			`{"error":{"code":"forbidden","message":"the research view needs Authorization: Bearer with the server's SUPEREGO_ADMIN_TOKEN"}}`},
		{"stream with bad Last-Event-ID", "GET", "/flow/instances/" + busy + "/stream", "", "", []string{"Last-Event-ID", "x"}, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"after","message":"must be an event id: a whole number, 0 or more"}]}}`},
		{"stream of unknown instance", "GET", "/flow/instances/nope/stream", "", "", nil, 404, `{"error":{"code":"not_found","message":"instance \"nope\": not found"}}`},
		{"cancel unknown instance", "POST", "/flow/instances/nope/cancel", "", "", nil, 404, `{"error":{"code":"not_found","message":"instance \"nope\": not found"}}`},
		{"unknown route", "GET", "/nope", "", "", nil, 404, `{"error":{"code":"not_found","message":"no route GET /nope"}}`},
		{"wrong method", "DELETE", "/flows", "", "", nil, 405, `{"error":{"code":"method_not_allowed","message":"DELETE is not allowed on /flows"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, f.url+c.path, strings.NewReader(c.body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			for i := 0; i+1 < len(c.header); i += 2 {
				req.Header.Set(c.header[i], c.header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.TrimSpace(body(t, resp))
			if resp.StatusCode != c.status || got != c.want || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("got %d %s\nwant %d %s", resp.StatusCode, got, c.status, c.want)
			}
		})
	}

	// A second run fills the limit of two; a third gets 429.
	second := f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "hang"}`)
	defer second.Body.Close()
	bufio.NewReader(second.Body).ReadString('\n')
	resp := f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "x"}`)
	if got := strings.TrimSpace(body(t, resp)); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" ||
		got != `{"error":{"code":"too_many_runs","message":"2 runs in flight: too many runs in flight"}}` {
		t.Errorf("over the limit: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), got)
	}

	// Cancelling the hung run ends its stream with done: cancelled.
	resp = f.do(t, "POST", "/flow/instances/"+busy+"/cancel", "")
	if got := strings.TrimSpace(body(t, resp)); resp.StatusCode != 202 || got != `{"instance_id":"`+busy+`","status":"cancelling"}` {
		t.Errorf("cancel: %d %s", resp.StatusCode, got)
	}
	events := readSSE(t, br)
	if last := events[len(events)-1]; last.Name != "done" || !strings.Contains(last.Data, `"status":"cancelled"`) {
		t.Errorf("cancelled stream ends with %+v", last)
	}
	resp = f.do(t, "POST", "/flow/instances/"+busy+"/cancel", "")
	if got := strings.TrimSpace(body(t, resp)); resp.StatusCode != 409 || !strings.Contains(got, `"code":"no_run_in_progress"`) {
		t.Errorf("cancel with no run: %d %s", resp.StatusCode, got)
	}

	// Shutting down: new runs get 503.
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	f.engine.Close(expired)
	resp = f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "x"}`)
	if got := strings.TrimSpace(body(t, resp)); resp.StatusCode != 503 || got != `{"error":{"code":"shutting_down","message":"the server is shutting down"}}` {
		t.Errorf("after shutdown: %d %s", resp.StatusCode, got)
	}
	if got := body(t, f.do(t, "GET", "/healthz", "")); !strings.Contains(got, `"status":"shutting_down"`) {
		t.Errorf("healthz while shutting down: %s", got)
	}
}

func TestTimeoutEndsTheRunWithAnErrorEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	f.engine.Exec.Agent.(*agents.Agent).Timeout = 100 * time.Millisecond
	events := readSSE(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "hang"}`).Body)
	n := len(events)
	if n < 2 || events[n-2].Name != "error" || !strings.Contains(events[n-2].Data, `"code":"timeout"`) || !strings.Contains(events[n-1].Data, `"status":"failed"`) {
		t.Errorf("events end %+v", events[max(0, n-2):])
	}
}

func TestListingsAndHealth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, 0)
	resp := f.do(t, "POST", "/flow/instances", `{"flow_id": "other"}`)
	var created struct {
		InstanceID string `json:"instance_id"`
	}
	json.Unmarshal([]byte(body(t, resp)), &created)
	if resp.StatusCode != 201 || created.InstanceID == "" {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	body(t, f.do(t, "POST", "/flow/execute", `{"flow_id": "calc", "input": "What is 6*7?"}`))
	got := normalize(body(t, f.do(t, "GET", "/flow/instances", "")))
	golden(t, "instances.json", got)
	if got := normalize(body(t, f.do(t, "GET", "/flow/instances?flow_id=other&limit=1", ""))); !strings.Contains(got, `"status":"new"`) || strings.Count(got, "instance_id") != 1 {
		t.Errorf("filtered list: %s", got)
	}
	golden(t, "flows.json", body(t, f.do(t, "GET", "/flows", "")))
	golden(t, "healthz.json", body(t, f.do(t, "GET", "/healthz", "")))
}
