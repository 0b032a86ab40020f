package storetest

import (
	"errors"
	"slices"
	"sync"

	"superego/flow"
)

// ErrFull is the error of a write to a Full store that is full.
var ErrFull = errors.New("database or disk is full")

// Full is a store on a disk that fills up: from the write Fills picks on,
// every write fails as a full disk's does, until Room. Reads go on.
type Full struct {
	flow.Store
	// Fills picks the write that fills the disk: an instance's creation,
	// or a write of events.
	Fills func(create bool, events []flow.Event) bool

	mu     sync.Mutex
	full   bool
	failed map[int64]bool
}

// Has picks a write that holds an event named name.
func Has(name string) func(bool, []flow.Event) bool {
	return func(_ bool, events []flow.Event) bool {
		return slices.ContainsFunc(events, func(e flow.Event) bool { return e.Name == name })
	}
}

// Room makes room: writes succeed again, and none fills the disk.
func (s *Full) Room() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full, s.Fills = false, nil
}

// Failed reports whether the write of an event with this id failed.
func (s *Full) Failed(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed[id]
}

func (s *Full) refuses(create bool, events []flow.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full && s.Fills != nil && s.Fills(create, events) {
		s.full = true
	}
	if s.full {
		if s.failed == nil {
			s.failed = map[int64]bool{}
		}
		for _, ev := range events {
			s.failed[ev.ID] = true
		}
	}
	return s.full
}

func (s *Full) Create(inst flow.Instance, done func(error)) {
	if s.refuses(true, nil) {
		done(ErrFull)
		return
	}
	s.Store.Create(inst, done)
}

func (s *Full) Append(id string, events []flow.Event, done func(error)) {
	if s.refuses(false, events) {
		done(ErrFull)
		return
	}
	s.Store.Append(id, events, done)
}

func (s *Full) Settle(id string, events []flow.Event, done func(error)) {
	if s.refuses(false, events) {
		done(ErrFull)
		return
	}
	s.Store.Settle(id, events, done)
}

func (s *Full) Hold(id string, e flow.Event, done func(error)) {
	if s.refuses(false, []flow.Event{e}) {
		done(ErrFull)
		return
	}
	s.Store.Hold(id, e, done)
}
