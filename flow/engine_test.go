package flow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"superego/flow"
)

// gated is an agent that waits at a gate before it replies, so a test can
// hold a run in progress without sleeping.
type gated struct {
	entered chan string // node names, as each call begins
	gate    chan struct{}
	reply   flow.Reply
}

func newGated() *gated {
	return &gated{entered: make(chan string, 100), gate: make(chan struct{}), reply: reply("ACCEPT", "")}
}

func (g *gated) Act(ctx context.Context, t *flow.Task, emit func(flow.Event)) (flow.Reply, error) {
	g.entered <- t.Node.Name
	emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{StepID: t.StepID, Node: t.Node.Name, Delta: "x"}})
	select {
	case <-g.gate:
		return g.reply, nil
	case <-ctx.Done():
		return flow.Reply{}, ctx.Err()
	}
}

const single = `{"name": "one", "graph": {"start": "s", "nodes": {"s": {"type": "superego", "agent_id": "s", "constitution": "c", "transitions": {"ACCEPT": null}}}}}`

func newEngine(tb testing.TB, agent flow.Agent, max int) *flow.Engine {
	return &flow.Engine{
		Flows:   map[string]*flow.Flow{"one": {ID: "one", Def: mustParse(tb, single)}},
		Exec:    &flow.Executor{Agent: agent},
		Store:   &flow.MemStore{},
		MaxRuns: max,
	}
}

// drain reads a subscription to its end and returns every event.
func drain(s *flow.Subscription) []flow.Event {
	out := append([]flow.Event(nil), s.Backlog...)
	for e := range s.C {
		out = append(out, e)
	}
	return out
}

func instanceOf(tb testing.TB, s *flow.Subscription) string {
	tb.Helper()
	e := <-s.C
	rs, ok := e.Data.(flow.RunStart)
	if !ok {
		tb.Fatalf("first event %s", e.Name)
	}
	return rs.InstanceID
}

func TestEngineRefusals(t *testing.T) {
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 2)
	sub, err := e.Start(ctx, "one", "", "a")
	if err != nil {
		t.Fatal(err)
	}
	id := instanceOf(t, sub)
	<-g.entered
	if _, err := e.Start(ctx, "one", id, "again"); !errors.Is(err, flow.ErrBusy) {
		t.Errorf("second run on a busy instance: %v", err)
	}
	if _, err := e.Start(ctx, "nope", "", "x"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("unknown flow: %v", err)
	}
	if _, err := e.Start(ctx, "one", "00000000-0000-4000-8000-000000000000", "x"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("unknown instance: %v", err)
	}
	sub2, err := e.Start(ctx, "one", "", "b")
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if _, err := e.Start(ctx, "one", "", "c"); !errors.Is(err, flow.ErrTooMany) {
		t.Errorf("third run with a limit of two: %v", err)
	}
	close(g.gate)
	drain(sub)
	drain(sub2)
	// The instance is free again once its run is done.
	sub3, err := e.Start(ctx, "one", id, "again")
	if err != nil {
		t.Fatal(err)
	}
	events := drain(sub3)
	if d := events[len(events)-1].Data.(flow.Done); d.Status != flow.StatusCompleted {
		t.Errorf("done %+v", d)
	}
	if err := e.Cancel(ctx, id); !errors.Is(err, flow.ErrIdle) {
		t.Errorf("cancel with no run: %v", err)
	}
	if err := e.Close(ctx); err != nil {
		t.Errorf("close with nothing running: %v", err)
	}
	if _, err := e.Start(ctx, "one", "", "x"); !errors.Is(err, flow.ErrClosed) {
		t.Errorf("start after close: %v", err)
	}
}

func TestSubscribeReplaysThenFollowsLive(t *testing.T) {
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 0)
	sub, err := e.Start(ctx, "one", "", "hi")
	if err != nil {
		t.Fatal(err)
	}
	id := instanceOf(t, sub)
	<-g.entered
	e.Unsubscribe(sub) // the first client goes away; the run goes on
	late, err := e.Subscribe(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	close(g.gate)
	events := drain(late)
	var ids []int64
	for _, ev := range events {
		ids = append(ids, ev.ID)
	}
	// Stored: 2 user step, 3 node_start; the partial 4 went out before this
	// client came and is not stored; live: 5 step, 6 done.
	if fmt.Sprint(ids) != "[2 3 5 6]" || events[len(events)-1].Name != flow.EventDone {
		t.Fatalf("events after 1: ids %v", ids)
	}
	// After the run, a replay has no partials and ends with done.
	replay, err := e.Subscribe(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	all := drain(replay)
	for _, ev := range all {
		if ev.Name == flow.EventPartial {
			t.Error("a replay from the store carries a partial output")
		}
	}
	if !replay.Idle() || all[len(all)-1].Name != flow.EventDone || len(all) != 5 || all[0].ID != 1 {
		t.Errorf("replay of %d events, idle %v", len(all), replay.Idle())
	}
	if _, err := e.Subscribe(ctx, "missing", 0); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("subscribe to a missing instance: %v", err)
	}
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	ctx := context.Background()
	flooded := make(chan struct{})
	// An agent that emits far more partials than a subscriber buffers,
	// while nobody reads.
	flood := agentFunc(func(t *flow.Task) (flow.Reply, error) { return reply("ACCEPT", ""), nil })
	e := newEngine(t, floodAgent{agentFunc: flood, n: 5000, done: flooded}, 0)
	sub, err := e.Start(ctx, "one", "", "hi")
	if err != nil {
		t.Fatal(err)
	}
	<-flooded
	got := drain(sub)
	if len(got) >= 5000 || got[len(got)-1].Name == flow.EventDone {
		t.Errorf("a stalled subscriber got %d events, last %s; want it dropped before the end", len(got), got[len(got)-1].Name)
	}
	// The run itself was not held back: it completes.
	if _, err := e.Start(ctx, "one", "", "again"); err != nil {
		t.Fatal(err)
	}
}

type floodAgent struct {
	agentFunc
	n    int
	done chan struct{}
}

func (f floodAgent) Act(ctx context.Context, t *flow.Task, emit func(flow.Event)) (flow.Reply, error) {
	for i := 0; i < f.n; i++ {
		emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{Delta: "."}})
	}
	if t.UserMessage == "hi" {
		close(f.done)
	}
	return f.agentFunc(t)
}

func TestCancelAndCloseEndRuns(t *testing.T) {
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 0)
	sub, err := e.Start(ctx, "one", "", "a")
	if err != nil {
		t.Fatal(err)
	}
	id := instanceOf(t, sub)
	<-g.entered
	if err := e.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	events := drain(sub)
	if d := events[len(events)-1].Data.(flow.Done); d.Status != flow.StatusCancelled {
		t.Errorf("after cancel: %+v", d)
	}

	sub2, err := e.Start(ctx, "one", "", "b")
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.Close(expired); err == nil {
		t.Error("close cancelled a run and said nothing")
	}
	events = drain(sub2)
	if d := events[len(events)-1].Data.(flow.Done); d.Status != flow.StatusCancelled {
		t.Errorf("after close: %+v", d)
	}
}
