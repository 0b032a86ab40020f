package experiment

import (
	"encoding/json"
	"fmt"
	"testing"

	"superego/flow"
)

// compare walks the outcomes, and counts every cell of the plan it did
// not pair as excluded: not run, failed, or of one side only. A plan of
// millions of cells with a few outcomes is read in the time of those.
func TestCompareCountsTheCellsItDoesNotVisit(t *testing.T) {
	t.Parallel()
	plan := &Plan{Repeats: 1000, Samples: []Sample{
		{ID: "h1", Label: Harmful}, {ID: "h2", Label: Harmful}, {ID: "b1", Label: Benign},
	}}
	for i := range 100_000 { // 100,000,000 harmful cells per condition
		plan.Samples = append(plan.Samples, Sample{ID: fmt.Sprint("x", i), Label: Harmful})
	}
	o := func(cond, id, label string, rep int, refused bool, status string) Outcome {
		return Outcome{Condition: cond, SampleID: id, Label: label, Repeat: rep, Refused: refused, Status: status}
	}
	ok := flow.StatusCompleted
	by := byCondition([]Outcome{
		o("a", "h1", Harmful, 0, false, ok), o("a", "h2", Harmful, 0, true, ok), o("a", "b1", Benign, 0, false, ok),
		o("a", "h1", Harmful, 1, true, ok), o("a", "h2", Harmful, 1, true, flow.StatusFailed), o("a", "x7", Harmful, 3, true, ok),
		o("b", "h1", Harmful, 0, true, ok), o("b", "h2", Harmful, 0, true, ok), o("b", "b1", Benign, 0, true, ok),
		o("b", "h1", Harmful, 1, true, ok), o("b", "h2", Harmful, 1, true, ok), o("b", "unknown", Harmful, 0, true, ok),
	})
	c := compare(plan, "a", "b", by)
	h, b := c.Harmful, c.Benign
	// Harmful: h1 rep 0 flips to B, h2 rep 0 both, h1 rep 1 both; h2 rep 1
	// failed under A, x7 ran under A only: excluded like every cell not run.
	if got := fmt.Sprint(h.Both, h.OnlyA, h.OnlyB, h.Neither, h.Excluded); got != fmt.Sprint(2, 0, 1, 0, 100_002*1000-3) {
		t.Errorf("harmful: both, only A, only B, neither, excluded = %s", got)
	}
	if got := fmt.Sprint(b.Both, b.OnlyA, b.OnlyB, b.Neither, b.Excluded); got != "0 0 1 0 999" {
		t.Errorf("benign: both, only A, only B, neither, excluded = %s", got)
	}
	if len(h.Flipped) != 1 || h.Flipped[0].SampleID != "h1" || h.Flipped[0].Repeat != 0 || h.Samples != 2 {
		t.Errorf("harmful flips %+v over %d samples", h.Flipped, h.Samples)
	}
}

// A reader's ?adjust= changes its own copy of a report, not the one made
// once and shared by every reader of the experiment.
func TestAdjustPChangesOnlyItsOwnCopy(t *testing.T) {
	t.Parallel()
	shared := &Report{
		Conditions: []ConditionReport{{Name: "a", Harmful: Rate{N: 4}}, {Name: "b", Harmful: Rate{N: 4}},
			{Name: "c", Harmful: Rate{N: 4}, UnderAttack: &Paired{P: 0.5}}},
		Comparisons: []Comparison{{A: "a", B: "b", Harmful: Paired{P: 0.01}}, {A: "a", B: "c", Harmful: Paired{P: 0.04}}},
	}
	shared.AdjustP(AdjustHolm)
	before, _ := json.Marshal(shared)
	reader := *shared
	reader.AdjustP(AdjustNone)
	if after, _ := json.Marshal(shared); string(after) != string(before) {
		t.Error("a reader's adjust=none changed the report the other readers share")
	}
	if p := reader.Comparisons[0].Harmful.PAdjusted; p == nil || *p != 0.01 || reader.Adjust != AdjustNone {
		t.Errorf("the reader's copy is not adjusted by none: %v %s", p, reader.Adjust)
	}
}
