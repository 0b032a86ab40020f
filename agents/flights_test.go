package agents

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"superego/agents/agentstest"
	"superego/engine"
	"superego/flow"
	"superego/internal/eventually"
)

// waiters waits until n tasks wait on the one call in flight, and
// reports them: a task joins a flight with no event to wait on, so the
// test asks the flights themselves.
func waiters(tb testing.TB, fs *flights, n int) {
	tb.Helper()
	eventually.Holds(tb, 10*time.Second, func() string {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		got := 0
		for _, f := range fs.waiting {
			got += f.waiters
		}
		if got != n {
			return fmt.Sprintf("%d tasks wait on calls in flight, want %d", got, n)
		}
		return ""
	})
}

// A shared call: tasks asking the very same thing at once are given one
// call's reply. The task whose call it was sees it stream; the others get
// it whole, as from the cache, and count it as cached, so that the call is
// counted once.
func TestIdenticalCallsInFlightAreMadeOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fake := agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer {
		a := agentstest.Reply("", "COMPLETE", "", "The one answer.")
		a.Pause = release
		return a
	})
	p := &Providers{Default: "openai:fake", OpenAIKey: "k", OpenAIBaseURL: fake.URL + "/v1"}
	agent := &Agent{Model: p.Model, Cache: &agentstest.Cache{}}
	d, err := flow.Parse([]byte(`{"name": "one", "graph": {"start": "assistant", "nodes": {"assistant": {"type": "inner_agent", "agent_id": "assistant",
		"system_prompt": "Answer.", "transitions": {"COMPLETE": null}}}}}`), flow.Catalog{Providers: ProviderNames})
	if err != nil {
		t.Fatal(err)
	}
	const tasks = 16
	type result struct {
		reply    engine.Reply
		streamed string
		err      error
	}
	results := make(chan result, tasks) // every task sends one, before the test reads them
	for i := range tasks {
		go func() {
			var streamed strings.Builder
			task := &engine.Task{FlowID: "one", Node: d.Graph.Nodes["assistant"], StepID: string(rune('a' + i)), UserMessage: "Same question.",
				Input: "Same question.", Decisions: []string{"COMPLETE"}, Cache: "repeat:0"}
			reply, err := agent.Act(context.Background(), task, func(ev flow.Event) {
				if p, ok := ev.Data.(flow.Partial); ok {
					streamed.WriteString(p.Delta)
				}
			})
			results <- result{reply, streamed.String(), err}
		}()
	}
	waiters(t, &agent.flights, tasks)
	close(release)
	made := 0
	for range tasks {
		r := <-results
		if r.err != nil || r.reply.Response != "The one answer." || r.streamed != "The one answer." {
			t.Errorf("a task: %v, response %q, streamed %q", r.err, r.reply.Response, r.streamed)
		}
		if !r.reply.Cached {
			made++
		}
	}
	if n := len(fake.Requests()); n != 1 || made != 1 {
		t.Errorf("%d requests, %d tasks count the call as made; want 1 and 1", n, made)
	}
}

// The task that started a shared call goes (a superego blocked its
// speculative turn): the call goes on for the others, and the first of
// them counts it. When every task has gone, the call stops.
func TestSharedCallOutlivesItsFirstTask(t *testing.T) {
	t.Parallel()
	var fs flights
	started, release := make(chan struct{}), make(chan struct{})
	stopped := make(chan error, 1) // the call's end, sent once
	do := func(ctx context.Context, stream streamFunc) (cachedReply, bool, error) {
		stream(ctx, []byte("partial"))
		close(started) // after the stream: the first task is still there to be given it
		select {
		case <-release:
			return cachedReply{Text: "reply"}, true, nil
		case <-ctx.Done():
			stopped <- ctx.Err()
			return cachedReply{}, false, ctx.Err()
		}
	}
	firstCtx, leaveFirst := context.WithCancel(context.Background())
	var firstStream []string
	firstDone := make(chan error, 1)
	go func() {
		_, _, _, _, err := fs.share(firstCtx, "k", func(_ context.Context, c []byte) error { firstStream = append(firstStream, string(c)); return nil }, do)
		firstDone <- err
	}()
	<-started
	type got struct {
		reply                  cachedReply
		streamed, made, shared bool
		err                    error
	}
	others := make(chan got, 2)
	for range 2 {
		go func() {
			r, s, m, sh, err := fs.share(context.Background(), "k", nil, func(context.Context, streamFunc) (cachedReply, bool, error) {
				t.Error("a second call was made")
				return cachedReply{}, false, nil
			})
			others <- got{r, s, m, sh, err}
		}()
	}
	waiters(t, &fs, 3)
	leaveFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the first task: %v", err)
	}
	close(release)
	made := 0
	for range 2 {
		g := <-others
		if g.err != nil || g.reply.Text != "reply" || g.streamed || g.made == g.shared {
			t.Errorf("a task that joined: %+v (the one that does not count the call shares it)", g)
		}
		if g.made {
			made++
		}
	}
	if made != 1 || strings.Join(firstStream, "") != "partial" {
		t.Errorf("%d tasks count the call as made; the first task was streamed %q", made, firstStream)
	}

	// Every task gone: the call is cancelled, and the next starts afresh.
	started, stopped = make(chan struct{}), make(chan error, 1)
	release = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { fs.share(ctx, "k", nil, do); firstDone <- nil }()
	<-started
	cancel()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Errorf("the call of a flight nobody waits on: %v", err)
	}
	<-firstDone
	started = make(chan struct{})
	close(release)
	if r, streamed, made, _, err := fs.share(context.Background(), "k", nil, do); err != nil || r.Text != "reply" || !streamed || !made {
		t.Errorf("a flight after one cancelled: %+v %v %v %v", r, streamed, made, err)
	}
}

// lateCache keeps nothing it is given, as a store that queues its writes
// (SQLite) has not yet kept a reply the moment its call ends.
type lateCache struct{ agentstest.Cache }

func (c *lateCache) Keep(context.Context, string, []byte) error { return nil }

// A call made a moment ago, whose reply the cache does not have yet, is
// not made again: the reply is kept in memory for that moment.
func TestCallJustMadeIsNotMadeAgain(t *testing.T) {
	t.Parallel()
	fake := agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer { return agentstest.Reply("", "COMPLETE", "", "Answered.") })
	p := &Providers{Default: "openai:fake", OpenAIKey: "k", OpenAIBaseURL: fake.URL + "/v1"}
	agent := &Agent{Model: p.Model, Cache: &lateCache{}}
	d, err := flow.Parse([]byte(`{"name": "one", "graph": {"start": "assistant", "nodes": {"assistant": {"type": "inner_agent", "agent_id": "assistant",
		"system_prompt": "Answer.", "transitions": {"COMPLETE": null}}}}}`), flow.Catalog{Providers: ProviderNames})
	if err != nil {
		t.Fatal(err)
	}
	task := func(scope string) *engine.Task {
		return &engine.Task{FlowID: "one", Node: d.Graph.Nodes["assistant"], StepID: "1", UserMessage: "Q", Input: "Q", Decisions: []string{"COMPLETE"}, Cache: scope}
	}
	var cached []bool
	for _, scope := range []string{"repeat:0", "repeat:0", "repeat:1"} {
		reply, err := agent.Act(context.Background(), task(scope), func(flow.Event) {})
		if err != nil || reply.Response != "Answered." {
			t.Fatalf("%v %q", err, reply.Response)
		}
		cached = append(cached, reply.Cached)
	}
	if n := len(fake.Requests()); n != 2 || fmt.Sprint(cached) != "[false true false]" {
		t.Errorf("%d requests, cached %v; want 2, the same call again served", n, cached)
	}
}
