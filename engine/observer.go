package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"superego/flow"
)

// Observer is told what runs do, for an operator's metrics and traces: the
// engine tells it of runs and of its writes, the executor of node
// iterations, of steps and of held drafts. Any function may be nil, and a
// nil *Observer observes nothing, at the cost of a nil check.
//
// Its functions run on the run's own goroutines, in its way: they must
// not block. They are given identifiers (flow ids, node names, decisions
// bounded by the flow's definition) and never a step's text: nothing of
// a user's message, of a hidden field, or of a draft a superego may yet
// withhold passes through here.
//
// The context RunStarted returns is the run's for the executor, and the
// one NodeStarted returns is the agent's for that iteration: a span either
// puts in it is the parent of what runs under it, down to the model's and
// the tools' calls.
type Observer struct {
	RunStarted func(ctx context.Context, run RunInfo) context.Context
	// RunEnded is called with RunStarted's context; status is the run's,
	// or "interrupted" for one a shutdown stopped, to resume later; code
	// is the error code of a failed run (ErrorCode).
	RunEnded func(ctx context.Context, run RunInfo, status, code string)

	NodeStarted func(ctx context.Context, it Iteration) context.Context
	// NodeEnded is called with NodeStarted's context; decision is as
	// Stepped has it, "" where the iteration failed with code.
	NodeEnded func(ctx context.Context, it Iteration, decision, code string)

	// Stepped is called for each node step appended to a run's log.
	// decision is the step's, or "*" for one that only the node's "*"
	// transition accepted: a model may answer any word there, and a label
	// must not take whatever a model (or a user who talks it into it) says.
	Stepped func(flowID, node, decision string)
	// Based is called for each step of a stacked superego that said what
	// its decision rests on (docs/stacks.md): basis is "floor", a name of the
	// constitution library, or "other", never a model's own words.
	Based func(flowID, node, basis string)
	// Drafted is called when a held turn (docs/gating.md) is settled: once per
	// inner agent whose steps it held, released or withheld.
	Drafted func(flowID, node string, released bool)
	// Wrote is called when a write of events the engine queued to its
	// store is durable, or has failed: d is from queueing to then, the
	// time a client waits for the events, which it is shown only once
	// they are durable. Held events and an instance's creation, which no
	// client waits for, are not timed: they share the queue, and a slow
	// store shows in the writes that are.
	Wrote func(d time.Duration)
	// Judged is called for each judgement of a tool call or of its result
	// (docs/actions.md): kind is KindCall or KindResult; decision is the one the
	// judgement stands for; wait, how long the call or result waited.
	Judged func(flowID, judge, kind, decision string, wait time.Duration)
	// Ruled is called for each tool call a permission rule decided:
	// effect is EffectAllow, EffectAsk or EffectDeny.
	Ruled func(flowID, effect string)
}

// RunInfo names a run.
type RunInfo struct {
	FlowID     string
	InstanceID string
	RunID      string
	Resumed    bool // it goes on from an interrupted run's log
}

// Iteration is one iteration of a node within a run.
type Iteration struct {
	RunInfo
	Node   *flow.Node
	StepID string // of the step it will append
	// Speculative: the iteration runs before its judge has decided
	// whether it may (docs/gating.md), and may be discarded.
	Speculative bool
}

func (o *Observer) runStarted(ctx context.Context, run RunInfo) context.Context {
	if o == nil || o.RunStarted == nil {
		return ctx
	}
	return o.RunStarted(ctx, run)
}

func (o *Observer) runEnded(ctx context.Context, run RunInfo, out Outcome) {
	if o == nil || o.RunEnded == nil {
		return
	}
	code := ""
	if out.Err != nil {
		code = flow.ErrorCode(out.Err)
	}
	o.RunEnded(ctx, run, out.Status, code)
}

// nodeStarted tells the observer of an iteration of node about to run.
func (r *runner) nodeStarted(ctx context.Context, node *flow.Node, stepID string, speculative bool) context.Context {
	if o := r.x.Observe; o != nil && o.NodeStarted != nil {
		return o.NodeStarted(ctx, r.iteration(node, stepID, speculative))
	}
	return ctx
}

// nodeEnded tells the observer of the iteration's end: its step's
// decision, or its error.
func (r *runner) nodeEnded(ctx context.Context, node *flow.Node, stepID string, speculative bool, decision string, err error) {
	o := r.x.Observe
	if o == nil || o.NodeEnded == nil {
		return
	}
	code := ""
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, errDiscarded):
		code, decision = "cancelled", "" // by a cancel, or a speculative turn discarded
	case err != nil:
		code, decision = flow.ErrorCode(err), ""
	default:
		decision = decisionLabel(node, decision)
	}
	o.NodeEnded(ctx, r.iteration(node, stepID, speculative), decision, code)
}

func (r *runner) iteration(node *flow.Node, stepID string, speculative bool) Iteration {
	return Iteration{RunInfo: r.t.info(), Node: node, StepID: stepID, Speculative: speculative}
}

func (o *Observer) stepped(flowID string, node *flow.Node, decision, basis string) {
	if o == nil || node == nil {
		return
	}
	if o.Stepped != nil {
		o.Stepped(flowID, node.Name, decisionLabel(node, decision))
	}
	if o.Based != nil && basis != "" {
		o.Based(flowID, node.Name, basis)
	}
}

// drafted tells of the drafts a settle released or withheld: one per
// node whose steps were held.
func (o *Observer) drafted(flowID string, held []flow.Event, released bool) {
	if o == nil || o.Drafted == nil {
		return
	}
	var nodes []string
	for _, ev := range held {
		if s, ok := ev.Data.(*flow.Step); ok && !slices.Contains(nodes, s.Node) {
			nodes = append(nodes, s.Node)
		}
	}
	for _, n := range nodes {
		o.Drafted(flowID, n, released)
	}
}

// wrote tells Wrote of a write queued at start that is done.
func (o *Observer) wrote(start time.Time) {
	if o != nil && o.Wrote != nil {
		o.Wrote(time.Since(start))
	}
}

func (o *Observer) judged(flowID, judge, kind string, decision string, wait time.Duration) {
	if o != nil && o.Judged != nil {
		o.Judged(flowID, judge, kind, decision, wait)
	}
}

func (o *Observer) ruled(flowID, effect string) {
	if o != nil && o.Ruled != nil {
		o.Ruled(flowID, effect)
	}
}

// known are the decisions the engine gives meaning to: a label may name
// them whatever the node's transitions are (a fallback, on_error).
var known = []string{flow.Block, flow.Accept, flow.Caution, flow.NeedsClarification, flow.Complete, flow.NeedsTool, flow.Modify, flow.HumanReview}

// decisionLabel is a decision as a metric or a span may name it: one of
// the node's transition keys or of the decisions the engine knows, else
// "*".
func decisionLabel(n *flow.Node, d string) string {
	if _, ok := n.Transitions[d]; ok && d != flow.AnyDecision || d == "" || slices.Contains(known, d) {
		return d
	}
	return flow.AnyDecision
}
