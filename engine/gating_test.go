package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"superego/engine"
	"superego/flow"
)

// leaks fails for every event that carries marker.
func leaks(t *testing.T, events []flow.Event, marker string) {
	t.Helper()
	for _, e := range events {
		if b, _ := json.Marshal(e.Data); strings.Contains(string(b), marker) {
			t.Errorf("%s shows %s: %s", e.Name, marker, b)
		}
	}
}

// A → B → S: B works on A's held draft. When S withholds the turn, B's
// step shows no more of A's draft than A's does.
func TestAChainedAgentsInputIsWithheldWithTheDraft(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": "b"}},
	  "b": {"type": "inner_agent", "agent_id": "b", "transitions": {"COMPLETE": "s"}},
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`)
	agent := byNode(map[string][]engine.Reply{
		"a": {reply("COMPLETE", "DRAFT-OF-A")},
		"b": {reply("COMPLETE", "DRAFT-OF-B")},
		"s": {reply("BLOCK", "no")},
	})
	r := runTurn(t, def, agent, nil, "hi")
	leaks(t, r.events, "DRAFT-OF")
	if r.out.Status != flow.StatusBlocked || r.trace() != "a:COMPLETE b:COMPLETE s:BLOCK" {
		t.Errorf("%s, %s", r.out.Status, r.trace())
	}
}

// A judge that calls a tool while a draft is held may pass it some of the
// draft: its tool calls and its tool round are held with the draft, and
// withheld with it.
func TestAJudgesToolCallsAreHeldWithTheDraft(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": "s"}},
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "tools": ["calculator"],
	        "transitions": {"ACCEPT": null, "BLOCK": null, "NEEDS_TOOL": "self"}}}}}`)
	agent := toolJudge{byNode(map[string][]engine.Reply{
		"a": {reply("COMPLETE", "DRAFT-MARK says 6*7")},
		"s": {{ToolUsage: []flow.ToolUse{{ID: "c1", ToolName: "calculator", Input: []byte(`{"expression": "DRAFT-MARK 6*7"}`), Output: "42"}}},
			reply("BLOCK", "no")},
	})}
	r := runTurn(t, def, agent, nil, "hi")
	leaks(t, r.events, "DRAFT-MARK")
	if r.out.Status != flow.StatusBlocked || r.trace() != "a:COMPLETE s:NEEDS_TOOL s:BLOCK" {
		t.Errorf("%s, %s", r.out.Status, r.trace())
	}
}

// toolJudge emits the tool calls its replies make, as agents.Agent does.
type toolJudge struct{ agentFunc }

func (j toolJudge) Act(_ context.Context, t *engine.Task, emit func(flow.Event)) (engine.Reply, error) {
	r, err := j.agentFunc(t)
	for _, u := range r.ToolUsage {
		emit(flow.Event{Name: flow.EventToolCall, Data: flow.ToolCall{Node: t.Node.Name, ToolName: u.ToolName, Input: u.Input}})
		emit(flow.Event{Name: flow.EventToolResult, Data: flow.ToolResult{Node: t.Node.Name, ToolName: u.ToolName, Output: u.Output}})
	}
	return r, err
}

// A speculating judge of a held draft, in a flow whose tasks read the
// instance's context: the speculative turn reads nothing of the runner's
// that the judge's verdict changes (run with -race).
func TestSpeculationBesideAHeldDraft(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": "s"}},
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "speculate": true, "transitions": {"ACCEPT": "b", "BLOCK": null}},
	  "b": {"type": "inner_agent", "agent_id": "b", "transitions": {"COMPLETE": null}}}}}`)
	script := byNode(map[string][]engine.Reply{
		"a": {reply("COMPLETE", "draft")},
		"b": {{ToolUsage: []flow.ToolUse{{ID: "c1", ToolName: "x", Input: []byte(`{}`), Output: "o"}}}, reply("COMPLETE", "done")},
		"s": {{Decision: flow.Accept}},
	})
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) {
		switch {
		case t.Node.Name == "s":
			time.Sleep(20 * time.Millisecond) // the judge decides while b works
		case t.Node.Name == "b" && len(t.ToolRounds) == 0:
			time.Sleep(40 * time.Millisecond)
		}
		return script(t)
	})
	on := true
	x := &engine.Executor{Agent: agent, Context: []flow.ContextItem{{Kind: "rule", Name: "r", Text: "t", Enabled: &on}}}
	out := x.Execute(context.Background(), engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r", Input: "hi"},
		engine.Sink{Emit: func(...flow.Event) error { return nil }})
	if out.Status != flow.StatusCompleted || out.Response != "done" {
		t.Errorf("%+v", out)
	}
}

// A speculative turn that fails is the error of its own node, not of the
// judge that let it start.
func TestAFailedSpeculativeTurnNamesItsNode(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "s", "nodes": {
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "speculate": true, "transitions": {"ACCEPT": "a", "BLOCK": null}},
	  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": null}}}}}`)
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) {
		if t.Node.Name == "a" {
			return engine.Reply{}, fmt.Errorf("%w: the agent's model is down", flow.ErrModelUnavailable)
		}
		return engine.Reply{Decision: flow.Accept}, nil
	})
	var failed []flow.ErrorData
	x := &engine.Executor{Agent: agent}
	out := x.Execute(context.Background(), engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r", Input: "hi"},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, e := range evs {
				if d, ok := e.Data.(flow.ErrorData); ok {
					failed = append(failed, d)
				}
			}
			return nil
		}})
	if out.Status != flow.StatusFailed || len(failed) != 1 || failed[0].Node != "a" {
		t.Errorf("%s, errors %+v: want one, at a", out.Status, failed)
	}
}

// A turn that leads where nothing judges it is held, then released at
// once: two writes. A crash between them resumes it released, answer and
// all.
func TestResumeReleasesAHeldAnswerThatEndsTheRun(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": null, "NEEDS_REVIEW": "s"}},
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`)
	first := "a"
	user := flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi", NextAgent: &first}
	held := flow.Step{StepID: "2", AgentID: "a", Node: "a", Role: flow.RoleAssistant, Input: "hi", Decision: flow.Complete, Response: "the answer"}
	var steps []flow.Step
	x := &engine.Executor{Agent: byNode(nil)}
	out := x.Execute(context.Background(), engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r2", Steps: []flow.Step{user},
		Held: []flow.Event{{Name: flow.EventCompleteStep, Data: &held}}, Resume: true},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, e := range evs {
				if s, ok := e.Data.(*flow.Step); ok {
					steps = append(steps, *s)
				}
			}
			return nil
		}})
	if out.Status != flow.StatusCompleted || out.Response != "the answer" || len(steps) != 1 || steps[0].Response != "the answer" || steps[0].Withheld != "" {
		t.Errorf("%+v, steps %+v", out, steps)
	}
}

// The judgement of a chunk that withholds the draft is the judge's step:
// its tokens are counted once, with the other chunks' judgements.
func TestAWithholdingChunksTokensCountOnce(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": "s"}},
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "judge_stream": {"chunk_chars": 40, "context_chars": 0},
	        "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`)
	agent := &streamingDraft{}
	var done flow.Done
	x := &engine.Executor{Agent: agent}
	out := x.Execute(context.Background(), engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r", Input: "hi"},
		engine.Sink{Emit: func(evs ...flow.Event) error {
			for _, e := range evs {
				if d, ok := e.Data.(flow.Done); ok {
					done = d
				}
			}
			return nil
		}})
	calls := agent.judged.Load()
	if out.Status != flow.StatusBlocked || done.Usage == nil || done.Usage.PromptTokens != 100*int(calls) {
		t.Errorf("%s, %d judge calls, usage %+v", out.Status, calls, done.Usage)
	}
}

// streamingDraft writes a long draft and waits to be stopped; its judge
// refuses every chunk, for 100 prompt tokens a call.
type streamingDraft struct{ judged atomic.Int32 }

func (d *streamingDraft) Act(ctx context.Context, t *engine.Task, emit func(flow.Event)) (engine.Reply, error) {
	if t.Node.Name == "s" {
		d.judged.Add(1)
		return engine.Reply{Decision: flow.Block, Response: "no", Usage: &flow.Usage{PromptTokens: 100}}, nil
	}
	for range 3 {
		emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{StepID: t.StepID, Node: "a", Delta: "This is a first sentence of the draft. And a second one goes on. "}})
	}
	<-ctx.Done()
	return engine.Reply{}, ctx.Err()
}

// A review answered on a replica resumes from the opening the dispatch
// wrote, and runs with the iterations of a run of its own, as the same
// review does in one process.
func TestAReviewRunsAlikeOnAReplica(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "work", "nodes": {
	  "work": {"type": "inner_agent", "agent_id": "work", "max_iterations": 1, "transitions": {"COMPLETE": null, "NEEDS_REVIEW": "sup"}},
	  "sup": {"type": "superego", "agent_id": "sup", "constitution": "c", "transitions": {"ACCEPT": "work", "HUMAN_REVIEW": "work", "BLOCK": null}}}}}`)
	script := func() engine.Agent {
		return byNode(map[string][]engine.Reply{"work": {reply("NEEDS_REVIEW", "w"), reply("COMPLETE", "final")}, "sup": {reply("HUMAN_REVIEW", "look")}})
	}
	agent := script()
	first := runTurn(t, def, agent, nil, "hello")
	local := reviewTurn(def, agent, first.steps, true)

	agent = script()
	first = runTurn(t, def, agent, nil, "hello")
	x := &engine.Executor{Agent: agent}
	turn := engine.Turn{FlowID: "f", Def: def, InstanceID: "i", RunID: "r2", Steps: first.steps, Options: flow.RunOptions{Review: &flow.Review{Approve: true}}}
	opening := x.Opening(turn)
	var log []flow.Event
	for i := range first.steps {
		log = append(log, flow.Event{Name: flow.EventCompleteStep, Data: &first.steps[i]})
	}
	turn.Steps = flow.Replay(append(log, opening...)).Steps
	turn.Resume, turn.Opened = true, true
	replica := result{}
	replica.out = x.Execute(context.Background(), turn, engine.Sink{Emit: func(evs ...flow.Event) error {
		for _, e := range evs {
			if s, ok := e.Data.(*flow.Step); ok {
				replica.steps = append(replica.steps, *s)
			}
		}
		return nil
	}})
	if local.out.Status != flow.StatusCompleted || local.trace() != "sup:APPROVED work:COMPLETE" ||
		replica.out.Status != local.out.Status || replica.trace() != local.trace() {
		t.Errorf("in one process: %s, %s; on a replica: %s, %s", local.out.Status, local.trace(), replica.out.Status, replica.trace())
	}
}

// A provider's error may quote its request, which is JSON: the draft a
// judge was given, and the guidance, are taken out of the error as JSON
// quotes them too.
func TestAnErrorQuotingTheRequestShowsNoDraft(t *testing.T) {
	t.Parallel()
	def := mustParse(t, `{"name": "x", "graph": {"start": "a", "nodes": {
	  "a": {"type": "inner_agent", "agent_id": "a", "transitions": {"COMPLETE": "s"}},
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`)
	draft := "DRAFT-MARK: mix \"A\" and <B>.\nThen heat."
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) {
		if t.Node.Name == "a" {
			return engine.Reply{Decision: flow.Complete, Response: draft, AgentGuidance: "GUIDE-MARK \"quoted\""}, nil
		}
		body, _ := json.Marshal(map[string]string{"content": t.Input, "guidance": t.Guidance})
		return engine.Reply{}, fmt.Errorf("%w: 400 bad request, body: %s", flow.ErrModelUnavailable, body)
	})
	r := runTurn(t, def, agent, nil, "hi")
	leaks(t, r.events, "DRAFT-MARK")
	leaks(t, r.events, "GUIDE-MARK")
	if r.out.Status != flow.StatusFailed || !strings.Contains(r.out.Err.Error(), "[hidden]") {
		t.Errorf("%s, %v", r.out.Status, r.out.Err)
	}
}

// A speculative turn may be discarded unseen: what its tools returned is
// hidden, as a held turn's is, from errors and recorded prompts.
func TestASpeculativeTurnsToolResultsAreHidden(t *testing.T) {
	t.Parallel()
	def := mustParse(t, guarded)
	rounds := []*flow.Step{{Node: "in", Decision: flow.NeedsTool, ToolUsage: []flow.ToolUse{{ToolName: "calculator", Input: []byte(`{"x": "IN-MARK"}`), Output: "OUT-MARK"}}}}
	task := &engine.Task{Node: def.Graph.Nodes["in"], ToolRounds: rounds, BeforeWrite: func(context.Context) error { return nil }}
	hidden := strings.Join(task.Hidden(), " ")
	if !strings.Contains(hidden, "IN-MARK") || !strings.Contains(hidden, "OUT-MARK") {
		t.Errorf("hidden: %q", hidden)
	}
}
