package replica_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/internal/eventually"
	"superego/postgres"
	"superego/postgres/pgtest"
	"superego/replica"
)

const calc = `{"name": "calc", "graph": {"start": "input_superego", "nodes": {
  "input_superego": {"type": "superego", "agent_id": "input_superego", "constitution": "Judge.",
    "transitions": {"BLOCK": null, "ACCEPT": "calculator"}},
  "calculator": {"type": "inner_agent", "agent_id": "calculator", "system_prompt": "Calculate.",
    "transitions": {"COMPLETE": null}}}}}`

// gate holds the calculator's answer until the test opens it.
type gate struct {
	entered chan struct{}
	once    sync.Once
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 10), open: make(chan struct{})} }

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// replicaOf is one replica: a store, an engine and its part of the
// replicas, on the database at u.
func replicaOf(t *testing.T, u string, model *agentstest.Server, maxRuns int) *engine.Engine {
	t.Helper()
	return replicaLogging(t, u, model, maxRuns, slog.New(slog.DiscardHandler))
}

func replicaLogging(t *testing.T, u string, model *agentstest.Server, maxRuns int, log *slog.Logger) *engine.Engine {
	t.Helper()
	ctx := context.Background()
	store, err := postgres.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	def, err := flow.Parse([]byte(calc), flow.Catalog{})
	if err != nil {
		t.Fatal(err)
	}
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	e := &engine.Engine{Flows: map[string]*flow.Flow{"calc": {ID: "calc", Def: def}}, Exec: &engine.Executor{Agent: &agents.Agent{Model: p.Model}},
		Store: store, Log: log, MaxRuns: maxRuns}
	r, err := replica.Open(ctx, store, maxRuns, log)
	if err != nil {
		t.Fatal(err)
	}
	e.Replicas = r
	if err := r.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		expired, cancel := context.WithCancel(ctx)
		cancel()
		e.Close(expired)
		r.Close(ctx)
		store.Close()
	})
	return e
}

func model(t *testing.T, g *gate) *agentstest.Server {
	defer t.Cleanup(g.release) // before the server closes: a call left waiting returns
	return agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		if r.Node() == "calculator" {
			g.entered <- struct{}{}
			<-g.open
			return agentstest.Reply("T-hidden", "COMPLETE", "G-hidden", "42")
		}
		return agentstest.Reply("T-hidden", "ACCEPT", "", "")
	})
}

func ids(events []flow.Event) []int64 {
	var out []int64
	for _, e := range events {
		out = append(out, e.ID)
	}
	return out
}

// A run started on one replica is followed live on another from any event
// id, every event once and in order; a second run of the instance is
// refused on the other replica while it runs; a cancel through the other
// replica stops it where it runs.
func TestRunsAcrossReplicas(t *testing.T) {
	u, db := pgtest.Database(t)
	g := newGate()
	m := model(t, g)
	a, b := replicaOf(t, u, m, 8), replicaOf(t, u, m, 8)
	ctx := context.Background()

	sub, err := a.Start(ctx, engine.Request{FlowID: "calc", Input: "6*7"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered // the run is at the calculator, on a
	if _, err := b.Start(ctx, engine.Request{FlowID: "calc", InstanceID: sub.Instance, Input: "again"}); !errors.Is(err, flow.ErrBusy) {
		t.Errorf("a second run on b while a runs the first: %v", err)
	}
	follow, err := b.Subscribe(ctx, sub.Instance, 2) // Last-Event-ID 2
	if err != nil {
		t.Fatal(err)
	}
	if follow.Idle() {
		t.Fatal("b does not follow a's run")
	}
	g.release()
	var onA, onB []flow.Event
	var wg sync.WaitGroup
	wg.Go(func() {
		for e := range sub.Events(ctx) {
			if e.Name != flow.EventPartial {
				onA = append(onA, e)
			}
		}
	})
	for e := range follow.Events(ctx) {
		onB = append(onB, e)
	}
	follow.Close()
	wg.Wait()
	for _, e := range onB {
		b, _ := json.Marshal(e.Data)
		if strings.Contains(string(b), "T-hidden") || strings.Contains(string(b), "G-hidden") {
			t.Errorf("b's stream shows a hidden field: %s", b)
		}
	}
	if len(onB) == 0 || onB[len(onB)-1].Name != flow.EventDone || onB[len(onB)-1].Data.(flow.Done).Status != flow.StatusCompleted {
		t.Fatalf("b followed %d events, last %+v", len(onB), onB)
	}
	var want []int64
	for _, e := range onA {
		if e.ID > 2 {
			want = append(want, e.ID)
		}
	}
	if got := ids(onB); len(got) != len(want) || got[0] != 3 {
		t.Errorf("b followed ids %v, a's stored ones after 2 are %v", got, want)
	} else {
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("b followed ids %v, a's stored ones after 2 are %v", got, want)
				break
			}
		}
	}

	// The run's end takes its lease and its job with it, once its events
	// are all written, just after the stream's end.
	eventually.Holds(t, 10*time.Second, func() string {
		var leases, jobs int
		err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM run_leases), (SELECT count(*) FROM river_job WHERE args->>'instance_id' = $1)`, sub.Instance).Scan(&leases, &jobs)
		if err != nil {
			t.Fatal(err)
		}
		if leases != 0 || jobs != 0 {
			return fmt.Sprintf("after the run: %d leases, %d jobs of it", leases, jobs)
		}
		return ""
	})

	// A cancel through b stops the run on a.
	g2 := newGate()
	m2 := model(t, g2)
	a2, b2 := replicaOf(t, u, m2, 8), replicaOf(t, u, m2, 8)
	sub2, err := a2.Start(ctx, engine.Request{FlowID: "calc", Input: "6*7"})
	if err != nil {
		t.Fatal(err)
	}
	<-g2.entered
	if err := b2.Cancel(ctx, sub2.Instance); err != nil {
		t.Fatal(err)
	}
	var last flow.Event
	for e := range sub2.Events(ctx) {
		last = e
	}
	if d, ok := last.Data.(flow.Done); !ok || d.Status != flow.StatusCancelled {
		t.Errorf("after a cancel through b: %+v", last)
	}
	if err := b2.Cancel(ctx, sub2.Instance); !errors.Is(err, flow.ErrIdle) {
		t.Errorf("a cancel with no run: %v", err)
	}
}

// A replica with no room leaves the run to one that has: the job goes to b,
// and a's client follows it there.
func TestAFullReplicaLeavesTheRunToAnother(t *testing.T) {
	u, _ := pgtest.Database(t)
	slow, quick := newGate(), newGate()
	quick.release()
	a := replicaOf(t, u, model(t, slow), 1) // its one place goes to a run that waits
	replicaOf(t, u, model(t, quick), 8)
	ctx := context.Background()
	first, err := a.Start(ctx, engine.Request{FlowID: "calc", Input: "first"})
	if err != nil {
		t.Fatal(err)
	}
	<-slow.entered
	second, err := a.Start(ctx, engine.Request{FlowID: "calc", Input: "second"})
	if err != nil {
		t.Fatal(err)
	}
	var last flow.Event
	start := time.Now()
	for e := range second.Events(ctx) {
		last = e
	}
	t.Logf("the run a had no room for ran on b in %s", time.Since(start))
	if d, ok := last.Data.(flow.Done); !ok || d.Status != flow.StatusCompleted || d.Response != "42" {
		t.Errorf("the run a had no room for: %+v", last)
	}
	slow.release()
	for range first.Events(ctx) {
	}
}

// A replica that shuts down gives its runs back at once: the one it was
// running goes on on b, from its log, and b's client sees it end.
func TestAReplicaShuttingDownHandsItsRunsOver(t *testing.T) {
	u, _ := pgtest.Database(t)
	g := newGate()
	m := model(t, g)
	a, b := replicaOf(t, u, m, 8), replicaOf(t, u, m, 8)
	ctx := context.Background()
	sub, err := a.Start(ctx, engine.Request{FlowID: "calc", Input: "6*7"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered // the run is at the calculator, on a
	expired, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	a.Close(expired) // interrupts the run: back to the queue
	for range sub.Events(ctx) {
	}
	g.release()
	follow, err := b.Subscribe(ctx, sub.Instance, 0)
	if err != nil {
		t.Fatal(err)
	}
	var last flow.Event
	starts := 0
	for e := range follow.Events(ctx) {
		last = e
		if e.Name == flow.EventRunStart {
			starts++
		}
	}
	t.Logf("b finished the run in %s", time.Since(start))
	if d, ok := last.Data.(flow.Done); !ok || d.Status != flow.StatusCompleted || d.Response != "42" || starts != 2 {
		t.Errorf("on b, after %d run_starts: %+v", starts, last)
	}
}

// runArgs is a run's job as the replicas insert it.
type runArgs struct {
	Instance string `json:"instance_id"`
}

func (runArgs) Kind() string { return "superego_run" }

// A job of a run that its own replica is running (a watchdog, or a job
// reaped while the run was slow to renew) leaves the run alone: a cancel
// through the replicas still reaches it.
func TestAJobOfARunningRunLeavesItsClaim(t *testing.T) {
	u, db := pgtest.Database(t)
	g := newGate()
	a := replicaOf(t, u, model(t, g), 8)
	ctx := context.Background()
	sub, err := a.Start(ctx, engine.Request{FlowID: "calc", Input: "6*7"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inserter.Insert(ctx, runArgs{sub.Instance}, &river.InsertOpts{Queue: "runs"}); err != nil {
		t.Fatal(err)
	}
	eventually.Holds(t, 10*time.Second, func() string {
		var state string
		db.QueryRow(ctx, `SELECT state FROM river_job WHERE args->>'instance_id' = $1`, sub.Instance).Scan(&state)
		if state != "scheduled" { // a's worker found the run alive, and looks again later
			return fmt.Sprintf("the job is %q", state)
		}
		return ""
	})
	if err := a.Replicas.Cancel(ctx, sub.Instance); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last flow.Event
	for e := range sub.Events(wait) {
		last = e
	}
	if d, ok := last.Data.(flow.Done); !ok || d.Status != flow.StatusCancelled {
		t.Errorf("20 s after a cancel: %+v", last)
	}
}

// A replica that finds its lease of a run gone (it expired, and another
// replica took the run) stops the run where it is, and writes no more of
// it: the run is the other replica's now.
func TestARunWhoseLeaseIsLostStops(t *testing.T) {
	u, db := pgtest.Database(t)
	g := newGate()
	var log logLines
	a := replicaLogging(t, u, model(t, g), 8, slog.New(slog.NewTextHandler(&log, nil)))
	ctx := context.Background()
	sub, err := a.Start(ctx, engine.Request{FlowID: "calc", Input: "6*7"})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if _, err := db.Exec(ctx, `UPDATE run_leases SET owner = 'another replica' WHERE instance_id = $1`, sub.Instance); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wait, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last flow.Event
	for e := range sub.Events(wait) {
		last = e
	}
	if wait.Err() != nil {
		t.Fatal("the run went on 20 s after its lease went")
	}
	t.Logf("stopped %s after the lease went", time.Since(start))
	if last.Name == flow.EventDone {
		t.Errorf("a run whose lease was lost wrote its end: %+v", last)
	}
	var owner string
	if err := db.QueryRow(ctx, `SELECT owner FROM run_leases WHERE instance_id = $1`, sub.Instance).Scan(&owner); err != nil || owner != "another replica" {
		t.Errorf("the lease: %q, %v", owner, err)
	}
	if got := log.String(); !strings.Contains(got, "lost its lease") || strings.Contains(got, "shutdown") {
		t.Errorf("the log says of the stop:\n%s", got)
	}
}

// logLines is a log writer that replicas write from several goroutines.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A new instance's conversation, with its client's instructions as a
// model API request brings them, starts on replicas as it does on one
// server.
func TestAConversationWithItsClientsInstructionsRunsOnReplicas(t *testing.T) {
	u, _ := pgtest.Database(t)
	g := newGate()
	g.release()
	a := replicaOf(t, u, model(t, g), 8)
	ctx := context.Background()
	prior := []flow.Step{{Role: flow.RoleSystem, AgentID: flow.ClientInstructions, Response: "Answer briefly."},
		{Role: flow.RoleUser, AgentID: "user", Response: "hi"}, {Role: flow.RoleAssistant, AgentID: "assistant", Response: "hello"}}
	sub, err := a.Start(ctx, engine.Request{FlowID: "calc", Input: "6*7", Prior: prior})
	if err != nil {
		t.Fatalf("a conversation with its client's instructions: %v", err)
	}
	var done flow.Done
	for e := range sub.Events(ctx) {
		if d, ok := e.Data.(flow.Done); ok {
			done = d
		}
	}
	if done.Status != flow.StatusCompleted {
		t.Errorf("done %+v", done)
	}
	if _, err := a.Start(ctx, engine.Request{FlowID: "calc", InstanceID: sub.Instance, Input: "x", Prior: prior}); !errors.Is(err, flow.ErrInvalid) {
		t.Errorf("a conversation for an instance that has one: %v", err)
	}
}
