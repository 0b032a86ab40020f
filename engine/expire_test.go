package engine_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"superego/engine"
	"superego/flow"
	"superego/memstore"
)

// clientCaller asks its client to run one call of its own tool, as the
// relay of a /v1 request does.
type clientCaller struct{}

func (clientCaller) Act(ctx context.Context, t *engine.Task, _ func(flow.Event)) (engine.Reply, error) {
	t.Calls.Propose(0, flow.ToolUse{ID: "call_1", ToolName: "write_file", Input: json.RawMessage(`{"path": "a.txt"}`)},
		engine.ToolInfo{Client: true}, nil)
	uses, err := t.Calls.Finish(ctx, 1)
	return engine.Reply{Decision: flow.NeedsTool, ToolUsage: uses}, err
}

const clientFlow = `{"name": "client", "graph": {"start": "agent", "nodes": {
  "agent": {"type": "inner_agent", "agent_id": "agent", "tools": ["client"], "permissions": {"default": "allow"},
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}}}}}`

// A wait for a client's tool results ends once it has lasted the wait:
// the call is answered that it did not run, and the instance is
// cancelled; a wait not yet that long is left alone. The clock is
// synctest's: the ten minutes pass at once.
func TestExpireWaitsEndsTheWaitsThatLastTooLong(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memstore.Store{}
		e := &engine.Engine{
			Flows: map[string]*flow.Flow{"client": {ID: "client", Def: mustParse(t, clientFlow)}},
			Exec:  &engine.Executor{Agent: clientCaller{}},
			Store: store,
			Log:   slog.New(slog.DiscardHandler),
		}
		status := func(id string) string {
			list, err := store.List(context.Background(), flow.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range list {
				if s.ID == id {
					return s.Status
				}
			}
			return "not found"
		}
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		first := run(t, e)
		time.Sleep(4 * time.Minute)
		second := run(t, e)
		go e.ExpireWaits(ctx, 10*time.Minute)

		time.Sleep(7 * time.Minute) // the first has waited 11 minutes, the second 7
		synctest.Wait()
		if s1, s2 := status(first), status(second); s1 != flow.StatusCancelled || s2 != flow.StatusAwaitingToolResult {
			t.Errorf("after 11 and 7 minutes: %s and %s", s1, s2)
		}
		time.Sleep(4 * time.Minute)
		synctest.Wait()
		if s := status(second); s != flow.StatusCancelled {
			t.Errorf("after 11 minutes: %s", s)
		}
		events, err := store.Events(context.Background(), first, 0)
		if err != nil {
			t.Fatal(err)
		}
		answered := false
		for _, ev := range events {
			if s, ok := ev.Data.(*flow.Step); ok {
				for _, u := range s.ToolUsage {
					answered = answered || u.ID == "call_1" && u.Output == "not run: the wait for the client's results expired"
				}
			}
		}
		if !answered {
			t.Errorf("call_1 was not answered as expired in the log's %d events", len(events))
		}
		stop()
		e.Close(context.Background())
	})
}

// run starts a run of the client flow and returns its instance once it
// waits for its client's results.
func run(t *testing.T, e *engine.Engine) string {
	t.Helper()
	var id string
	var done flow.Done
	err := e.Run(context.Background(), engine.Request{FlowID: "client", Input: "write a.txt"}, func(ev flow.Event) {
		switch d := ev.Data.(type) {
		case flow.RunStart:
			id = d.InstanceID
		case flow.Done:
			done = d
		}
	})
	if err != nil || done.Status != flow.StatusAwaitingToolResult {
		t.Fatalf("the run ended %s: %v", done.Status, err)
	}
	return id
}

// draftCaller writes a draft beside its client's call; a superego judges
// the agent's turn.
type draftCaller struct{}

func (draftCaller) Act(ctx context.Context, t *engine.Task, emit func(flow.Event)) (engine.Reply, error) {
	reply, err := clientCaller{}.Act(ctx, t, emit)
	reply.Response = "SECRET-DRAFT-5e1d"
	return reply, err
}

// A draft its judge holds stays held when the turn goes on and waits for
// the client again: neither run's done carries it.
func TestAHeldDraftBesideAClientCallStaysHeld(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "held", "graph": {"start": "agent", "nodes": {
	  "agent": {"type": "inner_agent", "agent_id": "agent", "tools": ["client"], "permissions": {"default": "allow"},
	    "transitions": {"COMPLETE": "judge", "NEEDS_TOOL": "self"}},
	  "judge": {"type": "superego", "agent_id": "judge", "constitution": "c", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`)
	e := &engine.Engine{
		Flows: map[string]*flow.Flow{"held": {ID: "held", Def: def}},
		Exec:  &engine.Executor{Agent: draftCaller{}},
		Store: &memstore.Store{},
		Log:   slog.New(slog.DiscardHandler),
	}
	var id string
	for i, req := range []engine.Request{{FlowID: "held", Input: "write a.txt"}, {FlowID: "held", Continue: true}} {
		if i > 0 {
			req.InstanceID = id
		}
		var done flow.Done
		err := e.Run(context.Background(), req, func(ev flow.Event) {
			if b, _ := json.Marshal(ev.Data); strings.Contains(string(b), "SECRET-DRAFT") {
				t.Errorf("run %d: %s carries the held draft: %s", i+1, ev.Name, b)
			}
			switch d := ev.Data.(type) {
			case flow.RunStart:
				id = d.InstanceID
			case flow.Done:
				done = d
			}
		})
		if err != nil || done.Status != flow.StatusAwaitingToolResult || len(done.ToolCalls) != 1 || done.Response != "" {
			t.Errorf("run %d: %v, %s, %d calls, response %q", i+1, err, done.Status, len(done.ToolCalls), done.Response)
		}
	}
}
