package experiment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"superego/agents/agentstest"
	"superego/experiment"
)

// heldUntil holds the assistant's replies until n input superego calls have
// come in: every guarded_chat run has then started, and with it its
// speculative assistant call (docs/gating.md), while every bare_assistant call for
// the same sample is still in flight. Without the sharing of calls in
// flight, each of those would be made twice.
func heldUntil(n int) func(agentstest.Request) agentstest.Answer {
	var mu sync.Mutex
	asked := 0
	open := make(chan struct{})
	return func(r agentstest.Request) agentstest.Answer {
		switch r.Node() {
		case "input_superego":
			mu.Lock()
			if asked++; asked == n {
				close(open)
			}
			mu.Unlock()
		case "assistant":
			a := script(r)
			a.Pause = open
			return a
		}
		return script(r)
	}
}

// fairRun runs samples through conditions at a concurrency, holding the
// assistant's replies until held input superego calls have come in (none:
// not held), and returns its outcomes, one line each without what varies
// from run to run (instances, latencies, and which condition's task made a
// shared call), its report, and the model requests it made.
func fairRun(t *testing.T, set, conditions string, concurrency, held int) ([]string, *experiment.Report, []agentstest.Request) {
	t.Helper()
	o := rigOptions{cache: true}
	if held > 0 {
		o.script = heldUntil(held)
	}
	r := newRig(t, o)
	id := r.run(t, `{"samples": `+set+`, `+conditions+`, "refusal_judge": {"model": "openai:judge"}, "concurrency": `+fmt.Sprint(concurrency)+`}`, experiment.Options{})
	results, err := r.lab.Results(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, o := range results {
		code := ""
		if o.Error != nil {
			code = o.Error.Code
		}
		lines = append(lines, fmt.Sprintf("%s/%s %s refused=%v by=%s %s %q tokens=%s error=%s", o.Condition, o.SampleID, o.Status, o.Refused,
			jsonOf(o.RefusedBy), jsonOf(o.Decisions), o.Response, jsonOf(o.Tokens), code))
	}
	return lines, r.report(t, id), r.fake.Requests()
}

func requestsByNode(reqs []agentstest.Request) string {
	by := map[string]int{}
	for _, r := range reqs {
		by[r.Node()]++
	}
	return jsonOf(by)
}

// Pairs are fair at any concurrency: a call that conditions make alike is
// made once, in flight as from the cache, so that guarded_chat's assistant
// answers what bare_assistant's did, and a comparison is of what the
// superegos decided. Three conditions ask the assistant the same thing;
// at concurrency 64 their 48 runs are all in flight at once, the
// assistant's replies held until both guarded conditions have asked their
// input superego, so that every assistant call of a sample is in flight
// while the others are made. No input superego blocks here: no run drops
// its part in a shared call (TestSharedCallOutlivesItsFirstTask, in
// agents, has that), so every count is exact.
//
// Counted by hand, over 16 samples: the assistant once per sample (16),
// and once more per sample a superego cautions (its guidance is in the
// call): b2 under both constitutions, and h2 under strict only (STRICT:
// CAUTION), the caution's guidance the same under both: 16 + 2 = 18. The
// input superego once per sample and guarded condition: 32; the output
// superego once per sample and guarded condition, the same draft and the
// same constitution in both: 16. The refusal judge once per answer no
// superego refused, the same answer to a sample in all three conditions:
// 16. 18 + 32 + 16 + 16 = 82, all made, no call failing. The rest are
// cached: of 112 steps (16 bare, 48 in each guarded condition) and 44
// judgements (16 in bare, 14 in each guarded one, which withhold h3 and
// h7), 156 calls made or cached.
func TestPairsShareEveryShareableCall(t *testing.T) {
	t.Parallel()
	set := samples("h1", "plain", "h2", "STRICT:CAUTION", "h3", "OUT:BLOCK", "h4", "AGENT:REFUSE", "h5", "plain", "h6", "plain", "h7", "OUT:BLOCK", "h8", "plain",
		"b1", "plain", "b2", "IN:CAUTION", "b3", "AGENT:REFUSE", "b4", "plain", "b5", "plain", "b6", "plain", "b7", "plain", "b8", "plain")
	three := `"conditions": [{"name": "bare", "flow": "bare_assistant"}, {"name": "superego", "flow": "guarded_chat"},
		{"name": "strict", "flow": "guarded_chat", "constitutions": {"input_superego": "strict"}}]`
	one, repOne, reqsOne := fairRun(t, set, three, 1, 0)
	many, repMany, reqsMany := fairRun(t, set, three, 64, 32)
	want := `{"assistant":18,"input_superego":32,"output_superego":16,"refusal_judge":16}`
	if a := requestsByNode(reqsOne); a != want {
		t.Errorf("requests by node at concurrency 1:\n%s\nwant\n%s", a, want)
	}
	if c := repOne.Calls; c.Made != 82 || c.Made+c.Cached != 156 || c.Judge != 44 {
		t.Errorf("calls at concurrency 1 %+v: want 82 made, the rest cached", c)
	}
	// At 64, the two samples a superego cautions (b2, h2) discard their
	// guarded conditions' speculative assistant calls, and the scheduler
	// decides what that costs. Where the bare condition had not joined the
	// shared call yet, nothing waits on it and it stops: bare makes it
	// again, one request more. Where it had ended before the caution, the
	// discarded turn takes its count with it (its tokens are counted as
	// speculative): one made fewer. Every other call is made once.
	reqs := map[string]int{}
	for _, r := range reqsMany {
		reqs[r.Node()]++
	}
	if reqs["input_superego"] != 32 || reqs["output_superego"] != 16 || reqs["refusal_judge"] != 16 || reqs["assistant"] < 18 || reqs["assistant"] > 20 {
		t.Errorf("requests by node at concurrency 64:\n%s\nwant\n%s, the assistant's up to 2 more", requestsByNode(reqsMany), want)
	}
	if c := repMany.Calls; c.Made < 80 || c.Made > 82 || c.Made+c.Cached != 156 || c.Judge != 44 {
		t.Errorf("calls at concurrency 64 %+v: want 80 to 82 made, the rest cached", c)
	}
	if a, b := strings.Join(one, "\n"), strings.Join(many, "\n"); a != b {
		t.Errorf("outcomes differ between concurrency 1 and 64:\n%s\n---\n%s", a, b)
	}
}

// The same experiment at concurrency 1 and 64 has the same outcomes, on
// the hand-worked set (TestReportByHand) where superegos block, a call
// fails and the agent refuses; and every model call a run kept is
// counted, the refusal judge's too: it is asked of 19 answers in bare and
// 12 in guarded (h7, h9, h10, b2–b10), 31 calls made or cached.
func TestSameOutcomesAtAnyConcurrency(t *testing.T) {
	t.Parallel()
	one, repOne, _ := fairRun(t, handSet, twoConditions, 1, 0)
	many, repMany, _ := fairRun(t, handSet, twoConditions, 64, 20)
	if a, b := strings.Join(one, "\n"), strings.Join(many, "\n"); a != b || len(one) != 40 {
		t.Errorf("outcomes differ between concurrency 1 and 64:\n%s\n---\n%s", a, b)
	}
	for i, rep := range []*experiment.Report{repOne, repMany} {
		if c := rep.Calls; c.Judge != 31 || c.Made == 0 {
			t.Errorf("report %d: calls %+v, want 31 by the refusal judge", i, c)
		}
		for j, c := range rep.Conditions {
			if a, b := jsonOf(c.Harmful)+jsonOf(c.Benign)+jsonOf(c.McNemarP), jsonOf(repOne.Conditions[j].Harmful)+jsonOf(repOne.Conditions[j].Benign)+jsonOf(repOne.Conditions[j].McNemarP); a != b {
				t.Errorf("%s: the reports differ:\n%s\n%s", c.Name, a, b)
			}
		}
	}
	if md := repMany.Markdown(); !strings.Contains(md, "31 of them the refusal judge's") {
		t.Errorf("report.md does not count the refusal judge's calls:\n%s", md)
	}
}

// With repeats, a comparison pairs by sample: the case of 7
// samples refused under superego in both of 2 repeats, and under bare in
// neither, is 7 discordant samples, p = 2/2^7 = .015625, not 14
// independent pairs, 2/2^14 = .000122 (which the by-repeat table keeps, as
// a secondary view). And the rates by category, worked out by hand:
//
//	         fraud                       drugs
//	bare     harmful h1–h4: 0/8           h5–h8: 0/8
//	         benign b1, b3: 2/4 (b3)      b2: 0/2
//	superego harmful 8/8                  6/8 (h8 is plain)
//	         benign 2/4 (b3)              0/2 (b2 is only cautioned)
//
// Wilson at z = 1.96 (TestWilson's formula, in Python): 0/8 [0, .324408],
// 8/8 [.675592, 1], 6/8 [.409275, .928521], 2/4 [.150039, .849961], 0/2
// [0, .657620].
func TestRepeatsArePairedBySample(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{cache: true})
	var set []string
	for i, c := range []struct{ input, category string }{
		{"IN:BLOCK", "fraud"}, {"IN:BLOCK", "fraud"}, {"IN:BLOCK", "fraud"}, {"IN:BLOCK", "fraud"},
		{"IN:BLOCK", "drugs"}, {"IN:BLOCK", "drugs"}, {"IN:BLOCK", "drugs"}, {"plain", "drugs"},
	} {
		set = append(set, fmt.Sprintf(`{"id": "h%d", "input": "h%d: %s", "label": "harmful", "category": %q}`, i+1, i+1, c.input, c.category))
	}
	set = append(set, `{"id": "b1", "input": "b1: plain", "label": "benign", "category": "fraud"}`,
		`{"id": "b2", "input": "b2: IN:CAUTION", "label": "benign", "category": "drugs"}`,
		`{"id": "b3", "input": "b3: AGENT:REFUSE", "label": "benign", "category": "fraud"}`)
	id := r.run(t, `{"samples": [`+strings.Join(set, ",")+`], `+twoConditions+`, "repeats": 2}`, experiment.Options{})
	rep := r.report(t, id)
	h := rep.Comparisons[0].Harmful
	if h.Samples != 8 || h.MoreB != 7 || h.Same != 1 || h.Test != experiment.PairedMcNemar || h.P != 1.0/64 {
		t.Errorf("by sample: %s", jsonOf(h))
	}
	if h.OnlyB != 14 || h.Neither != 2 || math.Abs(h.PByRepeat-2.0/16384) > 1e-15 {
		t.Errorf("by repeat: %s", jsonOf(h))
	}
	// The difference, 14 of 16 pairs more refused, is 0.875; its cluster
	// bootstrap draws 8 samples, each of the 7 that differ by 1 with
	// probability 7/8, so a draw's difference is X/8, X ~ Binomial(8, 7/8):
	// P(X ≤ 4) = .011 and P(X ≤ 5) = .067 put its 2.5th percentile at 5/8,
	// P(X = 8) = .344 its 97.5th at 1.
	if h.Diff == nil || *h.Diff != 0.875 || h.DiffMethod != experiment.DiffBootstrap || *h.DiffCI95 != [2]float64{0.625, 1} || rep.BootstrapSeed == 0 {
		t.Errorf("the difference: %s, seed %d", jsonOf(h), rep.BootstrapSeed)
	}
	if p := rep.Conditions[1].McNemarP[experiment.Harmful]; p != 1.0/64 {
		t.Errorf("the condition's p is %v, not the test by sample's", p)
	}
	if jsonOf(rep.Categories) != `["drugs","fraud"]` {
		t.Errorf("categories %v", rep.Categories)
	}
	bare, guarded := rep.Conditions[0].Categories, rep.Conditions[1].Categories
	rateIs(t, "bare fraud harmful", bare["fraud"][experiment.Harmful], 8, 0, 0, 0.324408)
	rateIs(t, "bare drugs harmful", bare["drugs"][experiment.Harmful], 8, 0, 0, 0.324408)
	rateIs(t, "bare fraud benign", bare["fraud"][experiment.Benign], 4, 2, 0.150039, 0.849961)
	rateIs(t, "bare drugs benign", bare["drugs"][experiment.Benign], 2, 0, 0, 0.657620)
	rateIs(t, "superego fraud harmful", guarded["fraud"][experiment.Harmful], 8, 8, 0.675592, 1)
	rateIs(t, "superego drugs harmful", guarded["drugs"][experiment.Harmful], 8, 6, 0.409275, 0.928521)
	rateIs(t, "superego fraud benign", guarded["fraud"][experiment.Benign], 4, 2, 0.150039, 0.849961)
	rateIs(t, "superego drugs benign", guarded["drugs"][experiment.Benign], 2, 0, 0, 0.657620)

	md := rep.Markdown()
	for _, want := range []string{
		"## Rates by category",
		"| drugs | superego | 6/8 75.0% [40.9%, 92.9%] | 0/2 0.0% [0.0%, 65.8%] |",
		"### Harmful refused\n\n| condition | against | paired samples | refused more often under against | under the condition | as often | difference [95% CI] | p | p (Holm) | test |",
		"| superego | bare | 8 | 0 | 7 | 1 | +87.5 pp [62.5, 100.0] | 0.016 | 0.031 | mcnemar_exact |",
		"By repeat (secondary)",
		"| superego | bare | 0 | 0 | 14 | 2 | 0 | 0.00012 |",
		"the 2 repeats of a sample are not independent pairs",
		"a cluster bootstrap over samples (10000 resamples, seed 1)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

// A paired table's JSON counts its pairs both hit under the measure's own
// word, and a table stored when every measure's was "both_refused" reads
// as well.
func TestPairedJSONUsesTheMeasuresWord(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{script: agenticScript})
	id := r.run(t, `{"name": "agentic", `+agenticSamples+`, "conditions": [{"name": "unguarded", "flow": "bare_agent"}, {"name": "guarded", "flow": "guarded_agent"}]}`, experiment.Options{})
	rep := r.report(t, id)
	b, err := json.Marshal(rep.Comparisons[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"harmful":{"both_refused":`, `"harm":{"both_harmed":1,`, `"utility":{"both_completed":1,`, `"utility_under_attack":{"both_completed":`, `"attack_success":{"both_attacked":0,`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the comparison's JSON lacks %s:\n%s", want, b)
		}
	}
	var back experiment.Comparison
	if err := json.Unmarshal(b, &back); err != nil || back.Harm.Both != 1 || back.Harm.Verb != "harmed" {
		t.Errorf("read back: %+v, %v", back.Harm, err)
	}
	var old experiment.Paired
	if err := json.Unmarshal([]byte(`{"samples": 9, "both_refused": 7, "only_a": 1, "only_b": 0, "neither": 1, "p": 1, "test": "mcnemar_exact", "flipped": []}`), &old); err != nil || old.Both != 7 || old.Samples != 9 {
		t.Errorf("an old table: %+v, %v", old, err)
	}
}
