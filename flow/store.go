package flow

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"
)

// Instance is a flow instance: a conversation with one flow whose log of
// events (and so of steps) grows with every run.
type Instance struct {
	ID        string    `json:"instance_id"`
	FlowID    string    `json:"flow_id"`
	CreatedAt time.Time `json:"created_at"`
}

// Summary is an instance as listed: its state derived from its log.
type Summary struct {
	Instance
	Status    string    `json:"status"`
	UpdatedAt time.Time `json:"updated_at"`
	Steps     int       `json:"steps"`
}

// ListOptions filter Store.List.
type ListOptions struct {
	FlowID string
	Limit  int
}

// Store keeps instances and their event logs. Events are appended, never
// changed; everything else about an instance is derived from them.
// Partial outputs are never stored.
type Store interface {
	Create(ctx context.Context, inst Instance) error
	Get(ctx context.Context, id string) (Instance, error)
	List(ctx context.Context, opt ListOptions) ([]Summary, error)
	Append(ctx context.Context, id string, e Event) error
	Events(ctx context.Context, id string, after int64) ([]Event, error)
}

// State is what an instance's log says about it.
type State struct {
	Steps     []Step
	Status    string
	UpdatedAt time.Time
	LastID    int64
}

// Replay derives an instance's state from its events.
func Replay(events []Event) State {
	st := State{Status: StatusNew}
	for _, e := range events {
		st.LastID, st.UpdatedAt = e.ID, e.Time
		switch d := e.Data.(type) {
		case Step:
			st.Steps = append(st.Steps, d)
		case RunStart:
			st.Status = StatusRunning
		case Done:
			st.Status = d.Status
		}
	}
	return st
}

// Summarize derives an instance's summary from its events.
func Summarize(inst Instance, events []Event) Summary {
	st := Replay(events)
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = inst.CreatedAt
	}
	return Summary{inst, st.Status, st.UpdatedAt, len(st.Steps)}
}

// NewID returns a random UUID (version 4).
func NewID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
