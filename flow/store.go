package flow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"time"
)

// Instance is a flow instance: a conversation with one flow whose log of
// events (and so of steps) grows with every run.
type Instance struct {
	ID        string    `json:"instance_id"`
	FlowID    string    `json:"flow_id"`
	CreatedAt time.Time `json:"created_at"`
	// Tags say what the instance was made for: an experiment's instances
	// carry their run's tags (RunOptions.Tags), so that a listing shows
	// them and can pick an experiment's instances out.
	Tags map[string]string `json:"tags,omitempty"`
}

// Summary is an instance as listed: its state derived from its log.
type Summary struct {
	Instance
	Status    string    `json:"status"`
	UpdatedAt time.Time `json:"updated_at"`
	Steps     int       `json:"steps"`
}

// ListOptions filter Store.List; zero values filter nothing.
type ListOptions struct {
	FlowID string
	Status string
	Limit  int
	// Tags pick the instances that carry every one of them. Their names
	// must be tag names (TagName).
	Tags map[string]string
}

// tagName is what a tag's name may be, to be found in a listing's filter:
// a store puts it into its query as a JSON path.
var tagName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// TagName reports whether name may name a tag in ListOptions.Tags.
func TagName(name string) bool { return tagName.MatchString(name) }

// Check is ErrInvalid for a tag whose name is not a tag name.
func (o ListOptions) Check() error {
	for k := range o.Tags {
		if !TagName(k) {
			return fmt.Errorf("tag %q: a tag's name is letters, digits, _ and -: %w", k, ErrInvalid)
		}
	}
	return nil
}

// Tagged reports whether tags hold every tag of want.
func Tagged(tags, want map[string]string) bool {
	for k, v := range want {
		if got, ok := tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Store keeps instances and their event logs. Events are appended, never
// changed; everything else about an instance is derived from them.
// Partial outputs are never stored.
//
// Writes are queued: Create, Append, Hold and Settle return at once, and
// call done when the write is durable, or has failed, in the order they
// were queued. A run goes on while its events are being written, and a
// client is shown an event only once it is durable, so a store can commit
// many events at once without a client ever seeing one it could lose.
//
// Held events are the events of a turn no superego has judged yet (docs/gating.md):
// durable as they happen, so that a crash loses nothing, but kept
// apart from the log, where no client path can read them. Settle ends a
// held turn: in one write it appends what the judgement lets clients see
// and drops the instance's held events.
type Store interface {
	Create(inst Instance, done func(error))
	// Append writes events to the instance's log, all of them or none.
	Append(id string, events []Event, done func(error))
	// Hold writes a held event, after the instance's other held events.
	Hold(id string, e Event, done func(error))
	// Settle appends events as Append does and drops the instance's held
	// events, in one write.
	Settle(id string, events []Event, done func(error))
	Get(ctx context.Context, id string) (Instance, error)
	List(ctx context.Context, opt ListOptions) ([]Summary, error)
	// Events are the instance's logged events after the given id.
	Events(ctx context.Context, id string, after int64) ([]Event, error)
	// Held are the instance's held events, in the order they were held.
	Held(ctx context.Context, id string) ([]Event, error)
}

// Wait queues a write and waits until it is durable.
func Wait(write func(done func(error))) error {
	errc := make(chan error, 1)
	write(func(err error) { errc <- err })
	return <-errc
}

// State is what an instance's log says about it.
type State struct {
	Steps     []Step
	Status    string
	UpdatedAt time.Time
	LastID    int64
	// The last run's start: its event's id, and the options it ran with,
	// which a run that resumes keeps.
	RunStartID int64
	Options    RunOptions
	// Unfinished are the tool calls of an iteration the log has begun
	// and not ended: where a run that was interrupted goes on (docs/actions.md).
	Unfinished Unfinished
}

// Replay derives an instance's state from its events.
func Replay(events []Event) State {
	st := State{Status: StatusNew, Steps: []Step{}} // a list, even when empty: clients see []
	for _, e := range events {
		st.LastID, st.UpdatedAt = e.ID, e.Time
		st.Unfinished.See(e)
		switch d := e.Data.(type) {
		case *Step:
			st.Steps = append(st.Steps, *d)
		case RunStart:
			st.Status, st.RunStartID, st.Options = StatusRunning, e.ID, d.RunOptions
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

// NewID returns a UUID of version 7: the time in milliseconds, then
// random bits. IDs made later sort later, so a store's index on them grows
// at one end, in pages that are already in its cache, instead of in a
// random page each time.
func NewID() string {
	var b [16]byte
	rand.Read(b[6:])
	ms := time.Now().UnixMilli()
	for i := 5; i >= 0; i-- {
		b[i], ms = byte(ms), ms>>8
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	hex.Encode(s[9:13], b[4:6])
	hex.Encode(s[14:18], b[6:8])
	hex.Encode(s[19:23], b[8:10])
	hex.Encode(s[24:], b[10:])
	s[8], s[13], s[18], s[23] = '-', '-', '-', '-'
	return string(s[:])
}

// Hidden is a step's hidden fields, kept apart from its visible JSON by
// stores and shown only by the research view: the model's private
// reasoning and guidance, and what a withheld step held. Its names differ
// from the visible fields', so that a Research's JSON has both.
type Hidden struct {
	Thinking          string    `json:"thinking"`
	AgentGuidance     string    `json:"agent_guidance"`
	WithheldResponse  string    `json:"withheld_response,omitempty"`
	WithheldToolUsage []ToolUse `json:"withheld_tool_usage,omitempty"`
	// WithheldOutput are the results a result judge kept from the model
	// (docs/actions.md), by tool call id.
	WithheldOutput map[string]string `json:"withheld_output,omitempty"`
}

// HiddenOf returns the step's hidden fields.
func HiddenOf(s Step) Hidden {
	h := Hidden{s.Thinking, s.AgentGuidance, s.WithheldResponse, s.WithheldToolUsage, nil}
	for _, uses := range [][]ToolUse{s.ToolUsage, s.WithheldToolUsage} {
		for _, u := range uses {
			if u.WithheldOutput != "" {
				if h.WithheldOutput == nil {
					h.WithheldOutput = map[string]string{}
				}
				h.WithheldOutput[u.ID] = u.WithheldOutput
			}
		}
	}
	return h
}

// withHidden gives a step back its hidden fields.
func withHidden(s *Step, h Hidden) {
	s.Thinking, s.AgentGuidance = h.Thinking, h.AgentGuidance
	s.WithheldResponse, s.WithheldToolUsage = h.WithheldResponse, h.WithheldToolUsage
	for _, uses := range [][]ToolUse{s.ToolUsage, s.WithheldToolUsage} {
		for i := range uses {
			if out, ok := h.WithheldOutput[uses[i].ID]; ok {
				uses[i].WithheldOutput = out
			}
		}
	}
}

// DecodeEvent rebuilds an event's payload from its name and visible JSON,
// and for a step, its hidden fields; stores that serialise events use it.
func DecodeEvent(name string, data []byte, hidden Hidden) (any, error) {
	var v any
	switch name {
	case EventRunStart:
		v = &RunStart{}
	case EventNodeStart:
		v = &NodeStart{}
	case EventPartial:
		v = &Partial{}
	case EventToolCall:
		v = &ToolCall{}
	case EventToolResult:
		v = &ToolResult{}
	case EventCompleteStep:
		v = &Step{}
	case EventError:
		v = &ErrorData{}
	case EventDone:
		v = &Done{}
	default:
		return nil, fmt.Errorf("unknown event %q", name)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("decode %s event: %w", name, err)
	}
	if s, ok := v.(*Step); ok {
		withHidden(s, hidden)
		return s, nil // a step goes by reference (Event)
	}
	return reflect.ValueOf(v).Elem().Interface(), nil
}

// Research is a step with its hidden fields: for the research view and full
// exports only.
type Research struct {
	Step
	Hidden
}

// ResearchSteps pairs each step with its hidden fields.
func ResearchSteps(steps []Step) []Research {
	out := make([]Research, len(steps))
	for i, s := range steps {
		out[i] = Research{s, HiddenOf(s)}
	}
	return out
}

// NewCallID returns 128 random bits in hex: the id of a call a client is
// sent (docs/gateway.md), which no one can guess.
func NewCallID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Unfinished are the tool calls of a node's iteration that began and has
// no step yet, as its events have them: a run interrupted there resumes by
// recording the iteration's step, each call that began with its result if
// it has one, and otherwise answered as interrupted. None of them runs again (docs/actions.md:
// at most once).
type Unfinished struct {
	Node  string
	Calls []ToolUse
	Ended []bool // Calls[i] has its result
}

// See follows an instance's events: tool calls begin an iteration's list,
// their results fill it, and the node's step, or a run's start or end,
// closes it.
func (u *Unfinished) See(ev Event) {
	switch d := ev.Data.(type) {
	case ToolCall:
		if d.Node != u.Node {
			*u = Unfinished{Node: d.Node}
		}
		u.Calls = append(u.Calls, ToolUse{ID: d.ToolCallID, ToolName: d.ToolName, Input: d.Input})
		u.Ended = append(u.Ended, false)
	case ToolResult:
		for i := range u.Calls {
			if c := &u.Calls[i]; !u.Ended[i] && c.ID == d.ToolCallID && c.ToolName == d.ToolName {
				c.Output, c.Error, c.Refused, u.Ended[i] = d.Output, d.Error, d.Refused, true
				if d.Refused {
					c.JudgedBy = d.JudgedBy
				} else {
					c.ResultJudgedBy = d.JudgedBy
				}
				break
			}
		}
	case *Step:
		if d.Node == u.Node && d.Judged == nil {
			*u = Unfinished{}
		}
	case RunStart, Done:
		*u = Unfinished{}
	}
}
