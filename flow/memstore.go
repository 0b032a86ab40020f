package flow

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// MemStore is a Store in memory; its zero value is ready. Instances are lost
// with the process.
type MemStore struct {
	mu   sync.RWMutex
	inst map[string]*memInstance
}

type memInstance struct {
	Instance
	events []Event
	held   []Event
}

var _ Store = (*MemStore)(nil)

// Create is done at once.
func (m *MemStore) Create(inst Instance, done func(error)) {
	done(m.create(inst))
}

func (m *MemStore) create(inst Instance) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inst == nil {
		m.inst = map[string]*memInstance{}
	}
	if m.inst[inst.ID] != nil {
		return fmt.Errorf("instance %s exists", inst.ID)
	}
	// Room for a typical run's events; a conversation's log grows past it.
	m.inst[inst.ID] = &memInstance{Instance: inst, events: make([]Event, 0, 16)}
	return nil
}

func (m *MemStore) Get(_ context.Context, id string) (Instance, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mi := m.inst[id]
	if mi == nil {
		return Instance{}, fmt.Errorf("instance %q: %w", id, ErrNotFound)
	}
	return mi.Instance, nil
}

func (m *MemStore) List(_ context.Context, opt ListOptions) ([]Summary, error) {
	if err := opt.Check(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	var out []Summary
	for _, mi := range m.inst {
		if opt.FlowID != "" && mi.FlowID != opt.FlowID || !Tagged(mi.Tags, opt.Tags) {
			continue
		}
		if sum := Summarize(mi.Instance, mi.events); opt.Status == "" || sum.Status == opt.Status {
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
func (m *MemStore) Append(id string, events []Event, done func(error)) {
	done(m.append(id, events, false))
}

// Settle is done at once.
func (m *MemStore) Settle(id string, events []Event, done func(error)) {
	done(m.append(id, events, true))
}

func (m *MemStore) append(id string, events []Event, settle bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mi := m.inst[id]
	if mi == nil {
		return fmt.Errorf("instance %q: %w", id, ErrNotFound)
	}
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
func (m *MemStore) Hold(id string, e Event, done func(error)) {
	done(m.hold(id, e))
}

func (m *MemStore) hold(id string, e Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mi := m.inst[id]
	if mi == nil {
		return fmt.Errorf("instance %q: %w", id, ErrNotFound)
	}
	mi.held = append(mi.held, e)
	return nil
}

func (m *MemStore) Held(_ context.Context, id string) ([]Event, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mi := m.inst[id]
	if mi == nil {
		return nil, fmt.Errorf("instance %q: %w", id, ErrNotFound)
	}
	return append([]Event(nil), mi.held...), nil
}

func (m *MemStore) Events(_ context.Context, id string, after int64) ([]Event, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mi := m.inst[id]
	if mi == nil {
		return nil, fmt.Errorf("instance %q: %w", id, ErrNotFound)
	}
	i := sort.Search(len(mi.events), func(i int) bool { return mi.events[i].ID > after })
	return append([]Event(nil), mi.events[i:]...), nil
}
