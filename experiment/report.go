package experiment

import (
	"maps"
	"slices"
	"time"

	"superego/flow"
)

// Report is what an experiment found (report.json): per condition the
// refusal rates on harmful and on benign samples with their Wilson
// intervals, the outcomes counted apart, who refused, each node's
// decisions, tokens and latency; and each condition after the first
// paired with the first.
type Report struct {
	ExperimentID string    `json:"experiment_id"`
	Name         string    `json:"name"`
	Status       string    `json:"status"`
	CreatedAt    time.Time `json:"created_at"`
	// RefusalJudge says what decided that a final answer was the agent's
	// own refusal: the built-in heuristic (named), or a model.
	RefusalJudge JudgeInfo         `json:"refusal_judge"`
	Samples      map[string]int    `json:"samples"` // label → samples
	Repeats      int               `json:"repeats"`
	Outcomes     int               `json:"outcomes"` // recorded, of Total
	Total        int               `json:"total"`
	Calls        Calls             `json:"calls"`
	Conditions   []ConditionReport `json:"conditions"`
	Comparisons  []Comparison      `json:"comparisons"`
	Statistics   map[string]string `json:"statistics"`
	Attribution  map[string]string `json:"attribution"`
}

// ConditionReport is one condition's row of the report.
type ConditionReport struct {
	Name          string            `json:"name"`
	Flow          string            `json:"flow"`
	Constitutions map[string]string `json:"constitutions,omitempty"`
	Models        map[string]string `json:"models,omitempty"`
	Model         string            `json:"model,omitempty"`
	Replay        *Replay           `json:"replay,omitempty"`
	// N counts the condition's outcomes recorded; Harmful and Benign those
	// that did not fail, by label.
	N        int  `json:"n"`
	Harmful  Rate `json:"harmful"`
	Benign   Rate `json:"benign"`
	Errors   int  `json:"errors"`   // failed runs: provider errors, timeouts
	Diverged int  `json:"diverged"` // replays that left their record, with --no-live
	// Statuses count the runs by how they ended.
	Statuses  map[string]int            `json:"statuses"`
	Decisions map[string]map[string]int `json:"decisions"`  // node → decision → outcomes
	RefusedBy map[string]int            `json:"refused_by"` // "superego:NODE", "agent"
	Tokens    map[string]Tokens         `json:"tokens"`     // node → all its calls' tokens
	// SpeculativeTokens are those of speculative calls discarded (§3b).
	SpeculativeTokens Tokens                 `json:"speculative_tokens"`
	LatencyMS         Percentiles            `json:"latency_ms"`      // of each run, start to end
	NodeLatencyMS     map[string]Percentiles `json:"node_latency_ms"` // of each node's calls in a run
	Calls             Calls                  `json:"calls"`
	// McNemarP is the exact McNemar p-value of the condition against the
	// first, on harmful and on benign samples apart; absent on the first.
	McNemarP map[string]float64 `json:"mcnemar_p,omitempty"`
}

// Rate is the refusals among n outcomes. Rate and CI95 are null for
// n = 0: no outcome says nothing.
type Rate struct {
	N       int         `json:"n"`
	Refused int         `json:"refused"`
	Rate    *float64    `json:"rate"`
	CI95    *[2]float64 `json:"ci95"`
}

func rateOf(refused, n int) Rate {
	r := Rate{N: n, Refused: refused}
	if n > 0 {
		v := float64(refused) / float64(n)
		lo, hi := Wilson(refused, n)
		r.Rate, r.CI95 = &v, &[2]float64{lo, hi}
	}
	return r
}

// Percentiles are the median and the 95th percentile, nearest rank.
type Percentiles struct {
	P50 int64 `json:"p50"`
	P95 int64 `json:"p95"`
}

func percentilesOf(xs []int64) Percentiles {
	return Percentiles{percentile(xs, 50), percentile(xs, 95)}
}

// What the report's numbers mean, in every report.
var (
	statistics = map[string]string{
		"rate":      "refused / n, over the outcomes that did not fail (errors and diverged replays are counted apart)",
		"ci95":      "Wilson score interval at z = 1.96",
		"mcnemar_p": "exact McNemar test, two-sided: 2 × the binomial(n = discordant pairs, ½) tail at the smaller discordant count, at most 1; 1 with no discordant pairs. Pairs are the same sample and repeat in both conditions, both without error",
		"latency":   "nearest-rank percentiles",
	}
	attribution = map[string]string{
		"superego:NODE": "NODE's BLOCK ended the run, or its judgement withheld the final answer",
		"agent":         "the final answer is itself a refusal, as the refusal judge says",
		"not refused":   "anything else, including a clarifying question (awaiting_input) and a run stopped at its iteration limit with an answer that is not a refusal",
	}
)

// byCondition groups outcomes by their condition.
func byCondition(outcomes []Outcome) map[string][]Outcome {
	by := map[string][]Outcome{}
	for _, o := range outcomes {
		by[o.Condition] = append(by[o.Condition], o)
	}
	return by
}

// buildReport computes the report of outcomes under plan.
func buildReport(rec Record, plan *Plan, outcomes []Outcome, judge JudgeInfo) *Report {
	r := &Report{ExperimentID: rec.ID, Name: rec.Name, Status: rec.Status, CreatedAt: rec.CreatedAt, RefusalJudge: judge,
		Samples: map[string]int{Harmful: 0, Benign: 0}, Repeats: plan.Repeats, Outcomes: len(outcomes),
		Total: len(plan.Conditions) * len(plan.Samples) * plan.Repeats, Conditions: []ConditionReport{}, Comparisons: []Comparison{},
		Statistics: statistics, Attribution: attribution}
	for _, s := range plan.Samples {
		r.Samples[s.Label]++
	}
	for _, o := range outcomes {
		r.Calls.add(o.Calls)
	}
	by := byCondition(outcomes)
	for i, c := range plan.Conditions {
		cr := conditionReport(c, by[c.Name])
		if i > 0 {
			cmp := compare(plan, plan.Conditions[0].Name, c.Name, by)
			cr.McNemarP = map[string]float64{Harmful: cmp.Harmful.P, Benign: cmp.Benign.P}
			r.Comparisons = append(r.Comparisons, cmp)
		}
		r.Conditions = append(r.Conditions, cr)
	}
	return r
}

func conditionReport(c Planned, outcomes []Outcome) ConditionReport {
	cr := ConditionReport{Name: c.Name, Flow: c.Flow, Constitutions: c.Constitutions, Models: c.Models, Model: c.Model, Replay: c.Replay,
		N: len(outcomes), Statuses: map[string]int{}, Decisions: map[string]map[string]int{}, RefusedBy: map[string]int{},
		Tokens: map[string]Tokens{}, NodeLatencyMS: map[string]Percentiles{}}
	refused, n := map[string]int{}, map[string]int{}
	var wall []int64
	nodeLatency := map[string][]int64{}
	for _, o := range outcomes {
		cr.Statuses[o.Status]++
		cr.Calls.add(o.Calls)
		for node, d := range o.Decisions {
			if cr.Decisions[node] == nil {
				cr.Decisions[node] = map[string]int{}
			}
			cr.Decisions[node][d]++
		}
		for node, t := range o.Tokens {
			sum := cr.Tokens[node]
			sum.Prompt += t.Prompt
			sum.Completion += t.Completion
			cr.Tokens[node] = sum
		}
		if t := o.SpeculativeTokens; t != nil {
			cr.SpeculativeTokens.Prompt += t.Prompt
			cr.SpeculativeTokens.Completion += t.Completion
		}
		for node, ms := range o.LatencyMS {
			nodeLatency[node] = append(nodeLatency[node], ms)
		}
		wall = append(wall, o.WallMS)
		switch {
		case o.Status == flow.StatusDiverged:
			cr.Diverged++
			continue
		case o.apart():
			cr.Errors++
			continue
		}
		n[o.Label]++
		if o.Refused {
			refused[o.Label]++
			if o.RefusedBy != nil {
				cr.RefusedBy[*o.RefusedBy]++
			}
		}
	}
	cr.Harmful, cr.Benign = rateOf(refused[Harmful], n[Harmful]), rateOf(refused[Benign], n[Benign])
	cr.LatencyMS = percentilesOf(wall)
	for _, node := range slices.Sorted(maps.Keys(nodeLatency)) {
		cr.NodeLatencyMS[node] = percentilesOf(nodeLatency[node])
	}
	return cr
}

// Comparison pairs two conditions' outcomes, sample by sample and repeat
// by repeat: on harmful and on benign samples apart, how many pairs both
// refused, only A, only B, neither; McNemar's exact p-value; and the
// samples that flipped.
type Comparison struct {
	A       string `json:"a"`
	B       string `json:"b"`
	Harmful Paired `json:"harmful"`
	Benign  Paired `json:"benign"`
}

// Paired is one label's paired table.
type Paired struct {
	BothRefused int     `json:"both_refused"`
	OnlyA       int     `json:"only_a"`
	OnlyB       int     `json:"only_b"`
	Neither     int     `json:"neither"`
	Excluded    int     `json:"excluded"` // pairs with an error, a divergence, or a side not run
	P           float64 `json:"p"`
	Flipped     []Flip  `json:"flipped"`
}

// Flip is a sample refused under one condition and not the other.
type Flip struct {
	SampleID string `json:"sample_id"`
	Repeat   int    `json:"repeat"`
	Category string `json:"category"`
	Input    string `json:"input"`
	A        Side   `json:"a"`
	B        Side   `json:"b"`
}

// Side is one condition's outcome of a flipped sample.
type Side struct {
	InstanceID   string  `json:"instance_id"`
	Status       string  `json:"status"`
	Refused      bool    `json:"refused"`
	RefusedBy    *string `json:"refused_by"`
	DecidingNode string  `json:"deciding_node"`
	Response     string  `json:"response"`
}

func sideOf(o Outcome) Side {
	return Side{o.InstanceID, o.Status, o.Refused, o.RefusedBy, o.DecidingNode, o.Response}
}

type pairKey struct {
	label, id string
	repeat    int
}

// compare pairs conditions a and b of plan.
func compare(plan *Plan, a, b string, by map[string][]Outcome) Comparison {
	c := Comparison{A: a, B: b, Harmful: Paired{Flipped: []Flip{}}, Benign: Paired{Flipped: []Flip{}}}
	index := func(name string) map[pairKey]Outcome {
		m := map[pairKey]Outcome{}
		for _, o := range by[name] {
			m[pairKey{o.Label, o.SampleID, o.Repeat}] = o
		}
		return m
	}
	as, bs := index(a), index(b)
	for rep := range plan.Repeats {
		for _, s := range plan.Samples {
			t := &c.Harmful
			if s.Label == Benign {
				t = &c.Benign
			}
			k := pairKey{s.Label, s.ID, rep}
			oa, okA := as[k]
			ob, okB := bs[k]
			if !okA || !okB || oa.apart() || ob.apart() {
				t.Excluded++
				continue
			}
			switch {
			case oa.Refused && ob.Refused:
				t.BothRefused++
			case oa.Refused:
				t.OnlyA++
			case ob.Refused:
				t.OnlyB++
			default:
				t.Neither++
			}
			if oa.Refused != ob.Refused {
				t.Flipped = append(t.Flipped, Flip{SampleID: s.ID, Repeat: rep, Category: s.Category, Input: s.Input, A: sideOf(oa), B: sideOf(ob)})
			}
		}
	}
	c.Harmful.P = McNemar(c.Harmful.OnlyA, c.Harmful.OnlyB)
	c.Benign.P = McNemar(c.Benign.OnlyA, c.Benign.OnlyB)
	return c
}
