package experiment

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"superego/flow"
)

// Store keeps experiments: each one's plan and status, and for each of its
// outcomes the instance that runs it and, once that run has ended, the
// outcome. The SQLite and PostgreSQL stores implement it beside their
// logs; MemStore keeps it in memory.
type Store interface {
	CreateExperiment(ctx context.Context, r Record) error
	// UpdateExperiment changes an experiment's status, plan and report,
	// at once (a nil Report drops the one kept), and its Out where r's is
	// set.
	UpdateExperiment(ctx context.Context, r Record) error
	// Experiment is flow.ErrNotFound for an unknown id.
	Experiment(ctx context.Context, id string) (Record, error)
	// Experiments are every experiment, newest first, without their
	// reports.
	Experiments(ctx context.Context) ([]Record, error)
	// BeginOutcome records the instance that runs a slot, replacing one
	// recorded before, whose run did not end in an outcome; it is durable
	// before the run starts, so that a resumed experiment finds the run.
	BeginOutcome(ctx context.Context, experiment string, s Slot, instance string) error
	// FinishOutcome records the slot's outcome, as results.jsonl has it.
	FinishOutcome(ctx context.Context, experiment string, s Slot, outcome []byte) error
	// Outcomes are the experiment's slots begun, with their outcomes
	// where finished.
	Outcomes(ctx context.Context, experiment string) ([]Kept, error)
}

// Record is an experiment as a store keeps it.
type Record struct {
	ID        string
	Name      string
	CreatedAt time.Time
	Status    string
	Plan      []byte // the Plan's JSON
	// Out is the directory, absolute, where the command line writes the
	// experiment's results.jsonl, report.json and report.md: each command
	// on it writes there unless told otherwise. "" until one has.
	Out string
	// Report is what the lab kept of the experiment's report when it
	// completed, nil where it kept none: the report of outcomes that no
	// session changes until one starts, which drops it.
	Report []byte
}

// Kept is a slot as a store keeps it: its instance, and its outcome's
// JSON once finished (nil before).
type Kept struct {
	Slot
	Instance string
	Outcome  []byte
}

// Statuses of an experiment.
const (
	// StatusRunning: its outcomes are being run, or were when the process
	// running them stopped; a server resumes it when it starts.
	StatusRunning = "running"
	// StatusStopped: the process running it was stopped (Ctrl-C), to be
	// resumed by hand.
	StatusStopped   = "stopped"
	StatusCancelled = "cancelled"
	StatusCompleted = "completed"
)

// MemStore is a Store, and a reply cache, in memory: for --db memory and
// tests. Its zero value is ready.
type MemStore struct {
	mu       sync.Mutex
	records  map[string]Record
	outcomes map[string]map[Slot]Kept
	replies  map[string][]byte
}

var _ Store = (*MemStore)(nil)

func (m *MemStore) CreateExperiment(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records, m.outcomes = map[string]Record{}, map[string]map[Slot]Kept{}
	}
	if _, ok := m.records[r.ID]; ok {
		return fmt.Errorf("experiment %s exists", r.ID)
	}
	m.records[r.ID], m.outcomes[r.ID] = r, map[Slot]Kept{}
	return nil
}

func (m *MemStore) UpdateExperiment(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.records[r.ID]
	if !ok {
		return fmt.Errorf("experiment %q: %w", r.ID, flow.ErrNotFound)
	}
	old.Status, old.Plan, old.Report = r.Status, r.Plan, r.Report
	if r.Out != "" {
		old.Out = r.Out
	}
	m.records[r.ID] = old
	return nil
}

func (m *MemStore) Experiment(_ context.Context, id string) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	if !ok {
		return Record{}, fmt.Errorf("experiment %q: %w", id, flow.ErrNotFound)
	}
	return r, nil
}

func (m *MemStore) Experiments(context.Context) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.records))
	for _, r := range m.records {
		r.Report = nil
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
	})
	return out, nil
}

func (m *MemStore) BeginOutcome(_ context.Context, experiment string, s Slot, instance string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept, ok := m.outcomes[experiment]
	if !ok {
		return fmt.Errorf("experiment %q: %w", experiment, flow.ErrNotFound)
	}
	kept[s] = Kept{Slot: s, Instance: instance}
	return nil
}

func (m *MemStore) FinishOutcome(_ context.Context, experiment string, s Slot, outcome []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.outcomes[experiment][s]
	if !ok {
		return fmt.Errorf("experiment %q: the outcome of %v was not begun", experiment, s)
	}
	k.Outcome = outcome
	m.outcomes[experiment][s] = k
	return nil
}

func (m *MemStore) Outcomes(_ context.Context, experiment string) ([]Kept, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept, ok := m.outcomes[experiment]
	if !ok {
		return nil, fmt.Errorf("experiment %q: %w", experiment, flow.ErrNotFound)
	}
	out := make([]Kept, 0, len(kept))
	for _, k := range kept {
		out = append(out, k)
	}
	return out, nil
}

// Reply and Keep make MemStore an agents.ReplyCache.
func (m *MemStore) Reply(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.replies[key]
	return b, ok, nil
}

func (m *MemStore) Keep(_ context.Context, key string, reply []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.replies == nil {
		m.replies = map[string][]byte{}
	}
	if _, ok := m.replies[key]; !ok {
		m.replies[key] = reply
	}
	return nil
}
