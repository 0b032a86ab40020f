package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"superego/engine"
	"superego/flow"
	"superego/flow/storetest"
)

// agentFunc is a fake agent: a script of replies by node.
type agentFunc func(t *engine.Task) (engine.Reply, error)

func (f agentFunc) Act(_ context.Context, t *engine.Task, _ func(flow.Event)) (engine.Reply, error) {
	return f(t)
}

// byNode answers each node from its own queue of replies; the last reply
// repeats.
func byNode(script map[string][]engine.Reply) agentFunc {
	var mu sync.Mutex
	return func(t *engine.Task) (engine.Reply, error) {
		mu.Lock()
		defer mu.Unlock()
		q := script[t.Node.Name]
		if len(q) == 0 {
			return engine.Reply{}, fmt.Errorf("no script for %s", t.Node.Name)
		}
		r := q[0]
		if len(q) > 1 {
			script[t.Node.Name] = q[1:]
		}
		return r, nil
	}
}

func mustParse(tb testing.TB, def string) *flow.Definition {
	tb.Helper()
	d, err := flow.Parse([]byte(def), flow.Catalog{})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

type result struct {
	out    engine.Outcome
	steps  []flow.Step
	events []flow.Event
}

func (r result) trace() string {
	var t []string
	for _, s := range r.steps {
		if s.Role != flow.RoleUser {
			t = append(t, s.Node+":"+s.Decision)
		}
	}
	return strings.Join(t, " ")
}

func runTurn(tb testing.TB, def *flow.Definition, agent engine.Agent, prior []flow.Step, input string) result {
	tb.Helper()
	var r result
	var f storetest.Records
	x := &engine.Executor{Agent: agent}
	r.out = x.Execute(context.Background(), engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r", Steps: prior, Input: input},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			f.See(evs...)
			for _, e := range evs {
				r.events = append(r.events, e)
				if s, ok := e.Data.(*flow.Step); ok {
					r.steps = append(r.steps, *s)
				}
			}
			return nil
		}, Hold: func(ev flow.Event) error {
			f.See(ev)
			return nil
		}})
	f.Check(tb)
	return r
}

func reply(decision, response string) engine.Reply {
	return engine.Reply{Decision: decision, Response: response, Thinking: "t", AgentGuidance: "g-" + decision}
}

var toolReply = engine.Reply{ToolUsage: []flow.ToolUse{{ID: "c1", ToolName: "calculator", Input: []byte(`{}`), Output: "50"}}}

const guarded = `{"name": "g", "graph": {"start": "in", "nodes": {
  "in":  {"type": "superego", "agent_id": "in", "constitution": "c", "max_iterations": 2,
          "transitions": {"BLOCK": null, "ACCEPT": "work", "CAUTION": "work", "NEEDS_CLARIFICATION": "self"}},
  "work": {"type": "inner_agent", "agent_id": "work", "tools": ["calculator"], "max_iterations": 3,
          "transitions": {"COMPLETE": "out", "ERROR": null}},
  "out": {"type": "superego", "agent_id": "out", "constitution": "c2", "max_iterations": 2,
          "transitions": {"ACCEPT": null, "BLOCK": "work"}}
}}}`

func TestTransitionsAndStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		def      string
		script   map[string][]engine.Reply
		status   string
		trace    string
		response string
	}{
		{"accept path with tool loop", guarded, map[string][]engine.Reply{
			"in":   {reply("ACCEPT", "")},
			"work": {toolReply, reply("COMPLETE", "50")},
			"out":  {reply("ACCEPT", "")},
		}, flow.StatusCompleted, "in:ACCEPT work:NEEDS_TOOL work:COMPLETE out:ACCEPT", "50"},
		{"superego BLOCK ends blocked with its refusal", guarded, map[string][]engine.Reply{
			"in": {reply("BLOCK", "I can't help with that.")},
		}, flow.StatusBlocked, "in:BLOCK", "I can't help with that."},
		{"inner agent decision to null completes", guarded, map[string][]engine.Reply{
			"in": {reply("CAUTION", "")}, "work": {reply("ERROR", "cannot")},
		}, flow.StatusCompleted, "in:CAUTION work:ERROR", "cannot"},
		{"BLOCK with a target goes on; cap then ends iteration_limit", guarded, map[string][]engine.Reply{
			"in": {reply("ACCEPT", "")}, "work": {reply("COMPLETE", "draft")}, "out": {reply("BLOCK", "no")},
		}, flow.StatusIterationLimit, "in:ACCEPT work:COMPLETE out:BLOCK work:COMPLETE out:BLOCK work:COMPLETE", "no"},
		{"tool loop capped by max_iterations", guarded, map[string][]engine.Reply{
			"in": {reply("ACCEPT", "")}, "work": {toolReply},
		}, flow.StatusIterationLimit, "in:ACCEPT work:NEEDS_TOOL work:NEEDS_TOOL work:NEEDS_TOOL", ""},
		{"lowercase decision is accepted", guarded, map[string][]engine.Reply{
			"in": {reply(" block ", "no")},
		}, flow.StatusBlocked, "in:BLOCK", "no"},
		{"star catches an unlisted decision", `{"name": "s", "graph": {"start": "a", "nodes": {
			"a": {"type": "inner_agent", "agent_id": "a", "transitions": {"DONE": null, "*": "b"}},
			"b": {"type": "inner_agent", "agent_id": "b", "transitions": {"*": null}}}}}`, map[string][]engine.Reply{
			"a": {reply("WEIRD", "x")}, "b": {reply("COMPLETE", "y")},
		}, flow.StatusCompleted, "a:WEIRD b:COMPLETE", "y"},
		{"star does not catch NEEDS_TOOL: the tool loop returns to the node", `{"name": "s", "graph": {"start": "a", "nodes": {
			"a": {"type": "inner_agent", "agent_id": "a", "tools": ["calculator"], "transitions": {"*": null}}}}}`, map[string][]engine.Reply{
			"a": {toolReply, reply("COMPLETE", "done")},
		}, flow.StatusCompleted, "a:NEEDS_TOOL a:COMPLETE", "done"},
		{"MAX_ITERATIONS transition", `{"name": "m", "graph": {"start": "a", "nodes": {
			"a": {"type": "inner_agent", "agent_id": "a", "max_iterations": 2, "transitions": {"COMPLETE": null, "AGAIN": "self", "MAX_ITERATIONS": "b"}},
			"b": {"type": "inner_agent", "agent_id": "b", "transitions": {"COMPLETE": null}}}}}`, map[string][]engine.Reply{
			"a": {reply("AGAIN", "1")}, "b": {reply("COMPLETE", "summary")},
		}, flow.StatusCompleted, "a:AGAIN a:AGAIN b:COMPLETE", "summary"},
		{"MAX_ITERATIONS to null ends iteration_limit", `{"name": "m", "graph": {"start": "a", "nodes": {
			"a": {"type": "inner_agent", "agent_id": "a", "max_iterations": 1, "transitions": {"AGAIN": "self", "MAX_ITERATIONS": null}}}}}`, map[string][]engine.Reply{
			"a": {reply("AGAIN", "1")},
		}, flow.StatusIterationLimit, "a:AGAIN", "1"},
		{"run step cap", `{"name": "p", "graph": {"start": "a", "max_steps": 4, "nodes": {
			"a": {"type": "inner_agent", "agent_id": "a", "max_iterations": 100, "transitions": {"PING": "b"}},
			"b": {"type": "inner_agent", "agent_id": "b", "max_iterations": 100, "transitions": {"PONG": "a"}}}}}`, map[string][]engine.Reply{
			"a": {reply("PING", "")}, "b": {reply("PONG", "")},
		}, flow.StatusIterationLimit, "a:PING b:PONG a:PING b:PONG", ""},
		{"NEEDS_CLARIFICATION pauses", guarded, map[string][]engine.Reply{
			"in": {reply("NEEDS_CLARIFICATION", "Which numbers?")},
		}, flow.StatusAwaitingInput, "in:NEEDS_CLARIFICATION", "Which numbers?"},
		{"no valid decision: superego falls back to CAUTION", guarded, map[string][]engine.Reply{
			"in": {reply("", "")}, "work": {reply("COMPLETE", "ok")}, "out": {reply("ACCEPT", "")},
		}, flow.StatusCompleted, "in:CAUTION work:COMPLETE out:ACCEPT", "ok"},
		{"no valid decision: inner agent falls back to COMPLETE", guarded, map[string][]engine.Reply{
			"in": {reply("ACCEPT", "")}, "work": {reply("DONE!", "ok")}, "out": {reply("ACCEPT", "")},
		}, flow.StatusCompleted, "in:ACCEPT work:COMPLETE out:ACCEPT", "ok"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runTurn(t, mustParse(t, c.def), byNode(c.script), nil, "hello")
			if r.out.Status != c.status || r.trace() != c.trace || r.out.Response != c.response {
				t.Errorf("got %s %q %q\nwant %s %q %q", r.out.Status, r.trace(), r.out.Response, c.status, c.trace, c.response)
			}
			if first, last := r.events[0].Name, r.events[len(r.events)-1]; first != flow.EventRunStart || last.Name != flow.EventDone || last.Data.(flow.Done).Status != c.status {
				t.Errorf("events begin %s, end %+v", first, last)
			}
			for i, s := range r.steps {
				if s.StepID != fmt.Sprint(i+1) {
					t.Errorf("step %d has id %s", i, s.StepID)
				}
			}
		})
	}
}

func TestFallbackIsRecorded(t *testing.T) {
	t.Parallel()
	r := runTurn(t, mustParse(t, guarded), byNode(map[string][]engine.Reply{
		"in": {reply("PERHAPS", "")}, "work": {reply("COMPLETE", "ok")}, "out": {reply("", "")},
	}), nil, "hello")
	if got := r.steps[1].Fallback; got != `"PERHAPS" is not one of ACCEPT, BLOCK, CAUTION, NEEDS_CLARIFICATION; used CAUTION` {
		t.Errorf("fallback %q", got)
	}
	// "out" has no CAUTION transition and no "*": the run fails, clearly.
	if r.out.Status != flow.StatusFailed || !errors.Is(r.out.Err, flow.ErrModelOutput) || !strings.Contains(r.out.Err.Error(), "no CAUTION or \"*\" transition") {
		t.Errorf("outcome %+v", r.out)
	}
}

func TestGuidanceGoesToTheNextNodeOnly(t *testing.T) {
	t.Parallel()
	var tasks []engine.Task
	script := byNode(map[string][]engine.Reply{
		"in":   {{Decision: "CAUTION", AgentGuidance: "watch units", Thinking: "secret"}},
		"work": {toolReply, {Decision: "COMPLETE", Response: "50 m", AgentGuidance: "used the tool"}},
		"out":  {{Decision: "ACCEPT"}},
	})
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) { tasks = append(tasks, *t); return script(t) })
	r := runTurn(t, mustParse(t, guarded), agent, nil, "5*10 m?")
	if r.out.Status != flow.StatusCompleted {
		t.Fatal(r.out)
	}
	in, work1, work2, out := tasks[0], tasks[1], tasks[2], tasks[3]
	if in.Guidance != "" || work1.Guidance != "watch units" || work1.GuidanceFrom != "in" {
		t.Errorf("guidance: in %q, work %q from %q", in.Guidance, work1.Guidance, work1.GuidanceFrom)
	}
	// The tool loop keeps the superego's guidance, and sees its own calls.
	if work2.Guidance != "watch units" || len(work2.ToolRounds) != 1 || len(work1.ToolRounds) != 0 {
		t.Errorf("second iteration: guidance %q, tool rounds %d", work2.Guidance, len(work2.ToolRounds))
	}
	if out.Guidance != "used the tool" || out.Input != "50 m" || out.InputFrom != "work" || out.UserMessage != "5*10 m?" {
		t.Errorf("output superego task: %+v", out)
	}
	if in.Input != "5*10 m?" || work1.Input != "5*10 m?" {
		t.Errorf("inputs %q %q", in.Input, work1.Input)
	}
}

func TestClarificationResumesOnTheNextInput(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "c", "graph": {"start": "in", "nodes": {
	  "in": {"type": "superego", "agent_id": "in", "constitution": "c", "transitions": {"ACCEPT": "work", "NEEDS_CLARIFICATION": "work"}},
	  "work": {"type": "inner_agent", "agent_id": "work", "transitions": {"COMPLETE": null}}}}}`)
	var seen []engine.Task
	script := byNode(map[string][]engine.Reply{
		"in":   {{Decision: "NEEDS_CLARIFICATION", Response: "Which city?", Thinking: "HIDDEN-T", AgentGuidance: "HIDDEN-G"}},
		"work": {{Decision: "COMPLETE", Response: "Sunny in Paris."}},
	})
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) { seen = append(seen, *t); return script(t) })
	first := runTurn(t, def, agent, nil, "Weather?")
	if first.out.Status != flow.StatusAwaitingInput || first.out.Response != "Which city?" {
		t.Fatalf("first turn %+v", first.out)
	}
	second := runTurn(t, def, agent, first.steps, "Paris")
	if second.out.Status != flow.StatusCompleted || second.trace() != "work:COMPLETE" {
		t.Fatalf("second turn %+v %s", second.out, second.trace())
	}
	if second.steps[0].StepID != "3" || *second.steps[0].NextAgent != "work" {
		t.Errorf("second turn's user step %+v", second.steps[0])
	}
	work := seen[len(seen)-1]
	if len(work.History) != 2 || work.History[1].Response != "Which city?" || work.Input != "Paris" {
		t.Errorf("history given to the resumed node: %+v", work.History)
	}
	for _, s := range work.History {
		if s.Thinking != "" || s.AgentGuidance != "" {
			t.Errorf("history carries hidden fields: %+v", s)
		}
	}
}

func TestCancelledRunEndsCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) { cancel(); return engine.Reply{}, context.Canceled })
	var done flow.Done
	out := (&engine.Executor{Agent: agent}).Execute(ctx, engine.Turn{Def: mustParse(t, guarded), InstanceID: "i", Input: "x"},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			if d, ok := evs[len(evs)-1].Data.(flow.Done); ok {
				done = d
			}
			return nil
		}})
	if out.Status != flow.StatusCancelled || done.Status != flow.StatusCancelled {
		t.Errorf("outcome %+v, done %+v", out, done)
	}
}

func TestEmitFailureFailsTheRun(t *testing.T) {
	t.Parallel()
	agent := byNode(map[string][]engine.Reply{"in": {reply("ACCEPT", "")}})
	var code string
	out := (&engine.Executor{Agent: agent}).Execute(context.Background(), engine.Turn{Def: mustParse(t, guarded), Input: "x"},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, e := range evs {
				if d, ok := e.Data.(flow.ErrorData); ok {
					code = d.Code
				}
				if e.Name == flow.EventCompleteStep {
					return errors.New("disk full")
				}
			}
			return nil
		}})
	if out.Status != flow.StatusFailed || code != "internal" {
		t.Errorf("outcome %+v, error code %q", out, code)
	}
}
