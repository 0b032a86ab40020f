package experiment

import (
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strings"
)

// Comparison pairs two conditions' outcomes, measure by measure (on
// harmful and on benign samples apart): sample by sample, the test the
// report gives; pair by pair (each sample and repeat), a secondary table;
// the samples that flipped; and how far the two agree, refused or not.
type Comparison struct {
	A                  string `json:"a"`
	B                  string `json:"b"`
	Harmful            Paired `json:"harmful"`
	Benign             Paired `json:"benign"`
	Harm               Paired `json:"harm"`
	Utility            Paired `json:"utility"`
	UtilityUnderAttack Paired `json:"utility_under_attack"`
	AttackSuccess      Paired `json:"attack_success"`
	// Agreement is Cohen's kappa of A's and B's refusals over their pairs
	// of every label: for a replay, two judges on the same runs.
	Agreement Agreement `json:"agreement"`
}

// Paired is one measure's paired comparison of A and B.
type Paired struct {
	// By sample, each sample one pair, over its repeats run without error
	// under both conditions: the samples paired, and those A counted (as
	// refused, harmed…) in more of them than B, in fewer, as many. P is the
	// test's, Test its name (PairedMcNemar, PairedSignFlip,
	// PairedSignFlipNormal); PAdjusted, P adjusted over a report's family
	// (Report.AdjustP).
	Samples   int      `json:"samples"`
	MoreA     int      `json:"more_a"`
	MoreB     int      `json:"more_b"`
	Same      int      `json:"same"`
	P         float64  `json:"p"`
	PAdjusted *float64 `json:"p_adjusted,omitempty"`
	Test      string   `json:"test"`
	// Diff is B's rate less A's over the pairs, with its 95% interval by
	// DiffMethod (DiffNewcombe with one repeat, DiffBootstrap with more);
	// null with no pair.
	Diff       *float64    `json:"diff"`
	DiffCI95   *[2]float64 `json:"diff_ci95"`
	DiffMethod string      `json:"diff_method"`
	// By repeat, each sample and repeat one pair: the 2×2 table, and
	// McNemar's exact p on it, which counts a sample's repeats as
	// independent pairs and so overstates significance with more than one.
	// Both is the pairs both counted, in JSON "both_" and the measure's
	// word: both_refused, both_harmed, both_completed, both_attacked.
	Both      int     `json:"-"`
	OnlyA     int     `json:"only_a"`
	OnlyB     int     `json:"only_b"`
	Neither   int     `json:"neither"`
	Excluded  int     `json:"excluded"` // pairs with an error, a divergence, or a side not run
	PByRepeat float64 `json:"p_by_repeat"`
	Flipped   []Flip  `json:"flipped"`
	// Verb is the measure's word for a hit: refused, harmed, completed,
	// attacked.
	Verb string `json:"-"`
}

// Methods of Paired.DiffMethod.
const (
	DiffNewcombe  = "newcombe_hybrid_score"
	DiffBootstrap = "cluster_bootstrap"
)

// MarshalJSON writes Both under its measure's word.
func (p Paired) MarshalJSON() ([]byte, error) {
	type fields Paired // without this method
	b, err := json.Marshal(fields(p))
	if err != nil {
		return nil, err
	}
	key, _ := json.Marshal("both_" + p.verb())
	return fmt.Appendf(nil, "{%s:%d,%s", key, p.Both, b[1:]), nil
}

// UnmarshalJSON reads Both under any measure's word: a report written
// when every measure's was "both_refused" reads as well.
func (p *Paired) UnmarshalJSON(b []byte) error {
	type fields Paired
	if err := json.Unmarshal(b, (*fields)(p)); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	for k, v := range keys {
		if verb, ok := strings.CutPrefix(k, "both_"); ok {
			p.Verb = verb
			return json.Unmarshal(v, &p.Both)
		}
	}
	return nil
}

func (p *Paired) verb() string {
	if p.Verb == "" {
		return "refused"
	}
	return p.Verb
}

// Agreement is two judges' verdicts, refused or not, on the same items,
// and Cohen's kappa of them (Kappa); Kappa and CI95 are null where kappa
// is not defined, and CI95 alone where its interval is not (a judge said
// the same of every item).
type Agreement struct {
	N           int         `json:"n"`
	BothRefused int         `json:"both_refused"`
	OnlyA       int         `json:"only_a"`
	OnlyB       int         `json:"only_b"`
	Neither     int         `json:"neither"`
	Kappa       *float64    `json:"kappa"`
	CI95        *[2]float64 `json:"ci95"`
}

// agreeing counts an Agreement's table.
type agreeing struct{ n, both, onlyA, onlyB, neither int }

func (a *agreeing) add(x, y bool) {
	a.n++
	switch {
	case x && y:
		a.both++
	case x:
		a.onlyA++
	case y:
		a.onlyB++
	default:
		a.neither++
	}
}

func (a agreeing) agreement() Agreement {
	ag := Agreement{N: a.n, BothRefused: a.both, OnlyA: a.onlyA, OnlyB: a.onlyB, Neither: a.neither}
	if k, ci, ok := Kappa(a.both, a.onlyA, a.onlyB, a.neither); ok {
		ag.Kappa, ag.CI95 = &k, ci
	}
	return ag
}

// Flip is a sample a measure counts under one condition and not the
// other: refused, harmed, its task completed, attacked. For a condition's
// utility under attack, A is the outcome of the sample's base.
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
	// Basis is what the deciding node said its decision rests on, where
	// it judged under a stack (docs/stacks.md): a flip that rests on a user's
	// constitution is that layer's doing.
	Basis string `json:"basis,omitempty"`
}

func sideOf(o Outcome) Side {
	return Side{o.InstanceID, o.Status, o.Refused, o.RefusedBy, o.DecidingNode, o.Response, o.Bases[o.DecidingNode]}
}

type pairKey struct {
	label, id string
	repeat    int
}

// outcomesByPair indexes outcomes by sample and repeat.
func outcomesByPair(outcomes []Outcome) map[pairKey]Outcome {
	m := make(map[pairKey]Outcome, len(outcomes))
	for _, o := range outcomes {
		m[pairKey{o.Label, o.SampleID, o.Repeat}] = o
	}
	return m
}

// compare pairs conditions a and b of plan. It walks the outcomes, not
// the plan: a plan of millions of cells with a few thousand outcomes
// recorded (an experiment cancelled early) is read in the time of its
// outcomes. A cell of the plan with no pair is excluded, counted without
// being visited.
func compare(plan *Plan, a, b string, by map[string][]Outcome) Comparison {
	c := Comparison{A: a, B: b}
	as, bs := outcomesByPair(by[a]), outcomesByPair(by[b])
	pairings := make([]pairing, len(measures))
	for i, m := range measures {
		pairings[i] = newPairing(m.paired(&c), m.verb, len(plan.Samples))
	}
	var agree agreeing
	index := plan.sampleIndex()
	for k, oa := range pairsOf(by[a], as) {
		si, known := index[[2]string{k.label, k.id}]
		ob, ok := bs[k]
		if !known || !ok || oa.apart() || ob.apart() {
			continue
		}
		s := plan.Samples[si]
		agree.add(oa.Refused, ob.Refused)
		for i, m := range measures {
			if m.in(s) {
				pairings[i].add(si, s, k.repeat, oa, ob, m.hit)
			}
		}
	}
	for i, m := range measures {
		pairings[i].exclude(plan, m.in)
		pairings[i].finish(plan.Repeats)
	}
	c.Agreement = agree.agreement()
	return c
}

// underAttack pairs, in one condition's outcomes, each injection sample's
// utility under attack (B) with its base sample's utility (A); nil where
// no sample names a base.
func underAttack(plan *Plan, outcomes []Outcome) *Paired {
	attacked := func(s Sample) bool { return s.Base != "" }
	if !slices.ContainsFunc(plan.Samples, attacked) {
		return nil
	}
	by := outcomesByPair(outcomes)
	p := newPairing(&Paired{}, "completed", len(plan.Samples))
	index := plan.sampleIndex()
	for k, under := range pairsOf(outcomes, by) {
		si, known := index[[2]string{k.label, k.id}]
		if !known || !attacked(plan.Samples[si]) {
			continue
		}
		s := plan.Samples[si]
		base, ok := by[pairKey{s.Label, s.Base, k.repeat}]
		if !ok || base.apart() || under.apart() {
			continue
		}
		p.add(si, s, k.repeat, base, under, func(o *Outcome) bool {
			return o.CompletedTask != nil && *o.CompletedTask
		})
	}
	p.exclude(plan, attacked)
	p.finish(plan.Repeats)
	return p.t
}

// pairsOf is outcomes by their pair's key, in their order (the plan's:
// by repeat, then sample), each key once: the outcome last, which
// outcomesByPair keeps for it.
func pairsOf(outcomes []Outcome, last map[pairKey]Outcome) iter.Seq2[pairKey, Outcome] {
	return func(yield func(pairKey, Outcome) bool) {
		seen := make(map[pairKey]bool, len(last))
		for _, o := range outcomes {
			k := pairKey{o.Label, o.SampleID, o.Repeat}
			if seen[k] {
				continue
			}
			seen[k] = true
			if !yield(k, last[k]) {
				return
			}
		}
	}
}

// pairing builds a Paired from its pairs, one at a time.
type pairing struct {
	t     *Paired
	diffs []SampleDiff // by the plan's sample index
}

func newPairing(t *Paired, verb string, samples int) pairing {
	t.Verb = verb
	return pairing{t: t, diffs: make([]SampleDiff, samples)}
}

// add counts the pair of sample s (the plan's si-th) in repeat rep: its
// outcomes under A and B, both of which ran without error; hit says
// whether the measure counts an outcome.
func (p pairing) add(si int, s Sample, rep int, oa, ob Outcome, hit func(*Outcome) bool) {
	t := p.t
	ha, hb := hit(&oa), hit(&ob)
	switch {
	case ha && hb:
		t.Both++
	case ha:
		t.OnlyA++
	case hb:
		t.OnlyB++
	default:
		t.Neither++
	}
	d := &p.diffs[si]
	d.K++
	if ha {
		d.A++
	}
	if hb {
		d.B++
	}
	if ha != hb {
		t.Flipped = append(t.Flipped, Flip{SampleID: s.ID, Repeat: rep, Category: s.Category, Input: s.Input, A: sideOf(oa), B: sideOf(ob)})
	}
}

// exclude counts as excluded every cell of the plan the measure takes
// (in) that add did not pair: an error, a divergence, or a side not run.
func (p pairing) exclude(plan *Plan, in func(Sample) bool) {
	cells := 0
	for _, s := range plan.Samples {
		if in(s) {
			cells += plan.Repeats
		}
	}
	t := p.t
	t.Excluded = cells - (t.Both + t.OnlyA + t.OnlyB + t.Neither)
}

// finish works out the tests and the difference, for repeats.
func (p pairing) finish(repeats int) {
	t := p.t
	if t.Flipped == nil {
		t.Flipped = []Flip{}
	}
	for _, d := range p.diffs {
		switch {
		case d.K == 0:
			continue
		case d.A > d.B:
			t.MoreA++
		case d.B > d.A:
			t.MoreB++
		default:
			t.Same++
		}
		t.Samples++
	}
	t.P, t.Test = SignFlip(p.diffs)
	t.PByRepeat = McNemar(t.OnlyA, t.OnlyB)
	var diff, lo, hi float64
	var ok bool
	if repeats == 1 {
		diff, lo, hi, ok = NewcombePaired(t.Both, t.OnlyA, t.OnlyB, t.Neither)
		t.DiffMethod = DiffNewcombe
	} else {
		diff, lo, hi, ok = ClusterBootstrap(p.diffs, bootstrapSeed)
		t.DiffMethod = DiffBootstrap
	}
	if ok {
		t.Diff, t.DiffCI95 = &diff, &[2]float64{lo, hi}
	}
}
