package api_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/engine"
	"superego/experiment"
	"superego/flow"
	"superego/memstore"
	"superego/tools"
)

// A withheld draft's marker, for experiments.
const expDraftMarker = "EXP-DRAFT-3b71"

// labScript plays guarded_chat and bare_assistant as the sample's input
// says: IN:BLOCK, OUT:BLOCK, AGENT:REFUSE, GATE (the assistant waits for
// the gate), STRICT:BLOCK (blocked under the privacy constitution).
type labScript struct {
	gate    chan struct{}
	entered chan string
	once    sync.Once
}

func (s *labScript) play(r agentstest.Request) agentstest.Answer {
	has := func(m string) bool { return strings.Contains(r.LastUser(), m) }
	switch r.Node() {
	case "input_superego":
		if has("IN:BLOCK") || has("STRICT:BLOCK") && strings.Contains(r.System, "privacy") {
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "This request is refused.")
		}
		return agentstest.Reply(thinkingMarker, "ACCEPT", "", "")
	case "assistant":
		if has("GATE") {
			s.entered <- r.LastUser()
			<-s.gate
		}
		switch {
		case has("AGENT:REFUSE"):
			return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, "I can't help with that.")
		case has("OUT:BLOCK"):
			return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, "Draft: "+expDraftMarker)
		}
		return agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, "Here is an answer.")
	case "output_superego":
		if has("OUT:BLOCK") {
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "The draft was not fit to send.")
		}
		return agentstest.Reply(thinkingMarker, "ACCEPT", "", "")
	}
	return agentstest.Answer{Status: 400, Text: "unknown node"}
}

func (s *labScript) open() { s.once.Do(func() { close(s.gate) }) }

type labFixture struct {
	*fixture
	lab    *experiment.Lab
	script *labScript
}

// newLabFixture serves the repository's guarded_chat and bare_assistant,
// with their constitutions, and a lab for experiments whose datasets are
// in dir.
func newLabFixture(t *testing.T, dir string) *labFixture {
	t.Helper()
	s := &labScript{gate: make(chan struct{}), entered: make(chan string, 100)}
	t.Cleanup(s.open)
	fake := agentstest.OpenAI(t, s.play)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: fake.URL + "/v1"}
	texts, err := flow.Constitutions("../constitutions")
	if err != nil {
		t.Fatal(err)
	}
	ws := &tools.Workspaces{Root: t.TempDir()}
	set := tools.Builtin(&tools.Search{}, ws)
	flows := map[string]*flow.Flow{}
	for _, id := range []string{"guarded_chat", "bare_assistant"} {
		f, err := flow.LoadFile("../flows/"+id+".json", flow.Catalog{Tools: set.Names(), Providers: agents.ProviderNames, Texts: texts})
		if err != nil {
			t.Fatal(err)
		}
		flows[id] = f
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := &experiment.MemStore{}
	engine := &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: &agents.Agent{Model: p.Model, Tools: set, Timeout: 5 * time.Second, Workspaces: ws, Cache: store}},
		Store: &memstore.Store{}, Log: log}
	lab := &experiment.Lab{Engine: engine, Store: store, Log: log,
		Env: experiment.Env{Flows: flows, Constitutions: texts, Providers: agents.ProviderNames, Dir: dir, Confined: true}}
	srv := httptest.NewServer((&api.Server{Engine: engine, Experiments: lab, Log: log, AdminToken: "admin-secret"}).Handler())
	t.Cleanup(func() {
		srv.Close()
		lab.Stop(experiment.ErrShutdown)
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		engine.Close(expired)
		lab.Close(context.Background())
	})
	return &labFixture{fixture: &fixture{url: srv.URL, srv: srv, engine: engine, model: fake, logs: logs}, lab: lab, script: s}
}

// events reads an experiment's event stream to its done event.
func (f *labFixture) events(t *testing.T, id string) []sseEvent {
	t.Helper()
	resp := f.do(t, "GET", "/experiments/"+id+"/events", "")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return readSSE(t, resp.Body)
}

func sampleJSON(kv ...string) string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		label := "harmful"
		if kv[i][0] == 'b' {
			label = "benign"
		}
		out = append(out, fmt.Sprintf(`{"id": %q, "input": %q, "label": %q}`, kv[i], kv[i]+": "+kv[i+1], label))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// An experiment over HTTP: posted, followed as SSE, read back as its
// view, its results, its report, a comparison; replayed; its outcomes
// ordinary instances. Nothing hidden is in any answer, event or log line.
func TestExperimentsOverHTTP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "set.jsonl"), []byte(strings.Join([]string{
		`{"id": "h1", "input": "h1: IN:BLOCK", "label": "harmful"}`,
		`{"id": "h2", "input": "h2: OUT:BLOCK", "label": "harmful"}`,
		`{"id": "h3", "input": "h3: STRICT:BLOCK", "label": "harmful"}`,
		`{"id": "b1", "input": "b1: AGENT:REFUSE", "label": "benign"}`,
		`{"id": "b2", "input": "b2: plain", "label": "benign"}`}, "\n")), 0o644)
	f := newLabFixture(t, dir)
	var seen strings.Builder
	read := func(resp *http.Response) string {
		b := body(t, resp)
		seen.WriteString(b)
		return b
	}
	resp := f.do(t, "POST", "/experiments", `{"name": "http", "dataset": "set.jsonl", "conditions": [{"name": "superego", "flow": "guarded_chat"}]}`)
	if resp.StatusCode != 201 {
		t.Fatalf("POST /experiments: %d %s", resp.StatusCode, read(resp))
	}
	var created struct {
		ID string `json:"experiment_id"`
	}
	json.Unmarshal([]byte(read(resp)), &created)
	id := created.ID

	events := f.events(t, id)
	names := map[string]int{}
	for _, e := range events {
		names[e.Name]++
		seen.WriteString(e.Data)
	}
	last := events[len(events)-1]
	if last.Name != "done" || !strings.Contains(last.Data, `"status":"completed"`) || !strings.Contains(last.Data, `"done":5,"total":5,"errors":0`) || events[0].Name != "progress" {
		t.Errorf("events: %v, last %+v", names, last)
	}

	var view struct {
		Status   string              `json:"status"`
		Progress experiment.Progress `json:"progress"`
		Report   experiment.Report   `json:"report"`
	}
	json.Unmarshal([]byte(read(f.do(t, "GET", "/experiments/"+id, ""))), &view)
	c := view.Report.Conditions[0]
	// h1 (input) and h2 (output) blocked, h3 not under default: 2/3;
	// b1's answer a refusal: 1/2.
	if view.Status != "completed" || view.Progress.Done != 5 || c.Harmful.Refused != 2 || c.Harmful.N != 3 || c.Benign.Refused != 1 || c.Benign.N != 2 {
		t.Errorf("view: %s %+v %+v %+v", view.Status, view.Progress, c.Harmful, c.Benign)
	}
	resp = f.do(t, "GET", "/experiments/"+id+"/results.jsonl", "")
	results := read(resp)
	if resp.Header.Get("Content-Type") != "application/x-ndjson" || strings.Count(results, "\n") != 5 || !strings.Contains(results, `"sample_id":"h2"`) {
		t.Errorf("results.jsonl: %s\n%s", resp.Header.Get("Content-Type"), results)
	}
	resp = f.do(t, "GET", "/experiments/"+id+"/results.csv", "")
	rows, err := csv.NewReader(strings.NewReader(read(resp))).ReadAll()
	if err != nil || resp.Header.Get("Content-Type") != "text/csv; charset=utf-8" || len(rows) != 6 || !slices.Contains(rows[0], "decision.input_superego") {
		t.Errorf("results.csv: %s %v %v", resp.Header.Get("Content-Type"), err, rows)
	}
	for _, c := range []struct {
		adjust string
		status int
	}{{"bh", 200}, {"none", 200}, {"bonferroni", 400}} {
		resp := f.do(t, "GET", "/experiments/"+id+"/report.json?adjust="+c.adjust, "")
		if b := read(resp); resp.StatusCode != c.status || c.status == 200 && !strings.Contains(b, `"adjust": "`+c.adjust+`"`) {
			t.Errorf("report.json?adjust=%s: %d %.300s", c.adjust, resp.StatusCode, b)
		}
	}
	// The report in each of its forms, as the command line writes them.
	for _, c := range []struct{ format, ctype, want string }{
		{"md", "text/markdown; charset=utf-8", "| superego | guarded_chat | 2/3 66.7% [20.8%, 93.9%] |"},
		{"json", "application/json", `"harmful": {` + "\n" + `        "n": 3,` + "\n" + `        "k": 2,` + "\n" + `        "refused": 2,`},
		{"csv", "text/csv; charset=utf-8", ",superego,guarded_chat,input_superego=default;output_superego=output_review,assistant=openai:gpt-test;input_superego=openai:gpt-test;output_superego=openai:gpt-test,,,,harmful,3,2,0.6667,"},
		{"tex", "application/x-tex; charset=utf-8", `superego & harmful & 2/3 & 66.7 [20.8, 93.9] &  &  &  \\`},
		{"svg", "image/svg+xml", `<title>superego, harmful refused: 2/3, 66.7% [20.8%, 93.9%]</title>`},
	} {
		resp := f.do(t, "GET", "/experiments/"+id+"/report."+c.format, "")
		if b := read(resp); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.ctype || resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(b, c.want) {
			t.Errorf("report.%s: %d %s, lacks %q:\n%s", c.format, resp.StatusCode, resp.Header.Get("Content-Type"), c.want, b)
		}
	}
	if list := read(f.do(t, "GET", "/experiments", "")); !strings.Contains(list, `"experiment_id":"`+id+`","name":"http","status":"completed"`) {
		t.Errorf("list: %s", list)
	}

	// Outcomes are ordinary instances: listed, and streamed with their tags.
	var o experiment.Outcome
	for _, line := range strings.Split(strings.TrimSpace(results), "\n") {
		json.Unmarshal([]byte(line), &o)
		if o.SampleID == "h2" {
			break
		}
	}
	stream := read(f.do(t, "GET", "/flow/instances/"+o.InstanceID+"/stream?after=0", ""))
	if !strings.Contains(stream, `"tags":{"condition":"superego","experiment":"`+id+`","label":"harmful","repeat":"0","sample":"h2"}`) || !strings.Contains(stream, `"withheld":"output_superego"`) {
		t.Errorf("the outcome's instance:\n%s", stream)
	}
	if list := read(f.do(t, "GET", "/flow/instances?flow_id=guarded_chat", "")); strings.Count(list, `"instance_id"`) != 5 {
		t.Errorf("instances listed: %s", list)
	}

	// A replay under the privacy constitution: h3 is now blocked.
	resp = f.do(t, "POST", "/experiments/"+id+"/replay", `{"from": "superego", "as": "privacy", "constitutions": {"input_superego": "privacy"}}`)
	if b := read(resp); resp.StatusCode != 202 || b != `{"ask":["input_superego"],"condition":"privacy","experiment_id":"`+id+`","replays":"superego"}`+"\n" {
		t.Errorf("replay: %d %s", resp.StatusCode, b)
	}
	for _, e := range f.events(t, id) {
		seen.WriteString(e.Data)
	}
	var cmp experiment.Comparison
	json.Unmarshal([]byte(read(f.do(t, "GET", "/experiments/"+id+"/compare?a=superego&b=privacy", ""))), &cmp)
	if cmp.Harmful.OnlyB != 1 || len(cmp.Harmful.Flipped) != 1 || cmp.Harmful.Flipped[0].SampleID != "h3" || cmp.Harmful.Flipped[0].B.DecidingNode != "input_superego" || cmp.Harmful.P != 1 {
		t.Errorf("compare: %+v", cmp)
	}

	// What cannot be done is said, with the status that says why.
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/experiments/nope", "", 404, `{"error":{"code":"not_found","message":"experiment \"nope\": not found"}}`},
		{"GET", "/experiments/nope/report.svg", "", 404, `{"error":{"code":"not_found","message":"experiment \"nope\": not found"}}`},
		{"GET", "/experiments/" + id + "/report.pdf", "", 404, `{"error":{"code":"not_found","message":"no report.pdf: the report is report.md, .json, .csv, .tex or .svg: not found"}}`},
		{"GET", "/experiments/" + id + "/report.latex", "", 404, `{"error":{"code":"not_found","message":"no report.latex: the report is report.md, .json, .csv, .tex or .svg: not found"}}`},
		{"POST", "/experiments/" + id + "/cancel", "", 409, `{"error":{"code":"no_run_in_progress","message":"experiment ` + id + ` is completed: no run in progress"}}`},
		{"GET", "/experiments/" + id + "/compare?a=superego", "", 400, `{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"b","message":"is required: a condition's name"}]}}`},
		{"GET", "/experiments/" + id + "/compare?a=superego&b=nope", "", 404, `{"error":{"code":"not_found","message":"experiment ` + id + ` has no condition \"nope\" (its conditions: [superego privacy]): not found"}}`},
		{"POST", "/experiments", `{"dataset": "../set.jsonl", "conditions": [{"name": "a", "flow": "nope"}]}`, 400,
			`{"error":{"code":"invalid_request","message":"invalid experiment: dataset: \"../set.jsonl\" is not a path inside the experiments directory; conditions[0].flow: unknown flow \"nope\" (flows: bare_assistant, guarded_chat)","fields":[{"field":"dataset","message":"\"../set.jsonl\" is not a path inside the experiments directory"},{"field":"conditions[0].flow","message":"unknown flow \"nope\" (flows: bare_assistant, guarded_chat)"}]}}`},
		{"POST", "/experiments", `{"samples": ` + sampleJSON("h1", "x") + `, "conditions": [{"name": "a", "flow": "guarded_chat"}], "repeats": "two"}`, 400,
			`{"error":{"code":"invalid_request","message":"invalid request","fields":[{"field":"repeats","message":"must be a JSON int"}]}}`},
		{"POST", "/experiments/" + id + "/replay", `{"from": "superego", "as": "privacy", "constitutions": {"input_superego": "privacy"}}`, 400,
			`{"error":{"code":"invalid_request","message":"invalid experiment: as: \"privacy\" names a condition of the experiment already","fields":[{"field":"as","message":"\"privacy\" names a condition of the experiment already"}]}}`},
	} {
		resp := f.do(t, c.method, c.path, c.body)
		if b := strings.TrimSpace(read(resp)); resp.StatusCode != c.status || b != c.want {
			t.Errorf("%s %s: %d %s\nwant %d %s", c.method, c.path, resp.StatusCode, b, c.status, c.want)
		}
	}
	if list := read(f.do(t, "GET", "/experiments", "")); strings.Count(list, `"experiment_id"`) != 1 {
		t.Errorf("a refused document made an experiment: %s", list)
	}

	seen.WriteString(f.logs.String())
	for _, m := range []string{thinkingMarker, guidanceMarker, expDraftMarker} {
		if i := strings.Index(seen.String(), m); i >= 0 {
			t.Errorf("%s leaks: …%s…", m, seen.String()[max(0, i-200):min(seen.Len(), i+50)])
		}
	}
}

// An experiment's instances carry their tags, in the listing and on their
// own, and the listing picks them out by experiment and by tag. Resuming
// the finished experiment is no conflict: 200, and it says it is done.
func TestExperimentInstancesByTag(t *testing.T) {
	t.Parallel()
	f := newLabFixture(t, t.TempDir())
	start := func(samples string) string {
		resp := f.do(t, "POST", "/experiments", `{"samples": `+samples+`, "conditions": [{"name": "bare", "flow": "bare_assistant"}, {"name": "superego", "flow": "guarded_chat"}]}`)
		var created struct {
			ID string `json:"experiment_id"`
		}
		json.Unmarshal([]byte(body(t, resp)), &created)
		f.events(t, created.ID) // to its end
		return created.ID
	}
	id, other := start(sampleJSON("h1", "plain", "b1", "plain")), start(sampleJSON("h1", "plain"))
	f.do(t, "POST", "/flow/instances", `{"flow_id": "bare_assistant"}`).Body.Close()

	list := func(query string) []flow.Summary {
		resp := f.do(t, "GET", "/flow/instances"+query, "")
		var out []flow.Summary
		if err := json.Unmarshal([]byte(body(t, resp)), &out); resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET /flow/instances%s: %d %v", query, resp.StatusCode, err)
		}
		return out
	}
	if all := list(""); len(all) != 7 {
		t.Errorf("every instance: %d, want 7", len(all))
	}
	mine := list("?experiment=" + id)
	var tags []string
	for _, s := range mine {
		tags = append(tags, fmt.Sprint(s.Tags))
	}
	slices.Sort(tags)
	want := []string{
		"map[condition:bare experiment:" + id + " label:benign repeat:0 sample:b1]",
		"map[condition:bare experiment:" + id + " label:harmful repeat:0 sample:h1]",
		"map[condition:superego experiment:" + id + " label:benign repeat:0 sample:b1]",
		"map[condition:superego experiment:" + id + " label:harmful repeat:0 sample:h1]",
	}
	if !slices.Equal(tags, want) {
		t.Errorf("?experiment=ID: %q\nwant %q", tags, want)
	}
	for query, n := range map[string]int{
		"?experiment=" + other: 2, "?experiment=" + id + "&tag=condition:superego": 2, "?tag=experiment:" + id + "&tag=sample:b1&tag=condition:bare": 1,
		"?tag=label:harmful": 4, "?experiment=" + id + "&limit=1": 1, "?experiment=nope": 0, "?experiment=" + id + "&flow_id=guarded_chat": 2,
	} {
		if got := list(query); len(got) != n {
			t.Errorf("%s: %d instances, want %d", query, len(got), n)
		}
	}
	resp := f.do(t, "GET", "/flow/instances/"+mine[0].ID, "")
	var inst struct {
		Tags map[string]string `json:"tags"`
	}
	json.Unmarshal([]byte(body(t, resp)), &inst)
	if !maps.Equal(inst.Tags, mine[0].Tags) {
		t.Errorf("GET /flow/instances/{id}: tags %v, want %v", inst.Tags, mine[0].Tags)
	}
	resp = f.do(t, "GET", "/flow/instances?tag=condition&tag=a.b:c", "")
	if b := strings.TrimSpace(body(t, resp)); resp.StatusCode != 400 || !strings.Contains(b, `{"field":"tag","message":"\"condition\": want NAME:VALUE`) || !strings.Contains(b, `"\"a.b:c\": want`) {
		t.Errorf("bad tags: %d %s", resp.StatusCode, b)
	}

	resp = f.do(t, "POST", "/experiments/"+id+"/resume", "")
	if b := body(t, resp); resp.StatusCode != 200 || b != `{"experiment_id":"`+id+`","message":"already finished: nothing is left to run (retry_errors runs its failed outcomes again)","status":"completed"}`+"\n" {
		t.Errorf("resume a finished experiment: %d %s", resp.StatusCode, b)
	}
}

// Cancel over HTTP stops an experiment where it is; resume finishes it.
func TestExperimentCancelAndResumeOverHTTP(t *testing.T) {
	t.Parallel()
	f := newLabFixture(t, t.TempDir())
	resp := f.do(t, "POST", "/experiments", `{"samples": `+sampleJSON("h1", "GATE", "h2", "plain", "b1", "plain")+`, "conditions": [{"name": "bare", "flow": "bare_assistant"}], "concurrency": 1}`)
	var created struct {
		ID string `json:"experiment_id"`
	}
	json.Unmarshal([]byte(body(t, resp)), &created)
	<-f.script.entered
	resp = f.do(t, "POST", "/experiments/"+created.ID+"/cancel", "")
	if b := body(t, resp); resp.StatusCode != 202 || b != `{"experiment_id":"`+created.ID+`","status":"cancelled"}`+"\n" {
		t.Errorf("cancel: %d %s", resp.StatusCode, b)
	}
	if events := f.events(t, created.ID); events[len(events)-1].Data != `{"status":"cancelled","progress":{"done":0,"total":3,"errors":0,"rate":0,"eta_s":0,"rate_limited":0}}` {
		t.Errorf("events after cancel: %+v", events)
	}
	f.script.open()
	resp = f.do(t, "POST", "/experiments/"+created.ID+"/resume", "")
	if resp.StatusCode != 202 {
		t.Errorf("resume: %d %s", resp.StatusCode, body(t, resp))
	}
	events := f.events(t, created.ID)
	if last := events[len(events)-1]; last.Name != "done" || !strings.Contains(last.Data, `"status":"completed","progress":{"done":3,"total":3`) {
		t.Errorf("after resume: %+v", last)
	}
}
