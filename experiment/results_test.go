package experiment_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"superego/agents/agentstest"
	"superego/experiment"
)

// countingStore counts the reads of an experiment's outcomes.
type countingStore struct {
	*experiment.MemStore
	reads atomic.Int64
}

func (s *countingStore) Outcomes(ctx context.Context, id string) ([]experiment.Kept, error) {
	s.reads.Add(1)
	return s.MemStore.Outcomes(ctx, id)
}

// Reading an experiment costs what its report is, not what its outcomes
// are: a finished one's report is kept when its session ends, and served
// with no outcome read, in every format as it was made. While one runs,
// or where none was kept, readers share a report made at most every few
// seconds, one at a time however many read at once.
func TestReadingAnExperimentReadsNoOutcome(t *testing.T) {
	t.Parallel()
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	store := &countingStore{MemStore: &experiment.MemStore{}}
	r := newRig(t, rigOptions{store: store, script: func(q agentstest.Request) agentstest.Answer {
		if strings.Contains(q.LastUser(), "GATE") {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-gate
		}
		return script(q)
	}})
	ctx := context.Background()
	doc := `{"samples": ` + samples("h1", "IN:BLOCK", "h2", "OUT:BLOCK", "h3", "AGENT:REFUSE", "b1", "plain", "b2", "GATE plain") +
		`, "concurrency": 1, "conditions": [{"name": "bare", "flow": "bare_assistant"}, {"name": "superego", "flow": "guarded_chat"}]}`
	id, _ := r.create(t, doc)
	if err := r.lab.Start(ctx, id, experiment.Options{}); err != nil {
		t.Fatal(err)
	}
	// Running, held at b2: the readers in a row share the report the
	// first one made.
	<-entered
	before := store.reads.Load()
	for range 20 {
		if v, err := r.lab.Get(ctx, id); err != nil || v.Status != experiment.StatusRunning || v.Report == nil {
			t.Fatalf("GET a running experiment: %v %+v", err, v)
		}
	}
	if n := store.reads.Load() - before; n != 1 {
		t.Errorf("20 reads of a running experiment in a row read its outcomes %d times, not once", n)
	}
	close(gate)
	if err := r.lab.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}

	// Finished: the report kept is served, read from no outcome.
	made, err := r.lab.MakeReport(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	before = store.reads.Load()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			v, err := r.lab.Get(ctx, id)
			if err != nil || v.Status != experiment.StatusCompleted || v.Progress.Done != 10 || jsonOf(v.Report) != jsonOf(made) {
				t.Errorf("GET a finished experiment: %v, %s, %d done; its report is not the one made from its outcomes", err, v.Status, v.Progress.Done)
			}
		})
	}
	wg.Wait()
	rep, err := r.lab.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range experiment.ReportFormats {
		if got, want := rep.Render(f), made.Render(f); string(got) != string(want) {
			t.Errorf("%s of the report kept:\n%s\nmade from the outcomes:\n%s", f.File, got, want)
		}
	}
	if n := store.reads.Load() - before; n != 0 {
		t.Errorf("reading a finished experiment read its outcomes %d times", n)
	}

	// Finished with no report kept (by a server before this one, or of
	// another version): eight readers at once make one.
	kept, err := store.Experiment(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	kept.Report = nil
	if err := store.UpdateExperiment(ctx, kept); err != nil {
		t.Fatal(err)
	}
	before = store.reads.Load()
	for range 8 {
		wg.Go(func() {
			if v, err := r.lab.Get(ctx, id); err != nil || jsonOf(v.Report) != jsonOf(made) {
				t.Errorf("GET with no report kept: %v; its report of %d outcomes is not the one made from its outcomes", err, v.Report.Outcomes)
			}
		})
	}
	wg.Wait()
	if n := store.reads.Load() - before; n != 1 {
		t.Errorf("eight readers at once read the outcomes %d times, not once", n)
	}
}
