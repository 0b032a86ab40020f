package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"superego/experiment"
	"superego/experiment/experimenttest"
	"superego/flow"
	"superego/sqlite"
)

func TestExperimentStore(t *testing.T) {
	t.Parallel()
	s := open(t)
	experimenttest.Run(t, s, s)
}

// A row of the experiment tables whose bytes changed after it was written
// is not served; a kept reply that changed is a miss.
func TestExperimentRowsAreChecked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	reopen := func() *sqlite.Store {
		s, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := reopen()
	ctx := context.Background()
	if err := s.CreateExperiment(ctx, experiment.Record{ID: "e", Name: "n", Status: "running", Plan: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginOutcome(ctx, "e", experiment.Slot{Condition: "c", Label: "harmful", SampleID: "s"}, "i"); err != nil {
		t.Fatal(err)
	}
	s.Keep(ctx, "k", []byte(`{"text":"hi"}`))
	s.Close() // writes what is queued, the kept reply too
	writeRaw(t, path, `UPDATE experiments SET name = 'changed'; UPDATE experiment_outcomes SET instance_id = 'other'; UPDATE reply_cache SET reply = '{"text":"no"}'`)
	s = reopen()
	if _, err := s.Experiment(ctx, "e"); !errors.Is(err, flow.ErrCorrupt) {
		t.Errorf("a changed experiment: %v", err)
	}
	writeRaw(t, path, `UPDATE experiments SET name = 'n'`)
	if _, err := s.Outcomes(ctx, "e"); !errors.Is(err, flow.ErrCorrupt) {
		t.Errorf("a changed outcome: %v", err)
	}
	if _, ok, err := s.Reply(ctx, "k"); ok || !errors.Is(err, flow.ErrCorrupt) {
		t.Errorf("a changed reply: %v %v", ok, err)
	}
	// A changed report is not served; a listing, which leaves reports out,
	// still lists its experiment.
	if err := s.UpdateExperiment(ctx, experiment.Record{ID: "e", Status: "completed", Plan: []byte(`{}`), Report: []byte(`{"version":1}`)}); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, path, `UPDATE experiments SET report = '{"version":2}'`)
	if _, err := s.Experiment(ctx, "e"); !errors.Is(err, flow.ErrCorrupt) {
		t.Errorf("a changed report: %v", err)
	}
	if list, err := s.Experiments(ctx); err != nil || len(list) != 1 {
		t.Errorf("listed: %v %v", list, err)
	}
}
