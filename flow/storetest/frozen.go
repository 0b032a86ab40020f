package storetest

import (
	"encoding/json"
	"sync"
	"testing"

	"superego/flow"
)

// Records keeps each step record as it was when it first went into an
// event: a run's log shares its records with their events (flow.Event), so
// none may change once it is in one, hidden fields included. Its zero value
// is ready.
type Records struct {
	mu   sync.Mutex
	seen map[*flow.Step]string
}

// See keeps the step records of evs not seen before.
func (r *Records) See(evs ...flow.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[*flow.Step]string{}
	}
	for _, e := range evs {
		if s, ok := e.Data.(*flow.Step); ok {
			if _, ok := r.seen[s]; !ok {
				r.seen[s] = encoded(s)
			}
		}
	}
}

// Check fails tb for each record that changed since it was first seen.
func (r *Records) Check(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, was := range r.seen {
		if now := encoded(s); now != was {
			tb.Errorf("step %s changed after it went into an event:\n was %s\n now %s", s.StepID, was, now)
		}
	}
}

func encoded(s *flow.Step) string {
	b, _ := json.Marshal(flow.Research{Step: *s, Hidden: flow.HiddenOf(*s)}) // strings and tool uses: cannot fail
	return string(b)
}

// Frozen is store, whose events' step records are checked when the test
// ends not to have changed since they were written or held.
func Frozen(tb testing.TB, store flow.Store) flow.Store {
	f := &frozen{Store: store}
	tb.Cleanup(func() { f.r.Check(tb) })
	return f
}

type frozen struct {
	flow.Store
	r Records
}

func (f *frozen) Append(id string, events []flow.Event, done func(error)) {
	f.r.See(events...)
	f.Store.Append(id, events, done)
}

func (f *frozen) Settle(id string, events []flow.Event, done func(error)) {
	f.r.See(events...)
	f.Store.Settle(id, events, done)
}

func (f *frozen) Hold(id string, e flow.Event, done func(error)) {
	f.r.See(e)
	f.Store.Hold(id, e, done)
}
