// Package experimenttest checks that a store keeps experiment.Store's
// contract, and agents.ReplyCache's: each experiment's record, its
// outcomes begun and finished, and model replies kept once.
package experimenttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"superego/experiment"
	"superego/flow"
)

// Cache is agents.ReplyCache, declared again so that a store's test need
// not import the agents.
type Cache interface {
	Reply(ctx context.Context, key string) ([]byte, bool, error)
	Keep(ctx context.Context, key string, reply []byte) error
}

// Run checks s, opened fresh for the test.
func Run(t *testing.T, s experiment.Store, cache Cache) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	a := experiment.Record{ID: "exp-a", Name: "first", CreatedAt: t0, Status: experiment.StatusRunning, Plan: []byte(`{"name":"first","samples":[]}`)}
	b := experiment.Record{ID: "exp-b", Name: "second", CreatedAt: t0.Add(time.Minute), Status: experiment.StatusRunning, Plan: []byte(`{"name":"second"}`)}
	for _, r := range []experiment.Record{a, b} {
		if err := s.CreateExperiment(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateExperiment(ctx, a); err == nil {
		t.Error("an experiment was created twice")
	}
	got, err := s.Experiment(ctx, "exp-a")
	if err != nil || got.ID != a.ID || got.Name != a.Name || !got.CreatedAt.Equal(t0) || got.Status != a.Status || string(got.Plan) != string(a.Plan) {
		t.Errorf("read back: %+v %v", got, err)
	}
	if _, err := s.Experiment(ctx, "nope"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("an unknown experiment: %v", err)
	}
	a.Status, a.Plan = experiment.StatusCompleted, []byte(`{"name":"first","samples":[],"conditions":[]}`)
	if err := s.UpdateExperiment(ctx, a); err != nil {
		t.Fatal(err)
	}
	// Where the command line writes its files is kept, and an update that
	// does not say keeps it.
	a.Out = "/home/u/results/first"
	if err := s.UpdateExperiment(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.Out = ""
	if err := s.UpdateExperiment(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Experiment(ctx, "exp-a"); err != nil || got.Out != "/home/u/results/first" {
		t.Errorf("out: %q %v", got.Out, err)
	}
	if got, err := s.Experiment(ctx, "exp-b"); err != nil || got.Out != "" {
		t.Errorf("another experiment's out: %q %v", got.Out, err)
	}
	// A report is kept with the status it is given with, byte for byte,
	// and an update without one drops it.
	a.Report = []byte(`{"version": 1, "report": {"name": "first", "outcomes": 100000}}`)
	if err := s.UpdateExperiment(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Experiment(ctx, "exp-a"); err != nil || string(got.Report) != string(a.Report) || got.Status != experiment.StatusCompleted || got.Out != "/home/u/results/first" {
		t.Errorf("the report kept: %+v %v", got, err)
	}
	list, err := s.Experiments(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "exp-b" || list[1].ID != "exp-a" || list[1].Status != experiment.StatusCompleted || string(list[1].Plan) != string(a.Plan) ||
		list[1].Report != nil {
		t.Errorf("listed (with no report): %+v %v", list, err)
	}
	a.Report = nil
	if err := s.UpdateExperiment(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Experiment(ctx, "exp-a"); err != nil || got.Report != nil {
		t.Errorf("the report dropped: %q %v", got.Report, err)
	}

	one := experiment.Slot{Condition: "bare", Label: "harmful", SampleID: "1-1", Repeat: 0}
	two := experiment.Slot{Condition: "bare", Label: "benign", SampleID: "1-1", Repeat: 0} // the same id, benign
	for _, c := range []struct {
		slot     experiment.Slot
		instance string
	}{{one, "i1"}, {two, "i2"}, {one, "i3"}} { // one is begun again: i3 replaces i1
		if err := s.BeginOutcome(ctx, "exp-a", c.slot, c.instance); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.FinishOutcome(ctx, "exp-a", one, []byte(`{"status":"completed"}`)); err != nil {
		t.Fatal(err)
	}
	kept, err := s.Outcomes(ctx, "exp-a")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, k := range kept {
		lines = append(lines, fmt.Sprintf("%s/%s/%s/%d %s %s", k.Condition, k.Label, k.SampleID, k.Repeat, k.Instance, k.Outcome))
	}
	slices.Sort(lines)
	if want := []string{"bare/benign/1-1/0 i2 ", `bare/harmful/1-1/0 i3 {"status":"completed"}`}; !slices.Equal(lines, want) {
		t.Errorf("outcomes:\n%q\nwant\n%q", lines, want)
	}
	// A slot begun again is unfinished until its new run ends.
	if err := s.BeginOutcome(ctx, "exp-a", one, "i4"); err != nil {
		t.Fatal(err)
	}
	kept, _ = s.Outcomes(ctx, "exp-a")
	for _, k := range kept {
		if k.Slot == one && (k.Instance != "i4" || k.Outcome != nil) {
			t.Errorf("begun again: %+v", k)
		}
	}
	if kept, err := s.Outcomes(ctx, "exp-b"); err != nil || len(kept) != 0 {
		t.Errorf("another experiment's outcomes: %v %v", kept, err)
	}
	if _, err := s.Outcomes(ctx, "nope"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("outcomes of an unknown experiment: %v", err)
	}

	if cache == nil {
		return
	}
	if _, ok, err := cache.Reply(ctx, "k1"); ok || err != nil {
		t.Errorf("a reply never kept: %v %v", ok, err)
	}
	cache.Keep(ctx, "k1", []byte(`{"text":"first"}`))
	cache.Keep(ctx, "k1", []byte(`{"text":"second"}`)) // kept already: changes nothing
	// Keep may return before the reply is durable; the store's writes are
	// made in order, so one waited for after it makes it durable too.
	if err := s.UpdateExperiment(ctx, a); err != nil {
		t.Fatal(err)
	}
	reply, ok, err := cache.Reply(ctx, "k1")
	if !ok || err != nil || string(reply) != `{"text":"first"}` {
		t.Errorf("kept reply: %s %v %v", reply, ok, err)
	}
}
