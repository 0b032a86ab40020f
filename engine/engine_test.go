package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"

	"superego/engine"
	"superego/flow"
	"superego/flow/storetest"
	"superego/memstore"
)

// gated is an agent that waits at a gate before it replies, so a test can
// hold a run in progress without sleeping.
type gated struct {
	entered chan string // node names, as each call begins
	gate    chan struct{}
	reply   engine.Reply
}

func newGated() *gated {
	return &gated{entered: make(chan string, 100), gate: make(chan struct{}), reply: reply("ACCEPT", "")}
}

func (g *gated) Act(ctx context.Context, t *engine.Task, emit func(flow.Event)) (engine.Reply, error) {
	g.entered <- t.Node.Name
	emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{StepID: t.StepID, Node: t.Node.Name, Delta: "x"}})
	select {
	case <-g.gate:
		return g.reply, nil
	case <-ctx.Done():
		return engine.Reply{}, ctx.Err()
	}
}

const single = `{"name": "one", "graph": {"start": "s", "nodes": {"s": {"type": "superego", "agent_id": "s", "constitution": "c", "transitions": {"ACCEPT": null}}}}}`

func newEngine(tb testing.TB, agent engine.Agent, max int) *engine.Engine {
	var store flow.Store = &memstore.Store{}
	if _, bench := tb.(*testing.B); !bench { // a benchmark measures the engine, not the check
		store = storetest.Frozen(tb, store)
	}
	return &engine.Engine{
		Flows:   map[string]*flow.Flow{"one": {ID: "one", Def: mustParse(tb, single)}},
		Exec:    &engine.Executor{Agent: agent},
		Store:   store,
		MaxRuns: max,
		Log:     slog.New(slog.DiscardHandler),
	}
}

// drain reads a subscription to its end and returns every event.
func drain(s *engine.Subscription) []flow.Event {
	var out []flow.Event
	for e := range s.Events(context.Background()) {
		out = append(out, e)
	}
	return out
}

func instanceOf(tb testing.TB, s *engine.Subscription) string {
	tb.Helper()
	var e flow.Event
	for e = range s.Events(context.Background()) {
		break
	}
	rs, ok := e.Data.(flow.RunStart)
	if !ok {
		tb.Fatalf("first event %s", e.Name)
	}
	return rs.InstanceID
}

func TestEngineRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 2)
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "a"})
	if err != nil {
		t.Fatal(err)
	}
	id := instanceOf(t, sub)
	<-g.entered
	if _, err := e.Start(ctx, engine.Request{FlowID: "one", InstanceID: id, Input: "again"}); !errors.Is(err, flow.ErrBusy) {
		t.Errorf("second run on a busy instance: %v", err)
	}
	if _, err := e.Start(ctx, engine.Request{FlowID: "nope", Input: "x"}); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("unknown flow: %v", err)
	}
	if _, err := e.Start(ctx, engine.Request{FlowID: "one", InstanceID: "00000000-0000-4000-8000-000000000000", Input: "x"}); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("unknown instance: %v", err)
	}
	sub2, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "b"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if _, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "c"}); !errors.Is(err, flow.ErrTooMany) {
		t.Errorf("third run with a limit of two: %v", err)
	}
	close(g.gate)
	drain(sub)
	drain(sub2)
	// The instance is free again once its run is done.
	sub3, err := e.Start(ctx, engine.Request{FlowID: "one", InstanceID: id, Input: "again"})
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
	if _, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "x"}); !errors.Is(err, flow.ErrClosed) {
		t.Errorf("start after close: %v", err)
	}
}

func TestSubscribeReplaysThenFollowsLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 0)
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	id := instanceOf(t, sub)
	<-g.entered
	sub.Close() // the first client goes away; the run goes on
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

func TestStalledSubscriberHoldsNothingBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	flooded := make(chan struct{})
	// An agent that emits thousands of partials while nobody reads.
	flood := agentFunc(func(t *engine.Task) (engine.Reply, error) { return reply("ACCEPT", ""), nil })
	e := newEngine(t, floodAgent{agentFunc: flood, n: 5000, done: flooded}, 0)
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	<-flooded
	// The run was not held back by its reader, and the reader, once it
	// reads, misses nothing.
	got := drain(sub)
	if len(got) != 5000+5 || got[len(got)-1].Name != flow.EventDone {
		t.Errorf("a stalled subscriber got %d events, last %s", len(got), got[len(got)-1].Name)
	}
	for i := 1; i < len(got); i++ {
		if got[i].ID != got[i-1].ID+1 {
			t.Fatalf("event %d follows %d", got[i].ID, got[i-1].ID)
		}
	}
}

// A run keeps the events its subscribers have yet to read, and no more:
// a reader that keeps up leaves it nothing to hold, a stalled one holds
// what it has not read, and a reader that comes later gets all of it.
func TestALiveRunKeepsOnlyWhatItsReadersHaveNotRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 0)
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	id := sub.Instance
	var read []flow.Event
	for ev := range sub.Events(ctx) { // run_start, the user's step, node_start, the partial
		if read = append(read, ev); ev.Name == flow.EventPartial {
			break
		}
	}
	if n := engine.LiveEvents(e, id); n != 0 {
		t.Errorf("the run keeps %d events its one reader has read", n)
	}
	stalled, err := e.Subscribe(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	close(g.gate)
	rest := drain(sub)
	if got := append(read, rest...); len(got) != 6 || got[5].Name != flow.EventDone {
		t.Fatalf("the reader that kept up got %d events", len(got))
	}
	// The stalled reader, which read nothing, gets the stored events and
	// the live ones it has not read, each once, in order.
	late := drain(stalled)
	var ids []int64
	for _, ev := range late {
		ids = append(ids, ev.ID)
	}
	if fmt.Sprint(ids) != "[1 2 3 5 6]" {
		t.Errorf("the stalled reader got events %v", ids)
	}
}

// A client that has read a run's done, and follows the instance again
// from there, is told at once that nothing more comes, though the run has
// not let go of the instance yet: EventSource stops on that.
func TestFollowingARunAfterItsDoneReadsTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proceed := make(chan struct{})
	e := newEngine(t, agentFunc(func(*engine.Task) (engine.Reply, error) { return reply("ACCEPT", ""), nil }), 0)
	e.Exec.Observe = &engine.Observer{RunEnded: func(context.Context, engine.RunInfo, string, string) { <-proceed }}
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	var last flow.Event
	for ev := range sub.Events(ctx) {
		if last = ev; ev.Name == flow.EventDone {
			break
		}
	}
	again, err := e.Subscribe(ctx, sub.Instance, last.ID)
	close(proceed)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Idle() || len(again.Backlog) != 0 {
		t.Errorf("following after done: idle %v, %d events", again.Idle(), len(again.Backlog))
	}
	again.Close()
	sub.Close()
}

type floodAgent struct {
	agentFunc
	n    int
	done chan struct{}
}

func (f floodAgent) Act(ctx context.Context, t *engine.Task, emit func(flow.Event)) (engine.Reply, error) {
	for i := 0; i < f.n; i++ {
		emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{Delta: "."}})
	}
	if t.UserMessage == "hi" {
		close(f.done)
	}
	return f.agentFunc(t)
}

func TestCancelAndCloseEndRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newGated()
	e := newEngine(t, g, 0)
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "a"})
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

	// Shutdown interrupts a run: no done, so the next start resumes it.
	sub2, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "b"})
	if err != nil {
		t.Fatal(err)
	}
	id2 := instanceOf(t, sub2)
	<-g.entered
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.Close(expired); err == nil {
		t.Error("close interrupted a run and said nothing")
	}
	for _, ev := range drain(sub2) {
		if ev.Name == flow.EventDone {
			t.Errorf("an interrupted run recorded done: %+v", ev.Data)
		}
	}
	list, _ := e.Store.List(ctx, flow.ListOptions{Status: flow.StatusRunning})
	if len(list) != 1 || list[0].ID != id2 {
		t.Fatalf("running after shutdown: %+v", list)
	}

	// A new engine on the same store finds it and finishes it.
	g2 := newGated()
	close(g2.gate)
	e2 := newEngine(t, g2, 0)
	e2.Store = e.Store
	if n, err := e2.Recover(ctx, nil); n != 1 || err != nil {
		t.Fatalf("recover: %d, %v", n, err)
	}
	resumed, err := e2.Subscribe(ctx, id2, 0)
	if err != nil {
		t.Fatal(err)
	}
	all := drain(resumed)
	var starts []flow.RunStart
	var steps []string
	for _, ev := range all {
		switch d := ev.Data.(type) {
		case flow.RunStart:
			starts = append(starts, d)
		case *flow.Step:
			steps = append(steps, d.StepID+":"+d.AgentID)
		}
	}
	if len(starts) != 2 || starts[0].Resumed || !starts[1].Resumed {
		t.Errorf("run starts %+v", starts)
	}
	if strings.Join(steps, " ") != "1:user 2:s" {
		t.Errorf("steps %v: want the user's, then the node's once", steps)
	}
	if d := all[len(all)-1].Data.(flow.Done); d.Status != flow.StatusCompleted {
		t.Errorf("resumed run ended %+v", d)
	}
}

// A process that shares the store with a server (the experiment CLI)
// resumes only the runs it picks, by their options, and leaves the others
// alone, whatever their flow.
func TestRecoverOnlyThePickedRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &memstore.Store{}
	ignore := func(error) {}
	first := "s"
	for _, x := range []struct{ id, flow, experiment string }{{"mine", "one", "e1"}, {"theirs", "one", ""}, {"gone", "vanished", "e2"}} {
		store.Create(flow.Instance{ID: x.id, FlowID: x.flow}, ignore)
		store.Append(x.id, []flow.Event{
			{ID: 1, Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: x.id, RunOptions: flow.RunOptions{Tags: map[string]string{"experiment": x.experiment}}}},
			{ID: 2, Name: flow.EventCompleteStep, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi", NextAgent: &first}},
		}, ignore)
	}
	g := newGated()
	close(g.gate)
	e := newEngine(t, g, 0)
	e.Store = store
	n, err := e.Recover(ctx, func(o flow.RunOptions) bool { return o.Tags["experiment"] == "e1" })
	if n != 1 || err != nil {
		t.Fatalf("recover: %d, %v", n, err)
	}
	drain(mustSubscribe(t, e, "mine"))
	list, _ := store.List(ctx, flow.ListOptions{})
	got := map[string]string{}
	for _, s := range list {
		got[s.ID] = s.Status
	}
	if want := map[string]string{"mine": flow.StatusCompleted, "theirs": flow.StatusRunning, "gone": flow.StatusRunning}; !maps.Equal(got, want) {
		t.Errorf("after recovering e1's: %v, want %v", got, want)
	}
}

func mustSubscribe(t *testing.T, e *engine.Engine, id string) *engine.Subscription {
	t.Helper()
	sub, err := e.Subscribe(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// A run whose flow is gone when the server restarts ends failed, saying
// why, and its done carries usage as every done does.
func TestRecoverFailsARunWhoseFlowIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &memstore.Store{}
	ignore := func(error) {}
	store.Create(flow.Instance{ID: "x", FlowID: "vanished"}, ignore)
	store.Append("x", []flow.Event{{ID: 1, Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: "x"}}}, ignore)
	e := newEngine(t, newGated(), 0)
	e.Store = store
	if n, err := e.Recover(ctx, nil); n != 0 || err != nil {
		t.Fatalf("recover: %d %v", n, err)
	}
	events, _ := store.Events(ctx, "x", 0)
	if len(events) != 3 || events[1].Data.(flow.ErrorData).Message != `flow "vanished" is not loaded any more, so the interrupted run cannot resume` ||
		events[2].Data.(flow.Done).Status != flow.StatusFailed || events[2].Data.(flow.Done).Usage == nil || events[2].ID != 3 {
		t.Errorf("events %+v", events)
	}
}

// One run that cannot resume keeps no other from resuming, nor the server
// from starting: a run whose options name a node its flow no longer has
// ends failed, saying why; one whose log does not read is left as it is.
func TestRecoverGoesPastRunsThatCannotResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &unreadable{Store: &memstore.Store{}, id: "corrupt"}
	ignore := func(error) {}
	first := "s"
	for _, x := range []struct {
		id      string
		variant *flow.Variant
	}{{"lost-node", &flow.Variant{Models: map[string]string{"removed": "openai:gpt-test"}}}, {"corrupt", nil}, {"fine", nil}} {
		store.Create(flow.Instance{ID: x.id, FlowID: "one"}, ignore)
		store.Append(x.id, []flow.Event{
			{ID: 1, Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: x.id, RunOptions: flow.RunOptions{Variant: x.variant}}},
			{ID: 2, Name: flow.EventCompleteStep, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi", NextAgent: &first}},
		}, ignore)
	}
	g := newGated()
	close(g.gate)
	e := newEngine(t, g, 0)
	e.Store = store
	if n, err := e.Recover(ctx, nil); n != 1 || err != nil {
		t.Fatalf("recover: %d, %v; want the one good run resumed", n, err)
	}
	if d := drain(mustSubscribe(t, e, "fine")); d[len(d)-1].Data.(flow.Done).Status != flow.StatusCompleted {
		t.Errorf("the good run: %+v", d[len(d)-1])
	}
	events, _ := store.Store.Events(ctx, "lost-node", 0)
	if len(events) != 4 || !strings.Contains(events[2].Data.(flow.ErrorData).Message, `the interrupted run cannot resume: flow "one": `) ||
		events[3].Data.(flow.Done).Status != flow.StatusFailed {
		t.Errorf("the run whose node is gone: %+v", events)
	}
	if events, _ := store.Store.Events(ctx, "corrupt", 0); len(events) != 2 {
		t.Errorf("the unreadable run was written to: %+v", events)
	}
}

// unreadable is a store one of whose logs does not read.
type unreadable struct {
	*memstore.Store
	id string
}

func (s *unreadable) Events(ctx context.Context, id string, after int64) ([]flow.Event, error) {
	if id == s.id {
		return nil, fmt.Errorf("instance %q: %w", id, flow.ErrCorrupt)
	}
	return s.Store.Events(ctx, id, after)
}

// A new instance may start with the conversation a client kept: its
// messages are the first steps, and the nodes' models read them as history.
func TestStartWithAConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var seen []*flow.Step
	e := newEngine(t, agentFunc(func(task *engine.Task) (engine.Reply, error) {
		seen = task.History
		return reply("ACCEPT", ""), nil
	}), 0)
	prior := []flow.Step{{Role: flow.RoleUser, Response: "Hi"}, {Role: flow.RoleAssistant, Response: "Hello! How can I help?"}}
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Prior: prior, Input: "What is 5*10?"})
	if err != nil {
		t.Fatal(err)
	}
	events := drain(sub)
	var steps []string
	for _, ev := range events {
		if s, ok := ev.Data.(*flow.Step); ok {
			steps = append(steps, s.StepID+":"+s.AgentID+":"+s.Response)
		}
	}
	if got := strings.Join(steps, " | "); got != "1:user:Hi | 2:assistant:Hello! How can I help? | 3:user:What is 5*10? | 4:s:" {
		t.Errorf("steps: %s", got)
	}
	if len(seen) != 2 || seen[1].Response != "Hello! How can I help?" {
		t.Errorf("history given to the node: %+v", seen)
	}
	if d := events[len(events)-1].Data.(flow.Done); d.Response != "" {
		t.Errorf("done's response is a prior message: %+v", d)
	}
	if _, err := e.Start(ctx, engine.Request{FlowID: "one", Prior: []flow.Step{{Role: "system", Response: "x"}}, Input: "y"}); !errors.Is(err, flow.ErrInvalid) {
		t.Errorf("a system message: %v", err)
	}
}

// A client may act on a run's done before the run has let go of its
// instance (an agent framework sends its tools' results at once, docs/gateway.md):
// the next run on the instance waits for it, not a 409.
func TestANextRunWaitsForTheLastToLetGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := newGated()
	close(g.gate)
	ending := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(ending) }) }
	defer end()
	e := newEngine(t, g, 0)
	e.Exec.Observe = &engine.Observer{RunEnded: func(context.Context, engine.RunInfo, string, string) { <-ending }}
	sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for ev := range sub.Events(ctx) {
		if rs, ok := ev.Data.(flow.RunStart); ok {
			id = rs.InstanceID
		}
		if _, ok := ev.Data.(flow.Done); ok {
			break // the run is held in RunEnded: its instance is not let go of
		}
	}
	sub.Close()
	gaveUp, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Start(gaveUp, engine.Request{FlowID: "one", InstanceID: id, Input: "given up"}); !errors.Is(err, flow.ErrBusy) {
		t.Errorf("a request that gives up waiting: %v", err)
	}
	// The run lets go once the next request waits for it.
	waiting := &doneWatch{Context: ctx, asked: make(chan struct{})}
	go func() {
		<-waiting.asked
		end()
	}()
	next, err := e.Start(waiting, engine.Request{FlowID: "one", InstanceID: id, Input: "again"})
	if err != nil {
		t.Fatalf("the next run on the instance: %v", err)
	}
	drain(next)
}

// doneWatch is a context that says when it is first asked for Done.
type doneWatch struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}
