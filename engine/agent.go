package engine

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"superego/flow"
)

// Agent runs one node once: one model call, and the tools the model asks for.
// It may emit partial_output, tool_call and tool_result events as they happen.
type Agent interface {
	Act(ctx context.Context, t *Task, emit func(flow.Event)) (Reply, error)
}

// Task is everything a node's agent is given for one iteration.
type Task struct {
	FlowID     string
	InstanceID string
	Node       *flow.Node
	StepID     string // of the step this iteration will append

	// History and ToolRounds are the run's log's records, which an agent
	// only reads.
	History      []*flow.Step // earlier turns, hidden fields removed
	UserMessage  string       // the message that opened this turn
	Input        string       // the message this node works on
	InputFrom    string       // agent id that produced Input; "" for the user
	Guidance     string       // agent_guidance of the step before this node's turn
	GuidanceFrom string
	ToolRounds   []*flow.Step // this node's NEEDS_TOOL steps just before, oldest first
	Decisions    []string     // what the model may decide

	// Supervised, in a flow with rules, references or supervisors, for an
	// inner agent or a supervisor (a node with allowed_actions): what makes
	// the instance's context, which package supervision reads.
	Supervised *Supervised

	// Cache, where set, lets the agent reuse model replies recorded under
	// it (RunOptions.Cache); Tags say what the run is part of
	// (RunOptions.Tags): an experiment's runs record what their model
	// calls sent and were answered, for its provenance.
	Cache string
	Tags  map[string]string

	// Chunk, for a superego, asks it to judge one part of a draft that is
	// still being written (judge_stream, docs/gating.md); Input is then unused.
	Chunk *DraftChunk
	// BeforeWrite, where set, is called before a tool that changes
	// anything runs, and the tool runs only if it returns nil: a
	// speculative turn's writes wait there for the judge's verdict (docs/gating.md).
	BeforeWrite func(ctx context.Context) error
	// Calls decides, records and runs the tool calls of this iteration's
	// reply (docs/actions.md); where it is nil, the agent lets every call run.
	Calls *Calls
	// Approved are this node's calls that waited for a person's review,
	// now answered: the agent runs those approved and refuses the rest, as
	// they say, with no model call.
	Approved []flow.ToolUse
	// Action, for a superego, is a tool call or result to judge (docs/actions.md);
	// Input is its text.
	Action *Action
	// Client, for the agent that takes a client's tools, is what the
	// request offers it (docs/gateway.md).
	Client *flow.ClientTools
	// Stack, for a superego that takes one, is the user constitutions it
	// judges under on top of its own, the floor (docs/stacks.md).
	Stack []flow.Layer

	fromWithheld bool // Input is a draft a superego withheld
}

// DraftChunk is a part of a streaming draft to judge, and the text before
// it that was judged already.
type DraftChunk struct {
	Before string
	Text   string
}

// Supervised is what makes an instance's context: the rules and references
// it starts with, its steps so far (this turn's included, hidden fields
// removed), whose tool calls record its supervisors' changes, and the tools
// its flow's inner agents name, which the changes may be about.
type Supervised struct {
	Base  []flow.ContextItem
	Steps []flow.Step
	Tools []string
}

// Reply is what an agent's model answered.
type Reply struct {
	Thinking      string
	Decision      string
	AgentGuidance string
	Response      string
	ToolUsage     []flow.ToolUse
	// Basis is what a stacked judge said its decision rests on: "floor"
	// or a name of its stack, as the model wrote it.
	Basis string
	// Final says the tool calls ended the node's turn, and Decision
	// stands: a worker that has written its output is done.
	Final bool
	Model string
	// ServedModel and Parameters are the step's (Step.ServedModel).
	ServedModel string
	Parameters  *flow.Parameters
	Usage       *flow.Usage
	Latency     time.Duration
	Cached      bool // the model's reply came from the cache, with no call
	Shared      bool // with Cached: from the same call in flight for another run
}

// heldSteps are the ids of the steps of held, a held turn's events.
func heldSteps(held []flow.Event) map[string]bool {
	ids := map[string]bool{}
	for _, ev := range held {
		if s, ok := ev.Data.(*flow.Step); ok {
			ids[s.StepID] = true
		}
	}
	return ids
}

// task gathers what node's agent needs from steps, the log so far; held are
// the events held now (docs/gating.md).
func (r *runner) task(steps []*flow.Step, held []flow.Event, node *flow.Node) *Task {
	t := &Task{
		FlowID:      r.t.FlowID,
		InstanceID:  r.t.InstanceID,
		Cache:       r.t.Options.Cache,
		Tags:        r.t.Options.Tags,
		Node:        node,
		StepID:      strconv.Itoa(len(steps) + 1),
		UserMessage: r.t.Input,
		Input:       r.t.Input,
		Decisions:   node.Decisions(),
		Stack:       stackFor(node, r.stack),
	}
	if slices.Contains(node.Tools, flow.Client) && node.Type == flow.InnerAgent {
		t.Client = r.t.Options.Client
	}
	t.History = r.earlier(steps)
	this := steps[r.turn+1:]
	i := len(this)
	// The agent's rounds just before, with the judgements of their calls
	// (docs/actions.md) between them: a judgement is no reason to forget a round, and
	// a judge's guidance is for no agent.
	for i > 0 && (this[i-1].Judged != nil || this[i-1].Node == node.Name && (this[i-1].Decision == flow.NeedsTool || this[i-1].AgentID == flow.Reviewer)) {
		i--
	}
	t.ToolRounds = toolRounds(this[i:])
	if r.context != nil && (node.Type == flow.InnerAgent || len(node.AllowedActions) > 0) {
		// What a supervisor reads of the steps can reach a client in its
		// own step's tool_usage: no hidden field, and nothing of a draft
		// that is held or was withheld (docs/gating.md).
		held := heldSteps(held)
		visible := make([]flow.Step, len(steps))
		for i, step := range steps {
			s := &visible[i]
			*s = *step
			withoutHidden(s)
			if s.Withheld != "" || held[s.StepID] {
				s.Response, s.ToolUsage = "", nil
			}
		}
		sv := *r.context
		sv.Steps = visible
		t.Supervised = &sv
	}
	if i > 0 {
		t.Guidance, t.GuidanceFrom = this[i-1].AgentGuidance, this[i-1].AgentID
	}
	for j := len(this) - 1; j >= 0; j-- {
		s := this[j]
		if s.Response != "" && s.Decision == flow.Modify {
			t.Input = s.Response // the user's message, as a supervisor rewrote it
			break
		}
		// A step whose node left the flow is read as a superego's: it
		// cannot have been a draft the flow now knows how to judge.
		if n := r.t.Def.Graph.Nodes[s.Node]; s.Response != "" && n != nil && n.Type == flow.InnerAgent {
			t.Input, t.InputFrom, t.fromWithheld = s.Response, s.AgentID, s.Withheld != ""
			break
		}
	}
	return t
}

// toolRounds are an agent's tool rounds as its model reads them: a call
// that waited for a person's review, or for a client's result (docs/gateway.md), is
// read in its place among its reply's calls, as it ran or was refused once
// answered; the answers themselves, and the judgements of the calls, are
// no rounds.
func toolRounds(steps []*flow.Step) []*flow.Step {
	waited := func(s *flow.Step) bool {
		return s.AgentID == flow.Reviewer || s.Judged != nil || slices.ContainsFunc(s.ToolUsage, func(u flow.ToolUse) bool { return u.Awaiting || u.AwaitingResult })
	}
	if !slices.ContainsFunc(steps, waited) {
		return steps
	}
	answer := map[string]flow.ToolUse{} // a waited call's use once answered, by id
	for _, s := range steps {
		for _, u := range s.ToolUsage {
			if s.AgentID != flow.Reviewer && s.Judged == nil && !u.Awaiting && !u.AwaitingResult {
				answer[u.ID] = u
			}
		}
	}
	out := make([]*flow.Step, 0, len(steps))
	moved := map[string]bool{} // answers read in their call's place
	for _, step := range steps {
		if step.AgentID == flow.Reviewer || step.Judged != nil {
			continue
		}
		s := *step // the log's record is shared: the round is a record of its own
		uses := make([]flow.ToolUse, 0, len(s.ToolUsage))
		for _, u := range s.ToolUsage {
			switch a, ok := answer[u.ID]; {
			case (u.Awaiting || u.AwaitingResult) && ok:
				uses, moved[u.ID] = append(uses, a), true
			case !u.Awaiting && !u.AwaitingResult && moved[u.ID]:
			default:
				uses = append(uses, u)
			}
		}
		s.ToolUsage = uses
		out = append(out, &s)
	}
	return out
}

// hasHidden reports whether the step has a hidden field that
// withoutHidden would take out.
func hasHidden(s *flow.Step) bool {
	return s.Thinking != "" || s.AgentGuidance != "" || s.WithheldResponse != "" || s.WithheldToolUsage != nil ||
		slices.ContainsFunc(s.ToolUsage, func(u flow.ToolUse) bool { return u.WithheldOutput != "" })
}

// withoutHidden takes the step's hidden fields out, its tool usage copied
// where a result it held was withheld.
func withoutHidden(s *flow.Step) {
	s.Thinking, s.AgentGuidance, s.WithheldResponse, s.WithheldToolUsage = "", "", "", nil
	if slices.ContainsFunc(s.ToolUsage, func(u flow.ToolUse) bool { return u.WithheldOutput != "" }) {
		s.ToolUsage = slices.Clone(s.ToolUsage)
		for i := range s.ToolUsage {
			s.ToolUsage[i].WithheldOutput = ""
		}
	}
}

// earlier is the visible transcript before this turn, which every task of
// the turn is given: made once, and shared, for agents only read it, and a
// conversation of thousands of messages is not copied for each task. The
// steps before the run have their hidden fields taken out where they are,
// in the log before the run (Turn.Steps), which nothing reads them in once
// the turn's tasks begin; a step this run wrote before its user's (a new
// instance's conversation) is shared with its event, and is copied where
// it has a hidden field. Where none was withheld, the transcript is those
// steps, not a copy.
func (r *runner) earlier(steps []*flow.Step) []*flow.Step {
	r.historyOnce.Do(func() {
		past := steps[:r.turn:r.turn]
		for i, s := range past {
			if i >= len(r.t.Steps) && hasHidden(s) {
				c := *s
				s, past[i] = &c, &c
			}
			withoutHidden(s)
		}
		withheld := func(s *flow.Step) bool { return s.Withheld != "" } // the user never saw it
		if !slices.ContainsFunc(past, withheld) {
			r.history = past
			return
		}
		r.history = slices.DeleteFunc(slices.Clone(past), withheld)
	})
	return r.history
}

// redacted is an error whose message had hidden text taken out.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }

func (r *redacted) Unwrap() error { return r.err }

// redact takes hidden text out of an error's message: a provider's error
// may quote the request, and the request holds what a client must not see.
func redact(err error, hidden ...string) error {
	msg := Hider(hidden).Replace(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redacted{msg, err}
}

// Hider replaces each of the hidden texts with "[hidden]", as it is and as
// JSON quotes it (a request, and a tool's result, may be JSON).
func Hider(hidden []string) *strings.Replacer {
	var pairs []string
	for _, h := range hidden {
		if strings.TrimSpace(h) == "" {
			continue
		}
		pairs = append(pairs, h, "[hidden]")
		if q, _ := json.Marshal(h); string(q[1:len(q)-1]) != h {
			pairs = append(pairs, string(q[1:len(q)-1]), "[hidden]")
		}
	}
	return strings.NewReplacer(pairs...)
}

// Hidden is what the task's request to a model holds that a client of
// the run has not been shown, and may never be: the previous node's
// agent_guidance, a draft under judgement, a held turn's tool results. (A
// supervisor's view of the steps, Supervised, has none of these.) Errors,
// and an observer that records a prompt, take these out.
func (t *Task) Hidden() []string {
	hidden := []string{t.Guidance}
	if t.InputFrom != "" {
		hidden = append(hidden, t.Input)
	}
	if t.Chunk != nil {
		hidden = append(hidden, t.Chunk.Before, t.Chunk.Text)
	}
	if a := t.Action; a != nil { // a call may be held, a result withheld
		hidden = append(hidden, string(a.Call.Input), a.Call.Output, a.Call.Error)
		for _, u := range slices.Concat(a.Others, a.Earlier) {
			hidden = append(hidden, string(u.Input), u.Output, u.Error)
		}
	}
	if t.Node.Judged() || t.BeforeWrite != nil { // held, or speculative and maybe discarded
		for _, s := range t.ToolRounds {
			for _, u := range s.ToolUsage {
				hidden = append(hidden, string(u.Input), u.Output, u.Error)
			}
		}
	}
	return hidden
}

// Held reports whether what the task's model answers is held from clients
// until a superego has judged it, or is a speculative turn's, which may be
// discarded unseen, or is a chunk judgement, which no client is sent: an
// observer records no text of such an answer.
func (t *Task) Held() bool {
	return t.Node.Judged() || t.BeforeWrite != nil || t.Chunk != nil || t.Action != nil
}

// forJudge is the task of judge, asked about what agent's task t does (a
// call, a result, a chunk of its draft) under stack: the conversation is
// t's; what the judge reads of the agent, its caller sets.
func (t *Task) forJudge(judge, agent *flow.Node, stack []flow.Layer) *Task {
	return &Task{FlowID: t.FlowID, InstanceID: t.InstanceID, Cache: t.Cache, Tags: t.Tags, Node: judge, History: t.History,
		UserMessage: t.UserMessage, InputFrom: agent.AgentID, Stack: stack}
}
