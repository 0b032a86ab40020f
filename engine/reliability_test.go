package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"superego/engine"
	"superego/flow"
	"superego/flow/storetest"
	"superego/memstore"
	"superego/sqlite"
)

// failingFirst is a store whose first write of a run's events fails, as a
// crash between them would leave it.
type failingFirst struct {
	memstore.Store
	failed bool
}

func (s *failingFirst) Append(id string, events []flow.Event, done func(error)) {
	if !s.failed {
		s.failed = true
		done(errors.New("disk gone"))
		return
	}
	s.Store.Append(id, events, done)
}

// A run's start and its user's message are one write: when it fails, the
// log holds neither, and no restart finds a run that cannot resume.
func TestRunStartAndUserStepAreOneWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &failingFirst{}
	e := newEngine(t, agentFunc(func(*engine.Task) (engine.Reply, error) { return reply("ACCEPT", ""), nil }), 0)
	e.Store = store
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	drain(sub)
	events, err := store.Events(ctx, sub.Instance, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.Name == flow.EventRunStart {
			t.Errorf("run_start was recorded without the user's step: %+v", events)
		}
	}
	e2 := newEngine(t, newGated(), 0)
	e2.Store = store
	if n, err := e2.Recover(ctx, nil); n != 0 || err != nil {
		t.Errorf("recover: %d, %v", n, err)
	}
	if list, _ := store.List(ctx, flow.ListOptions{Status: flow.StatusFailed}); len(list) != 1 {
		t.Errorf("failed instances: %+v", list)
	}
}

// panicking is an agent with a bug.
type panicking struct{}

func (panicking) Act(context.Context, *engine.Task, func(flow.Event)) (engine.Reply, error) {
	panic("index out of range [3] with length 3")
}

// A panic in a node fails its run with code internal; the engine, and the
// next run, go on.
func TestPanicFailsTheRunNotTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t, panicking{}, 0)
	var log strings.Builder // written before the subscription ends
	e.Log = slog.New(slog.NewTextHandler(&log, nil))
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	events := drain(sub)
	var code string
	for _, ev := range events {
		if d, ok := ev.Data.(flow.ErrorData); ok {
			code = d.Code
			if d.Message != "panic in node s: index out of range [3] with length 3" { // no stack: that is the log's
				t.Errorf("error message %q", d.Message)
			}
		}
	}
	if d := events[len(events)-1].Data.(flow.Done); d.Status != flow.StatusFailed || code != "internal" {
		t.Errorf("done %+v, code %q", d, code)
	}
	if !strings.Contains(log.String(), "reliability_test.go") {
		t.Errorf("the log has no stack of the panic:\n%s", log.String())
	}
	e.Exec.Agent = agentFunc(func(*engine.Task) (engine.Reply, error) { return reply("ACCEPT", ""), nil })
	sub, err = e.Start(ctx, engine.Request{FlowID: "one", Input: "again"})
	if err != nil {
		t.Fatal(err)
	}
	if evs := drain(sub); evs[len(evs)-1].Data.(flow.Done).Status != flow.StatusCompleted {
		t.Errorf("the next run: %+v", evs[len(evs)-1])
	}
}

// A run interrupted at a node that a new version of its flow no longer has
// resumes into a clear failure, not a crash: through the steps of the
// vanished node, and at it.
func TestResumeWithAVanishedNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The flow had a → b → c; a and b are gone.
	const after = `{"name": "v", "graph": {"start": "c", "nodes": {
	  "c": {"type": "superego", "agent_id": "c", "constitution": "x", "transitions": {"ACCEPT": null}}}}}`
	for _, c := range []struct{ name, at, want string }{
		{"its steps are in the turn", "c", "completed"},
		{"it runs next", "b", `node "b" is not in flow "v" any more`},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := &memstore.Store{}
			ignore := func(error) {}
			store.Create(flow.Instance{ID: "x", FlowID: "v"}, ignore)
			next := func(s string) *string { return &s }
			events := []flow.Event{
				{ID: 1, Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: "x", FlowID: "v"}},
				{ID: 2, Name: flow.EventCompleteStep, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi", NextAgent: next("a")}},
				{ID: 3, Name: flow.EventCompleteStep, Data: &flow.Step{StepID: "2", AgentID: "a", Node: "a", Role: flow.RoleAssistant, Decision: "COMPLETE", Response: "draft", NextAgent: next(c.at)}},
			}
			store.Append("x", events, ignore)
			e := &engine.Engine{Flows: map[string]*flow.Flow{"v": {ID: "v", Def: mustParse(t, after)}},
				Exec: &engine.Executor{Agent: byNode(map[string][]engine.Reply{"c": {reply("ACCEPT", "")}})}, Store: store, Log: slog.New(slog.DiscardHandler)}
			if n, err := e.Recover(ctx, nil); n != 1 || err != nil {
				t.Fatalf("recover: %d %v", n, err)
			}
			sub, _ := e.Subscribe(ctx, "x", 3)
			got := drain(sub)
			last := got[len(got)-1].Data.(flow.Done)
			if c.want == "completed" {
				if last.Status != flow.StatusCompleted {
					t.Errorf("done %+v", last)
				}
				return
			}
			msg := ""
			for _, ev := range got {
				if d, ok := ev.Data.(flow.ErrorData); ok {
					msg = d.Message
				}
			}
			if last.Status != flow.StatusFailed || !strings.Contains(msg, c.want) {
				t.Errorf("done %+v, error %q", last, msg)
			}
		})
	}
}

// slowEvents is a store whose reads of one instance wait for a signal.
type slowEvents struct {
	*sqlite.Store
	slow    string
	reading chan struct{}
	release chan struct{}
}

func (s *slowEvents) Events(ctx context.Context, id string, after int64) ([]flow.Event, error) {
	if id == s.slow {
		s.reading <- struct{}{}
		<-s.release
	}
	return s.Store.Events(ctx, id, after)
}

// A client reconnecting to a run with a long log reads the store without
// holding anything back: the run it follows, and every other run, go on
// being recorded and delivered meanwhile.
func TestReconnectDoesNotStallOtherRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store := &slowEvents{Store: db, reading: make(chan struct{}), release: make(chan struct{})}
	g := newGated()
	e := newEngine(t, g, 0)
	e.Store = store
	a, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "a"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	store.slow = a.Instance
	subscribed := make(chan *engine.Subscription)
	go func() {
		s, err := e.Subscribe(ctx, a.Instance, 0)
		if err != nil {
			t.Error(err)
			close(store.reading)
		}
		subscribed <- s
	}()
	<-store.reading // the reconnect is in the middle of its read
	// Run a finishes its step, and run b runs whole, while the read waits.
	g.reply = reply("ACCEPT", "")
	close(g.gate)
	finished := make(chan []flow.Event)
	go func() { finished <- drain(a) }()
	b, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "b"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case evs := <-finished:
		if evs[len(evs)-1].Name != flow.EventDone {
			t.Errorf("run a ended %+v", evs[len(evs)-1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run a's delivery stalled behind a reconnecting client's read")
	}
	if evs := drain(b); evs[len(evs)-1].Name != flow.EventDone {
		t.Errorf("run b ended %+v", evs[len(evs)-1])
	}
	close(store.release)
	s := <-subscribed
	if s == nil {
		t.FailNow()
	}
	late := drain(s)
	if len(late) == 0 || late[len(late)-1].Name != flow.EventDone {
		t.Errorf("the reconnected client got %d events, last %+v", len(late), late)
	}
	for i := 1; i < len(late); i++ {
		if late[i].ID <= late[i-1].ID {
			t.Errorf("event %d after %d", late[i].ID, late[i-1].ID)
		}
	}
}

// A run whose events cannot all be saved ends failed, with code storage,
// however far it got: no client is told it completed, and none is shown an
// event whose write failed. Its ending, if the disk takes no more, is
// recorded once it does: meanwhile reads and replays say failed, a new run
// on the instance is refused with the storage error, cancel records the
// ending, and no instance is left running.
func TestAFullDiskFailsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		fills func(bool, []flow.Event) bool
		// created: the instance exists, for the run's first write was saved
		created bool
	}{
		{"at the instance's creation", func(create bool, _ []flow.Event) bool { return create }, false},
		{"at the run's first write", storetest.Has(flow.EventRunStart), true},
		{"at a step", func(create bool, events []flow.Event) bool {
			return storetest.Has(flow.EventCompleteStep)(create, events) && !storetest.Has(flow.EventRunStart)(create, events)
		}, true},
		{"at the last write, with done", storetest.Has(flow.EventDone), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := &storetest.Full{Store: &memstore.Store{}, Fills: c.fills}
			e := newEngine(t, agentFunc(func(*engine.Task) (engine.Reply, error) { return reply("ACCEPT", "fine"), nil }), 0)
			e.Store = store
			sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "hi"})
			if err != nil {
				t.Fatal(err)
			}
			events := drain(sub)
			n := len(events)
			if n < 2 || events[n-2].Name != flow.EventError || events[n-2].Data.(flow.ErrorData).Code != "storage" ||
				events[n-1].Data.(flow.Done).Status != flow.StatusFailed {
				t.Fatalf("the run ended %+v", events[max(0, n-2):])
			}
			if msg := events[n-2].Data.(flow.ErrorData).Message; !strings.Contains(msg, "database or disk is full") {
				t.Errorf("error message %q", msg)
			}
			for _, ev := range events[:n-2] {
				if store.Failed(ev.ID) {
					t.Errorf("event %d (%s) was shown, though its write failed", ev.ID, ev.Name)
				}
			}
			if !c.created {
				if _, err := e.Events(ctx, sub.Instance, 0); !errors.Is(err, flow.ErrNotFound) {
					t.Errorf("an instance never created: %v", err)
				}
				return
			}
			// The disk is still full: every read says failed all the same.
			logged, err := e.Events(ctx, sub.Instance, 0)
			if err != nil || flow.Replay(logged).Status != flow.StatusFailed {
				t.Errorf("the instance reads %q, %v", flow.Replay(logged).Status, err)
			}
			if replay := drain(mustSubscribe(t, e, sub.Instance)); replay[len(replay)-1].Data.(flow.Done).Status != flow.StatusFailed {
				t.Errorf("a replay ends %+v", replay[len(replay)-1])
			}
			if _, err := e.Start(ctx, engine.Request{FlowID: "one", InstanceID: sub.Instance, Input: "again"}); !errors.Is(err, flow.ErrStorage) {
				t.Errorf("a new run on the instance: %v", err)
			}
			if err := e.Cancel(ctx, sub.Instance); !errors.Is(err, flow.ErrStorage) {
				t.Errorf("cancel on a full disk: %v", err)
			}
			// Room again: cancel records the ending, and nothing runs.
			store.Room()
			if err := e.Cancel(ctx, sub.Instance); err != nil {
				t.Errorf("cancel: %v", err)
			}
			if running, _ := store.List(ctx, flow.ListOptions{Status: flow.StatusRunning}); len(running) > 0 {
				t.Errorf("left running: %+v", running)
			}
			if stored, _ := store.Events(ctx, sub.Instance, 0); flow.Replay(stored).Status != flow.StatusFailed {
				t.Errorf("the log says %s", flow.Replay(stored).Status)
			}
			again, err := e.Start(ctx, engine.Request{FlowID: "one", InstanceID: sub.Instance, Input: "again"})
			if err != nil {
				t.Fatal(err)
			}
			if evs := drain(again); evs[len(evs)-1].Data.(flow.Done).Status != flow.StatusCompleted {
				t.Errorf("the next run: %+v", evs[len(evs)-1])
			}
		})
	}
}

// The input the runs in flight hold is bounded: a run that would take it
// past MaxInput is refused, as one past MaxRuns is, until room is made; an
// input larger than the whole bound is invalid.
func TestInputInFlightIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 0)
	e.MaxInput = 100
	// Run returns once its run has let go of the instance, and of its input.
	ran := make(chan error, 2)
	go func() {
		ran <- e.Run(ctx, engine.Request{FlowID: "one", Input: strings.Repeat("a", 40),
			Prior: []flow.Step{{Role: flow.RoleUser, Response: strings.Repeat("b", 20)}}}, nil)
	}()
	<-g.entered
	_, err := e.Start(ctx, engine.Request{FlowID: "one", Input: strings.Repeat("a", 41)})
	if !errors.Is(err, flow.ErrInputInFlight) || !errors.Is(err, flow.ErrTooMany) ||
		err.Error() != "the runs in flight hold 60 bytes of input, and this run's 41 bytes would take them past the server's 100 bytes; retry later: too much input in flight: too many runs in flight" {
		t.Errorf("past the bound: %v", err)
	}
	if _, err := e.Start(ctx, engine.Request{FlowID: "one", Input: strings.Repeat("a", 101)}); !errors.Is(err, flow.ErrInvalid) {
		t.Errorf("larger than the bound: %v", err)
	}
	go func() { ran <- e.Run(ctx, engine.Request{FlowID: "one", Input: strings.Repeat("a", 40)}, nil) }()
	<-g.entered // within the bound
	close(g.gate)
	for range 2 {
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Run(ctx, engine.Request{FlowID: "one", Input: strings.Repeat("a", 100)}, nil); err != nil {
		t.Fatalf("once the runs ended: %v", err)
	}
}
