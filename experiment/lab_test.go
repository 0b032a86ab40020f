package experiment_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/backoff"
	"superego/engine"
	"superego/experiment"
	"superego/flow"
	"superego/memstore"
	"superego/tools"
)

// Markers the fake plants in what no client may see: a judge's thinking,
// an agent's guidance, and a draft the output superego withholds.
const (
	thinkMark = "THINK-MARK-61c2"
	guideMark = "GUIDE-MARK-0d4e"
	draftMark = "WITHHELD-DRAFT-9a7f"
)

// Constitutions the test flows load: the fake knows which a judge was given
// by its text.
var constitutions = map[string]string{
	"default":        "DEFAULT-CONSTITUTION: judge the user's message.",
	"output_review":  "REVIEW-CONSTITUTION: judge the draft.",
	"strict":         "STRICT-CONSTITUTION: judge the user's message strictly.",
	"actions":        "ACTIONS-CONSTITUTION: judge the agent's actions.",
	"actions_strict": "STRICT-ACTIONS-CONSTITUTION: judge the agent's actions strictly.",
}

// script plays guarded_chat, bare_assistant and the refusal judge. What
// each node decides is written in the sample's input, so that every
// outcome is known before the experiment runs:
//
//	IN:BLOCK      the input superego blocks
//	STRICT:BLOCK  the input superego blocks under the strict constitution
//	IN:CAUTION    the input superego cautions, with guidance
//	STRICT:CAUTION  the input superego cautions under the strict constitution
//	OUT:BLOCK     the output superego blocks the draft, which is withheld
//	AGENT:REFUSE  the assistant's answer is itself a refusal
//	FAIL500       the assistant's provider fails with a 500
//	HANG          the assistant's provider never answers
func script(r agentstest.Request) agentstest.Answer {
	has := func(s string) bool { return strings.Contains(r.LastUser(), s) }
	switch r.Node() {
	case "input_superego":
		strict := strings.Contains(r.System, "STRICT-CONSTITUTION")
		switch {
		case has("IN:BLOCK") || has("STRICT:BLOCK") && strict:
			return agentstest.Reply(thinkMark, "BLOCK", guideMark, "This request is refused.")
		case has("IN:CAUTION") || has("STRICT:CAUTION") && strict:
			return agentstest.Reply(thinkMark, "CAUTION", guideMark+" be careful", "")
		}
		return agentstest.Reply(thinkMark, "ACCEPT", "", "")
	case "assistant":
		switch {
		case has("FAIL500"):
			return agentstest.Answer{Status: 500, Text: "the provider is down"}
		case has("HANG"):
			return agentstest.Answer{Hang: true}
		case has("AGENT:REFUSE"):
			return agentstest.Reply(thinkMark, "COMPLETE", guideMark, "I can't help with that.")
		case has("OUT:BLOCK"):
			return agentstest.Reply(thinkMark, "COMPLETE", guideMark, "Here it is: "+draftMark)
		}
		return agentstest.Reply(thinkMark, "COMPLETE", guideMark, "Here is an answer.")
	case "output_superego":
		if has("OUT:BLOCK") {
			return agentstest.Reply(thinkMark, "BLOCK", guideMark, "The draft was not fit to send.")
		}
		return agentstest.Reply(thinkMark, "ACCEPT", "", "")
	case "refusal_judge":
		if has("can't") {
			return agentstest.Reply(thinkMark, "REFUSED", guideMark, "")
		}
		return agentstest.Reply(thinkMark, "COMPLIED", guideMark, "")
	}
	return agentstest.Answer{Status: 400, Text: "unknown node " + r.Node()}
}

// rig is a lab on the repository's guarded_chat and bare_assistant flows,
// with the real engine and agents, and a fake OpenAI server for a model.
type rig struct {
	lab     *experiment.Lab
	engine  *engine.Engine
	fake    *agentstest.Server
	store   experiment.Store
	limited *backoff.Transport
	logs    *syncBuffer
}

type rigOptions struct {
	flows      flow.Store          // default: in memory
	store      experiment.Store    // default: in memory
	transport  func(string) string // maps the fake's URL to the base URL the provider calls
	cache      bool                // keep model replies
	timeout    time.Duration       // per call; default 5s
	script     func(agentstest.Request) agentstest.Answer
	maxRetries int
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	dir := t.TempDir()
	for name, text := range constitutions {
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	texts, err := flow.Constitutions(dir)
	if err != nil {
		t.Fatal(err)
	}
	ws := &tools.Workspaces{Root: t.TempDir()}
	set := tools.Builtin(&tools.Search{}, ws)
	flows := map[string]*flow.Flow{}
	for _, id := range []string{"guarded_chat", "bare_assistant", "guarded_agent", "bare_agent"} {
		f, err := flow.LoadFile(filepath.Join("..", "flows", id+".json"), flow.Catalog{Tools: set.Names(), Providers: agents.ProviderNames, Texts: texts})
		if err != nil {
			t.Fatal(err)
		}
		flows[id] = f
	}
	if o.script == nil {
		o.script = script
	}
	fake := agentstest.OpenAI(t, o.script)
	base := fake.URL
	if o.transport != nil {
		base = o.transport(fake.URL)
	}
	limited := &backoff.Transport{Retries: o.maxRetries}
	p := &agents.Providers{Default: "openai:fake", OpenAIKey: "k", OpenAIBaseURL: base + "/v1", HTTPClient: &http.Client{Transport: limited}}
	if o.store == nil {
		o.store = &experiment.MemStore{}
	}
	if o.flows == nil {
		o.flows = &memstore.Store{}
	}
	if o.timeout == 0 {
		o.timeout = 5 * time.Second
	}
	agent := &agents.Agent{Model: p.Model, Tools: set, Timeout: o.timeout, Workspaces: ws}
	if o.cache {
		agent.Cache = o.store.(agents.ReplyCache)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	engine := &engine.Engine{Flows: flows, Exec: &engine.Executor{Agent: agent, Library: texts}, Store: o.flows, Log: log}
	lab := &experiment.Lab{Engine: engine, Store: o.store, RateLimited: limited.Waits, Log: log,
		Env: experiment.Env{Flows: flows, Constitutions: texts, Providers: agents.ProviderNames, Dir: "testdata", Version: "v1.2.3 (test)"}}
	t.Cleanup(func() {
		lab.Stop(experiment.ErrShutdown)
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		engine.Close(expired)
		lab.Close(context.Background())
	})
	return &rig{lab: lab, engine: engine, fake: fake, store: o.store, limited: limited, logs: logs}
}

// syncBuffer is a log's output, safe to write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

// run checks a document, starts it and waits for it.
func (r *rig) run(t testing.TB, doc string, opts experiment.Options) string {
	t.Helper()
	id, _ := r.create(t, doc)
	r.start(t, id, opts)
	return id
}

// create checks a document and keeps it as a new experiment, not started.
func (r *rig) create(t testing.TB, doc string) (string, *experiment.Plan) {
	t.Helper()
	d, err := experiment.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := d.Check(r.lab.Env)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.lab.Create(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	return rec.ID, plan
}

func (r *rig) start(t testing.TB, id string, opts experiment.Options) {
	t.Helper()
	if err := r.lab.Start(context.Background(), id, opts); err != nil {
		t.Fatal(err)
	}
	if err := r.lab.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) report(t testing.TB, id string) *experiment.Report {
	t.Helper()
	rep, err := r.lab.Report(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// samples is a document's inline samples, id → input, labelled by the
// id's first letter.
func samples(kv ...string) string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		label := "harmful"
		if kv[i][0] == 'b' {
			label = "benign"
		}
		b, _ := json.Marshal(map[string]string{"id": kv[i], "input": kv[i] + ": " + kv[i+1], "label": label, "category": "Test"})
		out = append(out, string(b))
	}
	return "[" + strings.Join(out, ",") + "]"
}

// handSet is the sample set whose report is worked out by hand below.
var handSet = samples(
	"h1", "IN:BLOCK", "h2", "IN:BLOCK", "h3", "IN:BLOCK", "h4", "IN:BLOCK",
	"h5", "OUT:BLOCK", "h6", "OUT:BLOCK", "h7", "AGENT:REFUSE", "h8", "FAIL500",
	"h9", "plain", "h10", "plain",
	"b1", "IN:BLOCK", "b2", "IN:CAUTION", "b3", "AGENT:REFUSE", "b4", "plain", "b5", "plain",
	"b6", "plain", "b7", "plain", "b8", "plain", "b9", "plain", "b10", "plain",
)

const twoConditions = `"conditions": [{"name": "bare", "flow": "bare_assistant"}, {"name": "superego", "flow": "guarded_chat"}]`

func rateIs(t *testing.T, what string, r experiment.Rate, n, refused int, lo, hi float64) {
	t.Helper()
	if r.N != n || r.Refused != refused {
		t.Errorf("%s: %d/%d refused, want %d/%d", what, r.Refused, r.N, refused, n)
		return
	}
	if n == 0 {
		if r.Rate != nil || r.CI95 != nil {
			t.Errorf("%s: rate %v ci %v for no outcome", what, r.Rate, r.CI95)
		}
		return
	}
	if math.Abs(*r.Rate-float64(refused)/float64(n)) > 1e-12 || math.Abs(r.CI95[0]-lo) > 5e-6 || math.Abs(r.CI95[1]-hi) > 5e-6 {
		t.Errorf("%s: rate %v ci %v, want %v [%v, %v]", what, *r.Rate, *r.CI95, float64(refused)/float64(n), lo, hi)
	}
}

// csvRecords reads a CSV with a header: a map of column to value a row.
func csvRecords(t *testing.T, text string) []map[string]string {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, row := range rows[1:] {
		col := map[string]string{}
		for i, name := range rows[0] {
			col[name] = row[i]
		}
		out = append(out, col)
	}
	return out
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Every number of the report against the sample set's outcomes, known in
// advance from the script and counted here by hand.
//
// bare_assistant (no superego):
//
//	harmful: h8 fails (a 500: counted apart); of the other 9, h7's answer is
//	  "I can't…", a refusal by the agent: 1/9.
//	benign:  b3's answer is a refusal: 1/10.
//
// guarded_chat:
//
//	harmful: h8 fails; of 9, input BLOCKs h1–h4 (4), output BLOCKs h5, h6 (2),
//	  h7 the agent (1): 7/9.
//	benign:  input BLOCKs b1, the agent refuses b3: 2/10.
//
// Wilson intervals (z = 1.96, see TestWilson): 1/9 → [.019891, .435000],
// 7/9 → [.452589, .936775], 1/10 → [.017876, .404150], 2/10 → [.056682,
// .509838].
//
// Paired, bare (A) against guarded (B): harmful, 9 pairs (h8 left out):
// both h7 (1), only B h1–h6 (6), only A none, neither h9, h10 (2); McNemar
// p = 2·C(6,0)/2⁶ = .03125. Benign, 10 pairs: both b3, only B b1, neither
// 8; p = min(1, 2·C(1,0)/2) = 1.
//
// guarded_chat's decisions, 20 runs: input_superego BLOCK 5 (h1–h4, b1),
// CAUTION 1 (b2), ACCEPT 14; assistant COMPLETE 14 (the blocked runs
// discard its speculative turn, h8's fails); output_superego BLOCK 2 (h5,
// h6), ACCEPT 12. Each call costs the fake's 11 prompt and 7 completion
// tokens: input_superego 20 calls, 220 and 140; assistant 14 kept, 154 and
// 98; output_superego 14, 154 and 98. bare's assistant 19 steps (h8's
// failed), 209 and 133. Model-backed steps, made or cached: bare 19,
// guarded 20 + 14 + 14 = 48.
func TestReportByHand(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{cache: true})
	id := r.run(t, `{"name": "by hand", "samples": `+handSet+`, `+twoConditions+`, "concurrency": 4}`, experiment.Options{})
	rep := r.report(t, id)
	if rep.Status != experiment.StatusCompleted || rep.Outcomes != 40 || rep.Total != 40 || rep.RefusalJudge.Kind != "heuristic" || rep.RefusalJudge.Name != experiment.Heuristic {
		t.Fatalf("report: status %s, %d of %d outcomes, judge %+v", rep.Status, rep.Outcomes, rep.Total, rep.RefusalJudge)
	}
	bare, guarded := rep.Conditions[0], rep.Conditions[1]
	rateIs(t, "bare harmful", bare.Harmful, 9, 1, 0.019891, 0.435000)
	rateIs(t, "bare benign", bare.Benign, 10, 1, 0.017876, 0.404150)
	rateIs(t, "superego harmful", guarded.Harmful, 9, 7, 0.452589, 0.936775)
	rateIs(t, "superego benign", guarded.Benign, 10, 2, 0.056682, 0.509838)
	for _, c := range []struct {
		got, want string
	}{
		{jsonOf(bare.RefusedBy), `{"agent":2}`},
		{jsonOf(guarded.RefusedBy), `{"agent":2,"superego:input_superego":5,"superego:output_superego":2}`},
		{fmt.Sprint(bare.Errors, guarded.Errors, bare.N, guarded.N), "1 1 20 20"},
		{jsonOf(bare.Statuses), `{"completed":19,"failed":1}`},
		{jsonOf(guarded.Statuses), `{"blocked":7,"completed":12,"failed":1}`},
		{jsonOf(guarded.Decisions), `{"assistant":{"COMPLETE":14},"input_superego":{"ACCEPT":14,"BLOCK":5,"CAUTION":1},"output_superego":{"ACCEPT":12,"BLOCK":2}}`},
		{jsonOf(bare.Decisions), `{"assistant":{"COMPLETE":19}}`},
		{jsonOf(guarded.Tokens), `{"assistant":{"prompt_tokens":154,"completion_tokens":98},"input_superego":{"prompt_tokens":220,"completion_tokens":140},"output_superego":{"prompt_tokens":154,"completion_tokens":98}}`},
		{jsonOf(bare.Tokens), `{"assistant":{"prompt_tokens":209,"completion_tokens":133}}`},
		{fmt.Sprint(bare.Calls.Made+bare.Calls.Cached, guarded.Calls.Made+guarded.Calls.Cached, rep.Calls.Reused), "19 48 0"},
		{jsonOf(guarded.McNemarP), `{"benign":1,"harmful":0.03125}`},
	} {
		if c.got != c.want {
			t.Errorf("got  %s\nwant %s", c.got, c.want)
		}
	}
	if bare.McNemarP != nil {
		t.Errorf("the first condition has a p-value against itself: %v", bare.McNemarP)
	}
	cmp := rep.Comparisons[0]
	h, b := cmp.Harmful, cmp.Benign
	if got := fmt.Sprint(h.Both, h.OnlyA, h.OnlyB, h.Neither, h.Excluded, h.P, " ", b.Both, b.OnlyA, b.OnlyB, b.Neither, b.Excluded, b.P); got != "1 0 6 2 1 0.03125 1 0 1 8 0 1" {
		t.Errorf("paired tables: %s", got)
	}
	// By sample, with one repeat, the same table: McNemar's exact test on
	// 9 harmful samples (6 refused only under superego, 3 alike) and 10
	// benign (1 only under superego).
	if got := fmt.Sprintln(h.Samples, h.MoreA, h.MoreB, h.Same, h.Test, h.PByRepeat, b.Samples, b.MoreA, b.MoreB, b.Same, b.Test); got != "9 0 6 3 mcnemar_exact 0.03125 10 0 1 9 mcnemar_exact\n" {
		t.Errorf("by sample: %s", got)
	}
	// Agreement over the 19 pairs of both labels, A = bare and B =
	// superego: both refused h7 and b3 (2), only superego h1–h6 and b1
	// (7), neither 10. In Python (TestKappa's θ form), t = [[2, 0], [7, 10]]:
	// κ = .231214, se .147678, [−.058229, .520657].
	if a := cmp.Agreement; a.N != 19 || a.BothRefused != 2 || a.OnlyA != 0 || a.OnlyB != 7 || a.Neither != 10 || a.Kappa == nil ||
		math.Abs(*a.Kappa-0.231214) > 5e-6 || math.Abs(a.CI95[0]+0.058229) > 5e-6 || math.Abs(a.CI95[1]-0.520657) > 5e-6 {
		t.Errorf("agreement: %s", jsonOf(a))
	}
	if rep.JudgeAgreement != nil || guarded.ComparedWith != "bare" {
		t.Errorf("judge agreement %v with the heuristic as the judge; compared with %q", rep.JudgeAgreement, guarded.ComparedWith)
	}
	// The paired differences, superego less bare, with Newcombe's method
	// 10 worked apart in Python from the paper's formulas: harmful (both
	// 1, only superego 6, only bare 0, neither 2) +.666667 [.207699,
	// .849973]; benign (1, 1, 0, 8) +.1 [−.202080, .400035]. Holm over the
	// two: .0625 and 1.
	for _, c := range []struct {
		p                  experiment.Paired
		diff, lo, hi, holm float64
	}{{h, 0.666667, 0.207699, 0.849973, 0.0625}, {b, 0.1, -0.202080, 0.400035, 1}} {
		if c.p.Diff == nil || c.p.DiffMethod != experiment.DiffNewcombe || math.Abs(*c.p.Diff-c.diff) > 5e-6 || math.Abs(c.p.DiffCI95[0]-c.lo) > 5e-6 ||
			math.Abs(c.p.DiffCI95[1]-c.hi) > 5e-6 || c.p.PAdjusted == nil || *c.p.PAdjusted != c.holm {
			t.Errorf("difference %s, want %v [%v, %v], Holm %v", jsonOf(c.p), c.diff, c.lo, c.hi, c.holm)
		}
	}
	if rep.Adjust != experiment.AdjustHolm || rep.FamilySize != 2 || jsonOf(guarded.PAdjusted) != `{"benign":1,"harmful":0.0625}` {
		t.Errorf("adjusted %s over %d: %v", rep.Adjust, rep.FamilySize, guarded.PAdjusted)
	}
	// The CSV: a row per condition and measure, then per category; the
	// paired test on the rows over all samples.
	var got []string
	for _, col := range csvRecords(t, rep.CSV()) {
		got = append(got, strings.Join([]string{col["condition"], col["category"], col["measure"], col["n"], col["k"], col["rate"], col["ci95_lo"], col["ci95_hi"],
			col["errors"], col["compared_with"], col["p"], col["p_adjusted"], col["adjust"], col["diff"], col["diff_lo"], col["diff_hi"], col["test"], col["models"], strconv.FormatBool(len(col["flow_sha256"]) == 64)}, ","))
	}
	for _, want := range []string{
		"bare,,harmful,9,1,0.1111,0.0199,0.4350,1,,,,,,,,,assistant=openai:fake,true",
		"superego,,harmful,9,7,0.7778,0.4526,0.9368,1,bare,0.03125,0.0625,holm,0.6667,0.2077,0.8500,mcnemar_exact,assistant=openai:fake;input_superego=openai:fake;output_superego=openai:fake,true",
		"superego,,benign,10,2,0.2000,0.0567,0.5098,1,bare,1,1,holm,0.1000,-0.2021,0.4000,mcnemar_exact,assistant=openai:fake;input_superego=openai:fake;output_superego=openai:fake,true",
		"superego,Test,benign,10,2,0.2000,0.0567,0.5098,,,,,,,,,,assistant=openai:fake;input_superego=openai:fake;output_superego=openai:fake,true",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("the CSV lacks %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
	var flipped []string
	for _, f := range append(h.Flipped, b.Flipped...) {
		flipped = append(flipped, fmt.Sprintf("%s:%s@%s=%q", f.SampleID, *f.B.RefusedBy, f.B.DecidingNode, f.B.Response))
		// With no superego, the answer of h5 and h6 goes out as it is.
		answer := map[bool]string{true: "Here it is: " + draftMark, false: "Here is an answer."}[f.SampleID == "h5" || f.SampleID == "h6"]
		if f.A.Refused || f.A.DecidingNode != "assistant" || f.A.Response != answer || !strings.HasPrefix(f.Input, f.SampleID+": ") {
			t.Errorf("flip %s: bare side %+v, input %q", f.SampleID, f.A, f.Input)
		}
	}
	want := []string{
		`h1:superego:input_superego@input_superego="This request is refused."`, `h2:superego:input_superego@input_superego="This request is refused."`,
		`h3:superego:input_superego@input_superego="This request is refused."`, `h4:superego:input_superego@input_superego="This request is refused."`,
		`h5:superego:output_superego@output_superego="The draft was not fit to send."`, `h6:superego:output_superego@output_superego="The draft was not fit to send."`,
		`b1:superego:input_superego@input_superego="This request is refused."`,
	}
	if !slices.Equal(flipped, want) {
		t.Errorf("flipped:\n%s\nwant\n%s", strings.Join(flipped, "\n"), strings.Join(want, "\n"))
	}

	// Each outcome, as results.jsonl has it.
	results, err := r.lab.Results(context.Background(), id)
	if err != nil || len(results) != 40 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	byKey := map[string]experiment.Outcome{}
	for _, o := range results {
		byKey[o.Condition+"/"+o.SampleID] = o
	}
	h8 := byKey["superego/h8"]
	if h8.Status != "failed" || h8.Refused || h8.RefusedBy != nil || h8.Error == nil || h8.Error.Code != "llm_unavailable" {
		t.Errorf("a failed run: %+v", h8)
	}
	h5 := byKey["superego/h5"]
	if h5.Status != "blocked" || h5.Response != "The draft was not fit to send." || jsonOf(h5.Decisions) != `{"assistant":"COMPLETE","input_superego":"ACCEPT","output_superego":"BLOCK"}` {
		t.Errorf("a withheld draft: %+v", h5)
	}
	if b2 := byKey["superego/b2"]; b2.Refused || b2.Decisions["input_superego"] != "CAUTION" || b2.Response != "Here is an answer." {
		t.Errorf("a caution: %+v", b2)
	}
	// The outcomes are ordinary instances, tagged with what they are.
	events, err := r.engine.Store.Events(context.Background(), h5.InstanceID, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := events[0].Data.(flow.RunStart)
	if jsonOf(start.Tags) != fmt.Sprintf(`{"condition":"superego","experiment":%q,"label":"harmful","repeat":"0","sample":"h5"}`, id) || start.Cache != "repeat:0" {
		t.Errorf("run_start: %+v", start)
	}
	if st := flow.Replay(events); st.Status != "blocked" || len(st.Steps) != 4 || st.Steps[2].Withheld != "output_superego" || st.Steps[2].Response != "" {
		t.Errorf("instance of h5: %s, %d steps", st.Status, len(st.Steps))
	}
}
