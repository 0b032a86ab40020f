package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"superego/flow"
)

// Store is a flow.Store in memory; its zero value is ready. Instances are lost
// with the process.
type Store struct {
	mu   sync.RWMutex // guards inst; an instance's own lock guards its logs
	inst map[string]*memInstance
}

// memInstance is an instance and its logs. The instance does not change
// once created; the logs change under mu, so that runs writing their own
// logs do not wait on each other.
type memInstance struct {
	flow.Instance
	mu     sync.Mutex
	events []flow.Event
	held   []flow.Event
}

var _ flow.Store = (*Store)(nil)

// Create is done at once.
func (m *Store) Create(inst flow.Instance, done func(error)) {
	done(m.create(inst))
}

func (m *Store) create(inst flow.Instance) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inst == nil {
		m.inst = map[string]*memInstance{}
	}
	if m.inst[inst.ID] != nil {
		return fmt.Errorf("instance %s exists", inst.ID)
	}
	// Room for a typical run's events; a conversation's log grows past it.
	m.inst[inst.ID] = &memInstance{Instance: inst, events: make([]flow.Event, 0, 16)}
	return nil
}

// lookup finds instance id.
func (m *Store) lookup(id string) (*memInstance, error) {
	m.mu.RLock()
	mi := m.inst[id]
	m.mu.RUnlock()
	if mi == nil {
		return nil, fmt.Errorf("instance %q: %w", id, flow.ErrNotFound)
	}
	return mi, nil
}

func (m *Store) Get(_ context.Context, id string) (flow.Instance, error) {
	mi, err := m.lookup(id)
	if err != nil {
		return flow.Instance{}, err
	}
	return mi.Instance, nil
}

func (m *Store) List(_ context.Context, opt flow.ListOptions) ([]flow.Summary, error) {
	if err := opt.Check(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	var out []flow.Summary
	for _, mi := range m.inst {
		if opt.FlowID != "" && mi.FlowID != opt.FlowID || !flow.Tagged(mi.Tags, opt.Tags) {
			continue
		}
		mi.mu.Lock()
		sum := flow.Summarize(mi.Instance, mi.events)
		mi.mu.Unlock()
		if opt.Status == "" || sum.Status == opt.Status {
			out = append(out, sum)
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	if opt.Limit > 0 && len(out) > opt.Limit {
		out = out[:opt.Limit]
	}
	return out, nil
}

// Append is done at once.
func (m *Store) Append(id string, events []flow.Event, done func(error)) {
	done(m.append(id, events, false))
}

// Settle is done at once.
func (m *Store) Settle(id string, events []flow.Event, done func(error)) {
	done(m.append(id, events, true))
}

func (m *Store) append(id string, events []flow.Event, settle bool) error {
	mi, err := m.lookup(id)
	if err != nil {
		return err
	}
	mi.mu.Lock()
	defer mi.mu.Unlock()
	last := int64(0)
	if n := len(mi.events); n > 0 {
		last = mi.events[n-1].ID
	}
	for _, e := range events {
		if e.ID <= last {
			return fmt.Errorf("instance %s: event %d after %d: ids only grow", id, e.ID, last)
		}
		last = e.ID
	}
	mi.events = append(mi.events, events...)
	if settle {
		mi.held = nil
	}
	return nil
}

// Hold is done at once.
func (m *Store) Hold(id string, e flow.Event, done func(error)) {
	done(m.hold(id, e))
}

func (m *Store) hold(id string, e flow.Event) error {
	mi, err := m.lookup(id)
	if err != nil {
		return err
	}
	mi.mu.Lock()
	defer mi.mu.Unlock()
	mi.held = append(mi.held, e)
	return nil
}

func (m *Store) Held(_ context.Context, id string) ([]flow.Event, error) {
	mi, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	mi.mu.Lock()
	defer mi.mu.Unlock()
	return append([]flow.Event(nil), mi.held...), nil
}

func (m *Store) Events(_ context.Context, id string, after int64) ([]flow.Event, error) {
	mi, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	mi.mu.Lock()
	defer mi.mu.Unlock()
	i := sort.Search(len(mi.events), func(i int) bool { return mi.events[i].ID > after })
	return append([]flow.Event(nil), mi.events[i:]...), nil
}
