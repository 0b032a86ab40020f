// Package storetest checks that an implementation of flow.Store keeps the
// contract: instances, an append-only event log per instance, hidden fields
// kept, and state derived from the log.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"superego/flow"
)

func create(s flow.Store, inst flow.Instance) error {
	return flow.Wait(func(done func(error)) { s.Create(inst, done) })
}

func appendSync(s flow.Store, id string, e ...flow.Event) error {
	return flow.Wait(func(done func(error)) { s.Append(id, e, done) })
}

// Run runs the contract's tests on stores made by open, one a test.
func Run(t *testing.T, open func(t *testing.T) flow.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	next := "b"
	step := flow.Step{StepID: "2", AgentID: "a", Node: "a", Role: flow.RoleAssistant, Timestamp: t0, Input: "in", Decision: "ACCEPT",
		Constitution: "Be kind.", SystemPrompt: "You add.", // a store may keep these apart; they come back as they went in
		Response: "out", NextAgent: &next, Thinking: "T-hidden", AgentGuidance: "G-hidden",
		ToolUsage: []flow.ToolUse{{ID: "c1", ToolName: "calculator", Input: []byte(`{"expression":"1+1"}`), Output: "2"}}}
	run := []flow.Event{
		{ID: 1, Name: flow.EventRunStart, Time: t0, Data: flow.RunStart{InstanceID: "i1", RunID: "r1", FlowID: "f"}},
		{ID: 2, Name: flow.EventCompleteStep, Time: t0, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Timestamp: t0, Response: "hi", NextAgent: &next}},
		{ID: 3, Name: flow.EventNodeStart, Time: t0, Data: flow.NodeStart{Node: "a", AgentID: "a"}},
		{ID: 4, Name: flow.EventToolCall, Time: t0, Data: flow.ToolCall{Node: "a", ToolName: "calculator", Input: []byte(`{}`)}},
		{ID: 5, Name: flow.EventToolResult, Time: t0, Data: flow.ToolResult{Node: "a", ToolName: "calculator", Output: "2"}},
		{ID: 6, Name: flow.EventCompleteStep, Time: t0.Add(time.Second), Data: &step},
		{ID: 7, Name: flow.EventError, Time: t0.Add(time.Second), Data: flow.ErrorData{Code: "timeout", Message: "slow"}},
		{ID: 8, Name: flow.EventDone, Time: t0.Add(2 * time.Second), Data: flow.Done{InstanceID: "i1", Status: flow.StatusFailed, Response: "out"}},
	}

	t.Run("instances", func(t *testing.T) {
		s := open(t)
		if err := create(s, flow.Instance{ID: "i1", FlowID: "f", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if err := create(s, flow.Instance{ID: "i1", FlowID: "f", CreatedAt: t0}); err == nil {
			t.Error("created the same instance twice")
		}
		got, err := s.Get(ctx, "i1")
		if err != nil || got.FlowID != "f" || !got.CreatedAt.Equal(t0) {
			t.Errorf("get: %+v %v", got, err)
		}
		if _, err := s.Get(ctx, "nope"); !errors.Is(err, flow.ErrNotFound) {
			t.Errorf("get missing: %v", err)
		}
		if _, err := s.Events(ctx, "nope", 0); !errors.Is(err, flow.ErrNotFound) {
			t.Errorf("events of missing: %v", err)
		}
		if err := appendSync(s, "nope", run[0]); err == nil {
			t.Error("appended to a missing instance")
		}
	})

	t.Run("events round-trip, hidden fields kept", func(t *testing.T) {
		s := open(t)
		create(s, flow.Instance{ID: "i1", FlowID: "f", CreatedAt: t0})
		for _, e := range run {
			if err := appendSync(s, "i1", e); err != nil {
				t.Fatal(err)
			}
		}
		if err := appendSync(s, "i1", run[3]); err == nil {
			t.Error("appended event 4 twice")
		}
		got, err := s.Events(ctx, "i1", 0)
		if err != nil || len(got) != len(run) {
			t.Fatalf("%d events, %v", len(got), err)
		}
		for i := range run {
			if !got[i].Time.Equal(run[i].Time) || got[i].ID != run[i].ID || got[i].Name != run[i].Name || !reflect.DeepEqual(got[i].Data, run[i].Data) {
				t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], run[i])
			}
		}
		after, _ := s.Events(ctx, "i1", 5)
		if len(after) != 3 || after[0].ID != 6 {
			t.Errorf("events after 5: %d", len(after))
		}
	})

	t.Run("a write of several events is whole or nothing", func(t *testing.T) {
		s := open(t)
		create(s, flow.Instance{ID: "i1", FlowID: "f", CreatedAt: t0})
		if err := appendSync(s, "i1", run[0], run[1]); err != nil {
			t.Fatal(err)
		}
		// Event 2 again, in the middle of a write: the write fails whole.
		if err := appendSync(s, "i1", run[2], run[1], run[3]); err == nil {
			t.Error("a write with an event that does not follow was taken")
		}
		if got, _ := s.Events(ctx, "i1", 0); len(got) != 2 {
			t.Errorf("%d events after a failed write of three, want the 2 before it", len(got))
		}
	})

	t.Run("held events are kept apart, then settled", func(t *testing.T) {
		s := open(t)
		create(s, flow.Instance{ID: "i1", FlowID: "f", CreatedAt: t0})
		appendSync(s, "i1", run[0], run[1], run[2])
		draft := step
		draft.StepID, draft.Response = "3", "DRAFT-secret"
		held := []flow.Event{
			{Name: flow.EventToolCall, Data: flow.ToolCall{Node: "a", ToolName: "calculator", Input: []byte(`{}`)}},
			{Name: flow.EventCompleteStep, Data: &draft},
		}
		for _, e := range held {
			if err := flow.Wait(func(done func(error)) { s.Hold("i1", e, done) }); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Held(ctx, "i1")
		if err != nil || len(got) != 2 || !reflect.DeepEqual(got[0].Data, held[0].Data) || !reflect.DeepEqual(got[1].Data, held[1].Data) {
			t.Fatalf("held: %+v %v", got, err)
		}
		events, _ := s.Events(ctx, "i1", 0)
		list, _ := s.List(ctx, flow.ListOptions{})
		if len(events) != 3 || list[0].Steps != 1 {
			t.Errorf("held events are in the log: %d events, %d steps listed", len(events), list[0].Steps)
		}
		withheld := draft
		withheld.Withheld, withheld.WithheldResponse, withheld.Response, withheld.ToolUsage = "out", draft.Response, "", nil
		withheld.WithheldToolUsage = draft.ToolUsage
		settled := []flow.Event{{ID: 4, Name: flow.EventCompleteStep, Time: t0, Data: &withheld}, run[7]}
		if err := flow.Wait(func(done func(error)) { s.Settle("i1", settled, done) }); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Held(ctx, "i1"); err != nil || len(got) != 0 {
			t.Errorf("held after settling: %d, %v", len(got), err)
		}
		events, _ = s.Events(ctx, "i1", 3)
		if len(events) != 2 || !reflect.DeepEqual(events[0].Data, &withheld) {
			t.Errorf("settled events: %+v", events)
		}
		if _, err := s.Held(ctx, "nope"); !errors.Is(err, flow.ErrNotFound) {
			t.Errorf("held of missing: %v", err)
		}
	})

	t.Run("holds and settles queued together keep their order", func(t *testing.T) {
		s := open(t)
		create(s, flow.Instance{ID: "i1", FlowID: "f", CreatedAt: t0})
		appendSync(s, "i1", run[0])
		// Queued without waiting, so that a store may commit them at once:
		// the settle drops the two holds before it, not the one after.
		errs := make(chan error, 4)
		done := func(err error) { errs <- err }
		hold := func(node string) flow.Event {
			return flow.Event{Name: flow.EventNodeStart, Data: flow.NodeStart{Node: node, AgentID: node}}
		}
		s.Hold("i1", hold("a"), done)
		s.Hold("i1", hold("b"), done)
		s.Settle("i1", []flow.Event{run[1]}, done)
		s.Hold("i1", hold("c"), done)
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Held(ctx, "i1")
		if err != nil || len(got) != 1 || got[0].Data.(flow.NodeStart).Node != "c" {
			t.Errorf("held after hold, hold, settle, hold: %+v %v", got, err)
		}
		if events, _ := s.Events(ctx, "i1", 0); len(events) != 2 {
			t.Errorf("%d events logged, want 2", len(events))
		}
	})

	t.Run("a settle that fails drops no held event", func(t *testing.T) {
		s := open(t)
		create(s, flow.Instance{ID: "i1", FlowID: "f", CreatedAt: t0})
		appendSync(s, "i1", run[0], run[1])
		if err := flow.Wait(func(done func(error)) { s.Hold("i1", run[2], done) }); err != nil {
			t.Fatal(err)
		}
		// Event 2 again: the log refuses it, and the settle fails whole.
		if err := flow.Wait(func(done func(error)) { s.Settle("i1", []flow.Event{run[1]}, done) }); err == nil {
			t.Error("a settle with an event that does not follow was taken")
		}
		if got, err := s.Held(ctx, "i1"); err != nil || len(got) != 1 {
			t.Errorf("held after a failed settle: %d, %v", len(got), err)
		}
	})

	t.Run("listing derives state", func(t *testing.T) {
		s := open(t)
		for i, id := range []string{"old", "mid", "new"} {
			create(s, flow.Instance{ID: id, FlowID: map[bool]string{true: "g", false: "f"}[id == "mid"], CreatedAt: t0.Add(time.Duration(i) * time.Hour)})
		}
		for _, e := range run {
			appendSync(s, "old", e)
		}
		appendSync(s, "mid", run[0])
		list, err := s.List(ctx, flow.ListOptions{})
		if err != nil || len(list) != 3 {
			t.Fatalf("list: %+v %v", list, err)
		}
		got := fmt.Sprint(list[0].ID, list[0].Status, list[0].Steps, " ", list[1].ID, list[1].Status, " ", list[2].ID, list[2].Status, list[2].Steps)
		if want := "newnew0 midrunning oldfailed2"; got != want {
			t.Errorf("list: %s, want %s", got, want)
		}
		if !list[2].UpdatedAt.Equal(t0.Add(2*time.Second)) || !list[0].UpdatedAt.Equal(list[0].CreatedAt) {
			t.Errorf("updated_at: %v, %v", list[2].UpdatedAt, list[0].UpdatedAt)
		}
		for _, c := range []struct {
			opt  flow.ListOptions
			want string
		}{
			{flow.ListOptions{Limit: 2}, "[new mid]"},
			{flow.ListOptions{FlowID: "g"}, "[mid]"},
			{flow.ListOptions{Status: flow.StatusRunning}, "[mid]"},
			{flow.ListOptions{Status: flow.StatusFailed, Limit: 1}, "[old]"},
		} {
			l, _ := s.List(ctx, c.opt)
			var ids []string
			for _, x := range l {
				ids = append(ids, x.ID)
			}
			if fmt.Sprint(ids) != c.want {
				t.Errorf("list %+v: %v, want %s", c.opt, ids, c.want)
			}
		}
	})

	t.Run("tags", func(t *testing.T) {
		s := open(t)
		tagged := map[string]flow.Instance{
			"a1": {ID: "a1", FlowID: "f", CreatedAt: t0, Tags: map[string]string{"experiment": "A", "condition": "bare", "repeat": "0"}},
			"a2": {ID: "a2", FlowID: "g", CreatedAt: t0.Add(time.Minute), Tags: map[string]string{"experiment": "A", "condition": "superego", "repeat": "0"}},
			"b1": {ID: "b1", FlowID: "f", CreatedAt: t0.Add(2 * time.Minute), Tags: map[string]string{"experiment": "B", "condition": "bare", "repeat": "0"}},
			"u":  {ID: "u", FlowID: "f", CreatedAt: t0.Add(3 * time.Minute)},
		}
		for _, inst := range tagged {
			if err := create(s, inst); err != nil {
				t.Fatal(err)
			}
		}
		appendSync(s, "a1", run[0])
		for id, want := range tagged {
			if got, err := s.Get(ctx, id); err != nil || !reflect.DeepEqual(got.Tags, want.Tags) {
				t.Errorf("get %s: tags %v %v, want %v", id, got.Tags, err, want.Tags)
			}
		}
		for _, c := range []struct {
			tags map[string]string
			want string
		}{
			{nil, "[u:map[] b1:map[condition:bare experiment:B repeat:0] a2:map[condition:superego experiment:A repeat:0] a1:map[condition:bare experiment:A repeat:0]]"},
			{map[string]string{"experiment": "A"}, "[a2:map[condition:superego experiment:A repeat:0] a1:map[condition:bare experiment:A repeat:0]]"},
			{map[string]string{"experiment": "A", "condition": "bare"}, "[a1:map[condition:bare experiment:A repeat:0]]"},
			{map[string]string{"condition": "bare"}, "[b1:map[condition:bare experiment:B repeat:0] a1:map[condition:bare experiment:A repeat:0]]"},
			{map[string]string{"experiment": "C"}, "[]"},
			{map[string]string{"sample": "1"}, "[]"},
		} {
			l, err := s.List(ctx, flow.ListOptions{Tags: c.tags})
			got := []string{}
			for _, x := range l {
				got = append(got, fmt.Sprintf("%s:%v", x.ID, x.Tags))
			}
			if err != nil || fmt.Sprint(got) != c.want {
				t.Errorf("list tagged %v: %v %v, want %s", c.tags, got, err, c.want)
			}
		}
		if l, err := s.List(ctx, flow.ListOptions{Tags: map[string]string{"experiment": "A"}, Limit: 1}); err != nil || len(l) != 1 || l[0].ID != "a2" {
			t.Errorf("list tagged, limited: %+v %v", l, err)
		}
		for _, name := range []string{"", "a'b", "a.b", "$.x"} {
			if _, err := s.List(ctx, flow.ListOptions{Tags: map[string]string{name: "x"}}); !errors.Is(err, flow.ErrInvalid) {
				t.Errorf("a tag named %q: %v, want ErrInvalid", name, err)
			}
		}
	})

	t.Run("queued writes are done in order", func(t *testing.T) {
		s := open(t)
		var mu sync.Mutex
		var order []int64
		all := make(chan struct{})
		s.Create(flow.Instance{ID: "q", FlowID: "f", CreatedAt: t0}, func(err error) {
			if err != nil {
				t.Error(err)
			}
		})
		const n = 300
		for i := int64(1); i <= n; i++ {
			s.Append("q", []flow.Event{{ID: i, Name: flow.EventNodeStart, Time: t0, Data: flow.NodeStart{Node: "a"}}}, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
				}
				if order = append(order, i); len(order) == n {
					close(all)
				}
			})
		}
		<-all
		for i, id := range order {
			if id != int64(i+1) {
				t.Fatalf("done called for event %d in place %d", id, i+1)
			}
		}
		// Done means durable: the events are there to read.
		if ev, err := s.Events(ctx, "q", 0); err != nil || len(ev) != n {
			t.Errorf("%d events readable after done, %v", len(ev), err)
		}
	})

	t.Run("concurrent appends, read while written", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		for i := range 20 {
			id := fmt.Sprint("c", i)
			create(s, flow.Instance{ID: id, FlowID: "f", CreatedAt: t0})
			wg.Go(func() {
				for n := int64(1); n <= 50; n++ {
					if err := appendSync(s, id, flow.Event{ID: n, Name: flow.EventNodeStart, Time: t0, Data: flow.NodeStart{Node: "a"}}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		// Readers of every kind meanwhile: each sees whole instances.
		stop := make(chan struct{})
		var readers sync.WaitGroup
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if list, err := s.List(ctx, flow.ListOptions{FlowID: "f"}); err != nil || len(list) != 20 {
					t.Errorf("listed %d instances while appending, %v", len(list), err)
					return
				}
				if _, err := s.Events(ctx, "c3", 0); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Held(ctx, "c4"); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Wait()
		close(stop)
		readers.Wait()
		for i := range 20 {
			if ev, _ := s.Events(ctx, fmt.Sprint("c", i), 0); len(ev) != 50 || ev[49].ID != 50 {
				t.Errorf("instance c%d has %d events", i, len(ev))
			}
		}
	})
}
