package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"superego/flow"
)

// Executor runs turns of flow instances. Its zero value needs an Agent.
type Executor struct {
	Agent Agent
	Now   func() time.Time // default time.Now
	// Context is rules and references every instance of every flow starts
	// with, before its flow's own.
	Context []flow.ContextItem
	// Observe, where set, is told of runs, iterations, steps and drafts
	// (observe.go); the engine tells it of runs and writes.
	Observe *Observer
	// Library is the constitutions a run's stack names (docs/stacks.md), read
	// when the run starts or resumes.
	Library flow.Library
}

// Turn is one run of an instance: the input that starts it and the log it
// continues.
type Turn struct {
	FlowID     string
	Def        *flow.Definition
	InstanceID string
	RunID      string
	Steps      []flow.Step  // the instance's log before this run, the run's to change (its hidden fields are taken out)
	Prior      []flow.Step  // for a new instance: its conversation before Input, recorded with the run's start
	Held       []flow.Event // its held events (docs/gating.md), for a run that resumes
	Options    flow.RunOptions
	Recorded   []flow.Step // the turn Options.Replay replays
	Input      string
	Resume     bool // continue the interrupted run the log ends with; Input is its user step's
	Opened     bool // with Resume: the log ends with this run's Opening, written for it; no new run_start
	// Continue goes on with the log's last turn, with no new message
	// (Request.Continue).
	Continue bool
	// Unfinished are the tool calls of an iteration the interruption cut
	// short, as the log has them, for a run that resumes; the run adds
	// those its held events show, and records them (finishInterrupted).
	Unfinished flow.Unfinished
}

// Outcome is how a run ended.
type Outcome struct {
	Status   string
	Response string
	Err      error // for StatusFailed
}

// Sink is where a run's events go, in order. Emit records events a client
// may see, all of them or none; Hold records an event of a held turn (docs/gating.md),
// which no client may see; Settle ends the held turn: it records
// events as Emit does and, in the same write, forgets the held ones. A
// Sink without Hold drops held events, and one without Settle emits.
type Sink struct {
	Emit   func(evs ...flow.Event) error
	Hold   func(ev flow.Event) error
	Settle func(evs ...flow.Event) error
	// Sync waits until every event recorded so far is durable: a tool
	// call is on record as started before it runs (docs/actions.md). nil: the
	// sink keeps nothing that could be lost.
	Sync func() error
}

// Execute runs one turn and reports it to sink: run_start with the user's
// complete_step, then per node node_start, partials and tool events,
// complete_step, and last done. Where a superego will judge an inner
// agent's turn, that turn is held, and released or withheld by the
// judgement (docs/gating.md). An error from the sink fails the run: a step that
// cannot be recorded must not be acted on. A run stopped by the engine's
// shutdown ends without done, so that it resumes at the next start.
func (x *Executor) Execute(ctx context.Context, t Turn, sink Sink) Outcome {
	r := x.newRunner(&t, sink)
	return r.end(r.walk(ctx))
}

// newRunner sets a run of t up, which it keeps and may change. It is apart
// from running it so that what it needs takes no room on the stack while
// a run waits on its model.
func (x *Executor) newRunner(t *Turn, sink Sink) *runner {
	r := &runner{x: x, t: t, now: x.now(), sink: sink, steps: logOf(t.Steps, 6), iters: map[string]int{}}
	if len(x.Context) > 0 || len(t.Def.Context) > 0 || t.Def.Supervises() {
		var names []string
		for _, n := range t.Def.Graph.Nodes {
			if n.Type == flow.InnerAgent {
				names = append(names, n.Tools...)
			}
		}
		slices.Sort(names)
		r.context = &Supervised{Base: append(slices.Clone(x.Context), t.Def.Context...), Tools: slices.Compact(names)}
	}
	if t.Options.Replay != nil {
		r.replay = newReplayer(t.Recorded, t.Options.Replay)
	}
	return r
}

// logOf is a run's log of steps: the log before it, with room for more
// steps, each of the run's own in one record, which the log and the
// step's events share.
func logOf(before []flow.Step, more int) []*flow.Step {
	steps := make([]*flow.Step, len(before), len(before)+more)
	for i := range before {
		steps[i] = &before[i]
	}
	return steps
}

// end sends the run's last events for how it ended, out: done, after an
// error where it failed, settling a turn still held. It is apart from Run
// so that what it needs takes no room on the stack while a run waits on
// its model: a thousand runs in flight hold a thousand stacks.
func (r *runner) end(out Outcome) Outcome {
	t := r.t
	if out.Status == statusInterrupted {
		return out // held events stay held: the resumed run judges them
	}
	var end []flow.Event
	if out.Status == flow.StatusFailed {
		end = append(end, flow.Event{Name: flow.EventError, Data: flow.ErrorData{Code: flow.ErrorCode(out.Err), Message: out.Err.Error(), Node: r.cur}})
	}
	done := flow.Done{InstanceID: t.InstanceID, Status: out.Status, Response: r.response, Usage: r.runUsage()}
	if r.replay != nil {
		done.Replay = &r.replay.counts
	}
	end = append(end, flow.Event{Name: flow.EventDone, Data: done})
	var err error
	switch {
	case out.Status == flow.StatusAwaitingToolResult:
		sent := map[string]bool{}
		this := r.steps[r.turn+1:]
		for _, w := range waitingResults(this) {
			done.ToolCalls = append(done.ToolCalls, flow.ToolCall{Node: w.node, ToolName: w.use.ToolName, Input: w.use.Input, ToolCallID: w.use.ID})
			sent[w.use.ID] = true
		}
		// The answer's text is that of the reply whose calls go, where
		// it was released: a held turn's stays held, and so does a
		// withheld step's, which a turn that goes on reads back.
		done.Response = ""
		for i := len(this) - 1; i >= 0 && len(r.held) == 0; i-- {
			if slices.ContainsFunc(this[i].ToolUsage, func(u flow.ToolUse) bool { return sent[u.ID] }) {
				if this[i].Withheld != "" {
					break
				}
				done.Response = this[i].Response
				break
			}
		}
		end[len(end)-1].Data = done
		if len(r.held) > 0 {
			err = r.settleSending(r.judgeOf(r.cur), false, sent, end...)
		} else {
			err = r.emit(end...)
		}
	case len(r.held) > 0 && !(out.Status == flow.StatusAwaitingReview && len(awaitingCalls(r.steps[r.turn+1:])) > 0):
		err = r.settle(r.judgeOf(r.cur), false, end...) // fail closed: nothing unjudged goes out
	default:
		err = r.emit(end...) // a turn whose calls wait for review stays held: a pause is not an end
	}
	if err != nil && out.Err == nil {
		out = Outcome{Status: flow.StatusFailed, Err: err}
	}
	out.Response = r.response
	return out
}

// panicked is a panic in a run: the error event says what it was, and the
// server's log where.
type panicked struct {
	msg   string
	stack []byte
}

func (p *panicked) Error() string { return p.msg }

type runner struct {
	x    *Executor
	t    *Turn
	now  func() time.Time
	sink Sink
	// steps is the log: the steps before the run, which are the run's own
	// to change (Turn.Steps), then the run's, each shared with its
	// events, and so never changed: a change is a new record.
	steps []*flow.Step
	iters map[string]int
	turn  int // index in steps of this turn's user step
	// context, where the flow has rules, references or supervisors, is
	// what tasks carry of the instance's context but its steps; nil where
	// it has none of them.
	context *Supervised

	cur      string       // the node running
	nsteps   int          // node steps this run
	held     []flow.Event // the held turn's events, in order (docs/gating.md)
	response string       // the last non-empty response a client was sent
	usage    flow.RunUsage
	chunks   map[string][]flow.Chunk // a judge's chunk judgements, for its next step
	verdicts map[string]*Reply       // a judge's verdict on a withheld chunk, for its next step
	replay   *replayer               // for a replay: the recorded turn, walked beside this one
	stack    []flow.Layer            // the run's stack, with the library's texts

	// history is the visible transcript before this turn (earlier); the
	// steps before the turn do not change while it runs.
	history     []*flow.Step
	historyOnce sync.Once
}

// emit sends events a client may see.
func (r *runner) emit(evs ...flow.Event) error {
	r.track(evs)
	return r.sink.Emit(evs...)
}

// track keeps the last response a client is sent: done's response. It is
// not inlined, so that its copy of a step takes no room on the stack of
// the events' way to their subscribers.
//
//go:noinline
func (r *runner) track(evs []flow.Event) {
	for _, ev := range evs {
		if s, ok := ev.Data.(*flow.Step); ok && s.Response != "" && s.Role != flow.RoleUser {
			r.response = s.Response
		}
	}
}

// hold keeps an event of a held turn: durable, shown to nobody.
func (r *runner) hold(ev flow.Event) error {
	r.held = append(r.held, ev)
	if r.sink.Hold == nil || ev.Name == flow.EventPartial { // partials are never stored
		return nil
	}
	return r.sink.Hold(ev)
}

// settle ends the held turn with judge's judgement: released, its events
// go out as they were; withheld, each of its steps goes out empty, naming
// judge, and nothing else of it. tail follows in the same write.
func (r *runner) settle(judge string, release bool, tail ...flow.Event) error {
	return r.settleSending(judge, release, nil, tail...)
}

// settleSending settles the held turn as settle does, but for the calls in
// sent, which go to the client whatever the judgement (docs/gateway.md): withheld,
// its steps still show them, and the steps of their judgements go out as
// they are. So do the calls a rule or a judge refused, and their judges'
// steps: they never ran, and no later judgement can change that; the
// draft's text and the results of calls that ran stay withheld.
func (r *runner) settleSending(judge string, release bool, sent map[string]bool, tail ...flow.Event) error {
	group := make([]flow.Event, 0, len(r.held)+len(tail))
	if release {
		group = append(group, r.held...)
	} else {
		group = r.withhold(group, judge, sent)
	}
	r.x.Observe.drafted(r.t.FlowID, r.held, release)
	r.held = nil
	group = append(group, tail...)
	r.track(group)
	if r.sink.Settle == nil {
		return r.sink.Emit(group...)
	}
	return r.sink.Settle(group...)
}

// withhold appends to group the held turn's events as judge's judgement
// withholds them, as settleSending says, and marks their steps withheld in
// the log. It is apart from settleSending so that what it needs takes no
// room on the stack while a turn that was released goes out.
func (r *runner) withhold(group []flow.Event, judge string, sent map[string]bool) []flow.Event {
	withheld := map[string]bool{}
	drafts := map[string]bool{} // the held steps' responses, which later held steps may have as input
	refused := map[string]bool{}
	for _, ev := range r.held {
		if s, ok := ev.Data.(*flow.Step); ok && sent != nil {
			for _, u := range s.ToolUsage {
				refused[u.ID] = refused[u.ID] || u.Refused
			}
		}
	}
	for _, ev := range r.held {
		held, ok := ev.Data.(*flow.Step)
		switch {
		case ok && held.Judged != nil && held.Judged.Kind == flow.KindCall && (sent[held.Judged.ToolCallID] || refused[held.Judged.ToolCallID]):
			group = append(group, ev)
		case ok:
			s := *held // what goes out is a record of its own: the held one is the log's
			drafts[s.Response] = true
			if drafts[s.Input] || s.Judged != nil {
				s.Input = "" // another held step's draft (a chained agent's, or a judge's tool round's), or a call and its result
			}
			s.Withheld, s.WithheldResponse, s.WithheldToolUsage = judge, s.Response, s.ToolUsage
			s.Response, s.ToolUsage = "", nil
			for _, u := range s.WithheldToolUsage {
				if sent[u.ID] || u.Refused && sent != nil {
					s.ToolUsage = append(s.ToolUsage, u)
				}
			}
			ev.Data = &s
			group = append(group, ev)
			withheld[s.StepID] = true
		}
	}
	for i := len(r.steps) - 1; i >= 0 && len(withheld) > 0; i-- {
		if id := r.steps[i].StepID; withheld[id] {
			marked := *r.steps[i] // the held record is the held event's too
			marked.Withheld = judge
			r.steps[i] = &marked
			delete(withheld, id)
		}
	}
	return group
}

// walk runs the turn from node to node; a panic in it ends the run
// failed, not the process.
func (r *runner) walk(ctx context.Context) (ended Outcome) {
	defer func() {
		if p := recover(); p != nil {
			ended = Outcome{Status: flow.StatusFailed, Err: &panicked{fmt.Sprintf("panic in node %s: %v", r.cur, p), debug.Stack()}}
		}
	}()
	cur, first, end := r.begin()
	if end {
		return first
	}
	g := &r.t.Def.Graph
	for hops := 0; ; {
		r.cur = cur
		if ctx.Err() != nil {
			return r.stopped(ctx)
		}
		node := g.Nodes[cur]
		if node == nil {
			return Outcome{Status: flow.StatusFailed, Err: fmt.Errorf("node %q is not in flow %q any more; the run cannot go on: %w", cur, r.t.FlowID, flow.ErrInvalid)}
		}
		if r.iters[cur] >= node.Iterations() {
			// MAX_ITERATIONS chains can cycle between exhausted nodes
			// without a step; hops bounds them.
			target, ok := node.Target(flow.MaxIterations)
			if hops++; !ok || target == "" || hops > len(g.Nodes) {
				return Outcome{Status: flow.StatusIterationLimit}
			}
			cur = target
			continue
		}
		if r.nsteps >= g.Limit() {
			return Outcome{Status: flow.StatusIterationLimit}
		}
		r.nsteps, hops = r.nsteps+1, 0
		r.iters[cur]++

		if r.replay != nil {
			next, out, reused := r.fromRecord(ctx, node)
			switch {
			case out != nil:
				return *out
			case reused:
				cur = next
				continue
			}
		}
		var spec *speculation
		if node.Speculate && r.replay == nil { // a replay reuses what speculation would run
			spec = r.speculate(ctx, node)
		}
		// The iteration's step: built here, then the log's record as it
		// is, with no copy (stamp).
		step := new(flow.Step)
		by, err := r.act(ctx, node, step)
		if err == nil && by != node { // a judge of its actions ended the run
			if err := r.appendStep(step, by); err != nil {
				return Outcome{Status: flow.StatusFailed, Err: err}
			}
			status, _ := ending(step, by)
			return Outcome{Status: status}
		}
		if err != nil && ctx.Err() != nil && !errors.Is(err, flow.ErrTimeout) {
			spec.discard(r)
			return r.stopped(ctx)
		}
		if err != nil && node.OnError != "" {
			onError(node, err, step)
			step.Stack, err = stackEntries(stackFor(node, r.stack)), nil
		}
		if err != nil {
			spec.discard(r)
			return Outcome{Status: flow.StatusFailed, Err: err}
		}
		onRecord := r.replay == nil || r.replay.asked(step)
		if err := r.appendStep(step, node); err != nil {
			spec.discard(r)
			return Outcome{Status: flow.StatusFailed, Err: err}
		}
		if !onRecord {
			// A decision that ends the run (a BLOCK that leads nowhere)
			// needs nothing live: the replay's outcome is whole.
			if status, end := r.ending(step, node); end {
				return Outcome{Status: status}
			}
			return Outcome{Status: flow.StatusDiverged}
		}
		if spec.accepted(step) {
			r.cur = spec.node.Name // what fails now fails there
			step, err = spec.adopt(r)
			if err != nil && ctx.Err() != nil && !errors.Is(err, flow.ErrTimeout) {
				return r.stopped(ctx)
			}
			if err != nil {
				return Outcome{Status: flow.StatusFailed, Err: err}
			}
			node = g.Nodes[step.Node]
		} else {
			spec.discard(r)
		}
		if status, end := r.ending(step, node); end {
			return Outcome{Status: status}
		}
		cur = *step.NextAgent
	}
}

// begin opens the run, or picks up the turn it goes on with, and returns
// the node to run first; or, where the run ends before any node runs, end
// and how. It is apart from run so that what it needs takes no room on
// the stack while a run waits on its model.
func (r *runner) begin() (cur string, out Outcome, end bool) {
	g := &r.t.Def.Graph
	if r.t.Resume {
		if !r.t.Opened {
			start := flow.Event{Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: r.t.InstanceID, RunID: r.t.RunID, FlowID: r.t.FlowID, Resumed: true, RunOptions: r.t.Options}}
			if err := r.emit(start); err != nil {
				return "", Outcome{Status: flow.StatusFailed, Err: err}, true
			}
		}
		if err := r.resume(); err != nil {
			return "", Outcome{Status: flow.StatusFailed, Err: err}, true
		}
		// A held turn whose last step leads where nothing judges it was
		// to be released at once: the crash came between its hold and
		// its release.
		if n := len(r.steps); len(r.held) > 0 && r.held[len(r.held)-1].Name == flow.EventCompleteStep {
			if s := r.steps[n-1]; !g.Holds(s.NextAgent) {
				if err := r.settle("", true); err != nil {
					return "", Outcome{Status: flow.StatusFailed, Err: err}, true
				}
			}
		}
	} else {
		// One write: a run a client has seen start has its message, and
		// the conversation before it.
		opening := r.opening()
		if err := r.sink.Emit(opening...); err != nil {
			return "", Outcome{Status: flow.StatusFailed, Err: err}, true
		}
		if r.t.Options.Review != nil || r.t.Continue {
			if err := r.resume(); err != nil { // it goes on with the turn it answers
				return "", Outcome{Status: flow.StatusFailed, Err: err}, true
			}
		}
	}
	var err error
	if r.stack, err = r.x.Library.Layers(r.t.Options.Stack); err != nil {
		return "", Outcome{Status: flow.StatusFailed, Err: err}, true
	}
	if r.t.Options.Review != nil {
		if err := r.answer(); err != nil {
			return "", Outcome{Status: flow.StatusFailed, Err: err}, true
		}
	}
	if reason := r.t.Options.Abandon; reason != "" {
		return "", r.abandon(reason), true
	}
	if err := r.finishInterrupted(); err != nil {
		return "", Outcome{Status: flow.StatusFailed, Err: err}, true
	}
	last := r.steps[len(r.steps)-1]
	if status, end := r.ending(last, g.Nodes[last.Node]); end {
		return "", Outcome{Status: status}, true // a review that ends it, or a run that had ended with only done missing
	}
	return *last.NextAgent, Outcome{}, false
}

// fromRecord, in a replay, takes node's step from the recorded turn where
// the replay still follows it: reused says it did, and next is where the
// run goes on; out, where set, is how the run ends instead.
func (r *runner) fromRecord(ctx context.Context, node *flow.Node) (next string, out *Outcome, reused bool) {
	rec, ok := r.replay.at(node.Name)
	if !ok {
		return "", &Outcome{Status: flow.StatusDiverged}, false
	}
	if rec != nil && node.Type == flow.InnerAgent {
		// A changed judge of its actions is asked again about the
		// recorded calls and results: one that decides otherwise takes
		// the run off the record, here, or ends it.
		step, changed, ended, err := r.rejudge(ctx, node, *rec)
		switch {
		case err != nil && ctx.Err() != nil:
			out := r.stopped(ctx)
			return "", &out, false
		case err != nil:
			return "", &Outcome{Status: flow.StatusFailed, Err: err}, false
		case ended != nil:
			r.replay.diverged = true
			if err := r.appendStep(ended, r.t.Def.Graph.Nodes[ended.Node]); err != nil {
				return "", &Outcome{Status: flow.StatusFailed, Err: err}, false
			}
			status, _ := ending(ended, nil)
			return "", &Outcome{Status: status}, false
		case changed && r.replay.noLive:
			return "", &Outcome{Status: flow.StatusDiverged}, false
		case changed:
			r.replay.diverged, rec = true, nil
		default:
			rec = &step
		}
	}
	if rec == nil {
		return "", nil, false
	}
	step, err := r.reuse(node, *rec)
	if err != nil {
		return "", &Outcome{Status: flow.StatusFailed, Err: err}, false
	}
	if status, end := r.ending(&step, node); end {
		return "", &Outcome{Status: status}, false
	}
	return *step.NextAgent, nil, true
}

// reuse makes node's step from the recorded one, with no call: what the
// node decided and said, on the input this run's path gives it.
func (r *runner) reuse(node *flow.Node, rec flow.Step) (flow.Step, error) {
	if err := r.emit(flow.Event{Name: flow.EventNodeStart, Data: flow.NodeStart{Node: node.Name, AgentID: node.AgentID}}); err != nil {
		return flow.Step{}, err
	}
	task := r.task(r.steps, r.held, node)
	// It made no call: no cached reply, no tokens, no time.
	rec.Input, rec.Reused, rec.Cached, rec.Shared, rec.Usage, rec.LatencyMS, rec.Chunks = task.Input, true, false, false, nil, 0, nil
	if task.fromWithheld {
		rec.Input = ""
	}
	return rec, r.appendStep(&rec, node)
}

// Opening is what a run writes first, in one write, numbered by the caller:
// its run_start with the user's message and the conversation before it, or
// with the human review it answers. A run whose opening was written for it
// (a replica that dispatched it, with its job) runs with Turn.Opened.
func (x *Executor) Opening(t Turn) []flow.Event {
	return (&runner{x: x, t: &t, now: x.now(), steps: logOf(t.Steps, 2), iters: map[string]int{}}).opening()
}

func (x *Executor) now() func() time.Time {
	if x.Now == nil {
		return time.Now
	}
	return x.Now
}

// opening stamps the run's first steps onto the log and returns its first
// events.
func (r *runner) opening() []flow.Event {
	start := flow.Event{Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: r.t.InstanceID, RunID: r.t.RunID, FlowID: r.t.FlowID, RunOptions: r.t.Options}}
	if r.t.Options.Review != nil || r.t.Continue {
		return []flow.Event{start} // the turn goes on: a review's answer, or a client's results, follow (answer, act)
	}
	first := r.t.Def.Graph.Start
	if n := len(r.steps); n > 0 {
		if last := r.steps[n-1]; last.Decision == flow.NeedsClarification && last.NextAgent != nil {
			first = *last.NextAgent
		}
	}
	group := make([]flow.Event, 1, len(r.t.Prior)+2)
	group[0] = start
	if len(r.t.Prior) > 0 || len(r.steps) > 0 {
		group = r.before(group)
	}
	r.turn = len(r.steps)
	user := r.stamp(&flow.Step{AgentID: "user", Role: flow.RoleUser, Response: r.t.Input, NextAgent: &first})
	return append(group, flow.Event{Name: flow.EventCompleteStep, Data: user})
}

// before appends to group the steps that go before the user's message: a
// new instance's conversation, or the answers to the calls its client
// never answered.
func (r *runner) before(group []flow.Event) []flow.Event {
	r.steps = slices.Grow(r.steps, len(r.t.Prior)+1)
	for i := range r.t.Prior {
		p := &r.t.Prior[i]
		s := flow.Step{AgentID: p.AgentID, Role: p.Role, Response: p.Response}
		if s.AgentID == "" {
			s.AgentID = p.Role
		}
		group = append(group, flow.Event{Name: flow.EventCompleteStep, Data: r.stamp(&s)})
	}
	if len(r.steps) > 0 {
		// Calls the client never answered are answered before the new message.
		if s, ok := r.notRun(r.steps[max(0, lastUserStep(r.steps)):], "the user sent a new message"); ok {
			group = append(group, flow.Event{Name: flow.EventCompleteStep, Data: r.stamp(&s)})
		}
	}
	return group
}

// lastUserStep is the index of the last user step, where the last turn
// begins; -1 when there is none.
func lastUserStep(steps []*flow.Step) int {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Role == flow.RoleUser {
			return i
		}
	}
	return -1
}

// resume finds where an interrupted run was from its log: the steps of its
// turn give the iterations spent; the caller goes on from the last. Held
// steps are part of the turn: their judge runs again before anything of
// them goes out.
func (r *runner) resume() error {
	r.turn = lastUserStep(r.steps)
	if r.turn < 0 {
		return fmt.Errorf("resume: the log has no user step: %w", flow.ErrInvalid)
	}
	r.t.Input = r.steps[r.turn].Response // the message the turn is about, which its nodes are given
	for i := r.turn + 1; i < len(r.steps); i++ {
		s := r.steps[i]
		if s.Withheld != "" { // this turn's own drafts: its next nodes see them
			draft := *s
			draft.Response, draft.ToolUsage = s.WithheldResponse, s.WithheldToolUsage
			s, r.steps[i] = &draft, &draft
		}
		if s.Response != "" && s.Withheld == "" {
			r.response = s.Response
		}
	}
	for _, ev := range r.t.Held {
		r.held = append(r.held, ev) // durable already
		r.t.Unfinished.See(ev)
		if s, ok := ev.Data.(*flow.Step); ok {
			r.steps = append(r.steps, s)
		}
	}
	for _, s := range r.steps[r.turn+1:] {
		if s.Judged != nil {
			continue // judgements count toward no limit (docs/actions.md)
		}
		if s.AgentID == flow.Reviewer && s.Role == flow.RoleSystem {
			// A human's answer to a review starts a run, with iterations
			// of its own, as a review run that did not stop does.
			clear(r.iters)
			r.nsteps = 0
			continue
		}
		if s.Role == flow.RoleSystem {
			continue
		}
		r.iters[s.Node]++
		r.nsteps++
		if r.replay != nil {
			r.replay.walked(*s)
		}
	}
	return nil
}

// stopped is the outcome of a run whose context ended: cancelled, or, when
// the engine is shutting down, interrupted, to resume at the next start.
func (r *runner) stopped(ctx context.Context) Outcome {
	if errors.Is(context.Cause(ctx), flow.ErrClosed) {
		return Outcome{Status: statusInterrupted}
	}
	return Outcome{Status: flow.StatusCancelled}
}

// statusInterrupted is a run stopped by shutdown. It is never recorded: its
// log ends without done, which is how the next start finds it.
const statusInterrupted = "interrupted"

// onError is the step of a superego whose model failed, deciding as its
// on_error says: "allow" takes ACCEPT, "block" BLOCK.
func onError(node *flow.Node, err error, s *flow.Step) {
	d := map[string]string{"allow": flow.Accept, "block": flow.Block}[node.OnError]
	*s = flow.Step{AgentID: node.AgentID, Node: node.Name, Role: flow.RoleAssistant, Constitution: node.Constitution, Decision: d,
		Fallback: fmt.Sprintf("the model failed (%v); on_error %q decided %s", err, node.OnError, d)}
	if target, _ := node.Target(d); target != "" {
		s.NextAgent = &target
	}
}

// answer appends the step of the person's answer to the review the run
// was started for, unless the log has it (a run resumed after it was
// written): held where the turn it answers is held, as a review of a tool
// call leaves it. The answer starts the run's iterations afresh.
func (r *runner) answer() error {
	rv := r.t.Options.Review
	for _, s := range r.steps[r.turn+1:] {
		if s.AgentID == flow.Reviewer && s.ReviewID == rv.ReviewID {
			return nil
		}
	}
	step := r.review(rv)
	clear(r.iters)
	r.nsteps = 0
	ev := flow.Event{Name: flow.EventCompleteStep, Data: r.stamp(&step)}
	if len(r.held) > 0 {
		return r.hold(ev)
	}
	return r.emit(ev)
}

// review is the step of a person's answer to a review. An approved tool
// call runs at its agent's next iteration, a rejected one is refused there
// (docs/actions.md). A HUMAN_REVIEW goes on along the supervisor's ACCEPT
// transition when it was approved, its BLOCK one when not, and the run
// ends where that leads nowhere. Changes a supervisor proposed apply when
// they are approved and are dropped when not (package supervision reads
// the answer); either way the run goes on as the supervisor decided.
func (r *runner) review(rv *flow.Review) flow.Step {
	d, verdict := flow.Accept, flow.Approved
	if !rv.Approve {
		d, verdict = flow.Block, flow.Rejected
	}
	for _, w := range awaitingCalls(r.steps[r.turn+1:]) {
		if w.use.ID == rv.ReviewID {
			return flow.Step{AgentID: flow.Reviewer, Node: w.node, Role: flow.RoleSystem, Decision: verdict, Response: rv.Note, ReviewID: rv.ReviewID, NextAgent: &w.node}
		}
	}
	last := r.steps[len(r.steps)-1]
	node := r.t.Def.Graph.Nodes[last.Node]
	step := flow.Step{AgentID: flow.Reviewer, Node: last.Node, Role: flow.RoleSystem, Input: last.Input, Decision: verdict, Response: rv.Note, ReviewID: rv.ReviewID}
	switch {
	case last.Decision != flow.HumanReview: // proposed changes
		step.NextAgent = last.NextAgent
	case node != nil:
		if target, _ := node.Target(d); target != "" {
			step.NextAgent = &target
		}
	}
	return step
}

// ending reports whether a run ends after step, the log's last, and how,
// as ending does; a run whose turn holds changes proposed for review waits
// for it, and once they are reviewed ends as their supervisor decided.
func (r *runner) ending(step *flow.Step, node *flow.Node) (status string, end bool) {
	if len(awaitingCalls(r.steps[r.turn+1:])) > 0 {
		return flow.StatusAwaitingReview, true
	}
	for _, w := range waitingResults(r.steps[r.turn+1:]) {
		if r.replay != nil && !r.replay.diverged {
			break // the record goes on with the client's results
		}
		if !slices.ContainsFunc(r.t.Options.Results, func(c flow.ClientResult) bool { return c.ToolCallID == w.use.ID }) {
			return flow.StatusAwaitingToolResult, true
		}
	}
	if step.AgentID == flow.Reviewer && step.Judged == nil && step.NextAgent != nil && r.t.Def.Graph.Nodes[step.Node] != nil && r.t.Def.Graph.Nodes[step.Node].Type == flow.InnerAgent {
		return "", false // an answer about a tool call: its agent goes on
	}
	if step.Decision != flow.NeedsTool && awaitsReview(r.steps[r.turn+1:]) {
		return flow.StatusAwaitingReview, true
	}
	if n := len(r.steps); step.AgentID == flow.Reviewer && n > 1 && r.steps[n-2].Decision != flow.HumanReview {
		return ending(r.steps[n-2], node)
	}
	return ending(step, node)
}

// ending reports whether a run ends after step, and how.
func ending(step *flow.Step, node *flow.Node) (status string, end bool) {
	switch {
	case step.Judged != nil && step.NextAgent != nil:
		return "", false // a judgement of a call: the agent goes on
	case step.Judged != nil:
		return flow.StatusBlocked, true // a judge whose BLOCK leads nowhere
	case step.Decision == flow.NeedsClarification:
		return flow.StatusAwaitingInput, true
	case step.Decision == flow.HumanReview:
		return flow.StatusAwaitingReview, true
	case step.Decision == flow.Rejected && step.Role == flow.RoleSystem && step.NextAgent == nil:
		return flow.StatusBlocked, true // a human rejected what a supervisor sent for review
	case step.NextAgent == nil && step.Decision == flow.Block && node != nil && node.Type == flow.Superego:
		return flow.StatusBlocked, true
	case step.NextAgent == nil:
		return flow.StatusCompleted, true
	}
	return "", false
}

// stamp numbers a step and timestamps it, and appends it to the log: s
// becomes the log's record, which its events share, and from here is read,
// never changed. It returns s.
func (r *runner) stamp(s *flow.Step) *flow.Step {
	s.StepID = strconv.Itoa(len(r.steps) + 1)
	s.Timestamp = r.now().UTC()
	r.steps = append(r.steps, s)
	return s
}

// appendStep records node's step, numbered and timestamped: s becomes the
// log's record (stamp). An inner agent's step that a superego will judge
// is held, and released at once if its transition leads where no superego
// judges it; a superego's decision settles what was held (docs/gating.md).
func (r *runner) appendStep(s *flow.Step, node *flow.Node) error {
	if node != nil && node.Type == flow.Superego && s.Decision != flow.NeedsTool {
		s.Chunks = r.chunks[node.Name]
		delete(r.chunks, node.Name)
	}
	p := r.stamp(s)
	r.x.Observe.stepped(r.t.FlowID, node, s.Decision, s.Basis)
	ev := flow.Event{Name: flow.EventCompleteStep, Data: p}
	switch {
	case node != nil && node.Judged():
		if err := r.hold(ev); err != nil {
			return err
		}
		if !r.t.Def.Graph.Holds(s.NextAgent) {
			return r.settle("", true)
		}
		return nil
	case len(r.held) > 0 && node != nil && node.Type == flow.Superego && s.Decision != flow.NeedsTool:
		release := !node.Withholds(s.Decision)
		if !release {
			out := *s      // a record of its own: the log keeps the input
			out.Input = "" // the draft it judged, which the user may not see
			ev.Data = &out
		}
		return r.settle(node.Name, release, ev)
	case len(r.held) > 0 && node != nil && node.Type == flow.Superego:
		// A judge's tool round is part of what it judges: its input is
		// the draft, and its tools may have been given some of it.
		return r.hold(ev)
	}
	return r.emit(ev)
}

// judgeOf is the superego that judges what node does: node itself, or the
// nearest superego its transitions lead to through inner agents.
func (r *runner) judgeOf(node string) string {
	g := r.t.Def.Graph.Nodes
	seen := map[string]bool{}
	for queue := []string{node}; len(queue) > 0; queue = queue[1:] {
		n := g[queue[0]]
		if n == nil || seen[n.Name] {
			continue
		}
		if seen[n.Name] = true; n.Type == flow.Superego {
			return n.Name
		}
		for _, d := range slices.Sorted(maps.Keys(n.Transitions)) {
			next, _ := n.Target(d)
			queue = append(queue, next)
		}
	}
	return node
}

// act runs one iteration of node: its node_start, the agent's call with
// what it emits, held where a superego will judge it, and its step, into
// step. The step is node's, or, where a judge of node's actions ended the
// run, the judge's, and by says whose. What comes before the agent's call
// and after it is in functions of their own, so that it takes no room on
// the stack while a run waits on its model.
func (r *runner) act(ctx context.Context, node *flow.Node, step *flow.Step) (by *flow.Node, err error) {
	task, err := r.started(node)
	if err != nil {
		return node, err
	}
	ctx = r.nodeStarted(ctx, node, task.StepID, false)
	defer func() { r.nodeEnded(ctx, node, task.StepID, false, step.Decision, err) }()
	if v := r.verdicts[node.Name]; v != nil { // its judgement of a chunk stands
		delete(r.verdicts, node.Name)
		return node, r.stepOf(node, task, v, nil, step)
	}
	a := r.acting(ctx, node, task, step)
	return a.acted(r.x.Agent.Act(a.ctx, task, a.out))
}

// started sends node's node_start and gathers its task.
func (r *runner) started(node *flow.Node) (*Task, error) {
	if err := r.emit(flow.Event{Name: flow.EventNodeStart, Data: flow.NodeStart{Node: node.Name, AgentID: node.AgentID}}); err != nil {
		return nil, err
	}
	task := r.task(r.steps, r.held, node)
	if node.Type == flow.InnerAgent {
		turn := r.steps[r.turn+1:]
		task.Approved = append(reviewed(turn, node.Name), answered(turn, node.Name, r.t.Options.Results)...)
	}
	return task, nil
}

// acting is an iteration of a node while its agent acts: where what the
// agent emits goes, and what it leaves for the step.
type acting struct {
	r    *runner
	node *flow.Node
	task *Task
	step *flow.Step       // where the step goes
	ctx  context.Context  // the agent's call's
	out  func(flow.Event) // what the agent emits
	// holding: what the agent emits is held (a judge's tool calls may
	// quote the draft). judging: judgements of the reply's calls are
	// steps before the node's own, and its partials wait for them, to
	// carry the step id they lead to.
	holding, judging bool
	partials         []flow.Event
	failed           error // the first event that could not be sent
	calls            *Calls
	chunker          *chunker
}

func (r *runner) acting(ctx context.Context, node *flow.Node, task *Task, step *flow.Step) *acting {
	a := &acting{r: r, node: node, task: task, step: step, ctx: ctx, holding: node.Judged() || node.Type == flow.Superego && len(r.held) > 0,
		judging: node.ToolJudge != "" || node.ResultJudge != ""}
	a.out = func(e flow.Event) { // not a method value: its wrapper's frame would be on the way of every event
		if a.judging && e.Name == flow.EventPartial {
			a.partials = append(a.partials, e)
			return
		}
		if err := a.send(e); a.failed == nil {
			a.failed = err
		}
	}
	if judge, _ := node.StreamJudge(); judge != "" {
		a.chunker = r.newChunker(ctx, node, task)
		a.ctx, a.out = a.chunker.ctx, a.chunker.wrap(a.out)
	}
	a.calls = r.calls(ctx, node, task, r.steps, a.out, r.recorder(a.send))
	task.Calls = a.calls
	return a
}

func (a *acting) send(e flow.Event) error {
	if a.holding {
		return a.r.hold(e)
	}
	return a.r.emit(e)
}

// acted makes the step from the agent's reply and err.
func (a *acting) acted(reply Reply, err error) (by *flow.Node, _ error) {
	r, node, c, step := a.r, a.node, a.chunker, a.step
	lost := a.calls.spent()
	r.usage.PromptTokens += lost.PromptTokens
	r.usage.CompletionTokens += lost.CompletionTokens
	if a.calls.ended != nil {
		*step = *a.calls.ended
		return r.t.Def.Graph.Nodes[a.calls.ended.Node], nil
	}
	if c != nil {
		reply, err = c.finish(reply, err)
	}
	if err == nil {
		err = a.failed
	}
	err = r.stepOf(node, a.task, &reply, err, step)
	if err != nil && reply.Usage != nil { // a call that made no step: its tokens were spent all the same
		r.usage.PromptTokens += reply.Usage.PromptTokens
		r.usage.CompletionTokens += reply.Usage.CompletionTokens
	}
	if c != nil && c.withholding && err == nil {
		step.Fallback = fmt.Sprintf("the call was stopped: %s decided %s on the draft after its first %d characters", c.judge.Name, c.withheld.Decision, c.released)
	}
	if err == nil {
		id := strconv.Itoa(len(r.steps) + 1)
		for _, e := range a.partials {
			p := e.Data.(flow.Partial)
			p.StepID = id
			e.Data = p
			if err = a.send(e); err != nil {
				break
			}
		}
	}
	return node, err
}

// recorder records a judgement's step: numbered, observed, and sent.
func (r *runner) recorder(send func(flow.Event) error) func(flow.Step) (flow.Step, error) {
	return func(s flow.Step) (flow.Step, error) {
		p := r.stamp(&s)
		r.x.Observe.stepped(r.t.FlowID, r.t.Def.Graph.Nodes[s.Node], s.Decision, s.Basis)
		return s, send(flow.Event{Name: flow.EventCompleteStep, Data: p})
	}
}

// calls makes the Calls that decide, record and run the tool calls of one
// iteration of node (docs/actions.md); out takes its events, record its
// judgements' steps.
func (r *runner) calls(ctx context.Context, node *flow.Node, task *Task, steps []*flow.Step, out func(flow.Event), record func(flow.Step) (flow.Step, error)) *Calls {
	g := r.t.Def.Graph.Nodes
	c := &Calls{node: node, task: task, flowID: r.t.FlowID, ctx: ctx, out: out, record: record, sync: r.sink.Sync, obs: r.x.Observe, stack: r.stack,
		act: func(ctx context.Context, t *Task) (Reply, error) { return r.x.Agent.Act(ctx, t, func(flow.Event) {}) }}
	if node.Type != flow.InnerAgent {
		return c
	}
	c.toolJudge, c.resultJudge = g[node.ToolJudge], g[node.ResultJudge]
	if c.toolJudge != nil || c.resultJudge != nil {
		c.earlier = earlierCalls(task.History, steps[r.turn:])
	}
	return c
}

// maxEarlier bounds the earlier calls a judge is shown.
const maxEarlier = 20

// earlierCalls are the instance's judged calls before this one, with their
// results as the agent saw them: a judge weighs a call in the light of
// what the agent did and read before.
func earlierCalls(history, turn []*flow.Step) []flow.ToolUse {
	var out []flow.ToolUse
	for _, steps := range [][]*flow.Step{history, turn} {
		for _, s := range steps {
			if s.Withheld != "" {
				continue
			}
			for _, u := range s.ToolUsage {
				if (u.JudgedBy != nil || u.ResultJudgedBy != nil) && !u.Awaiting {
					u.WithheldOutput = ""
					out = append(out, u)
				}
			}
		}
	}
	return out[max(0, len(out)-maxEarlier):]
}

// stepOf makes node's step, into s, from its agent's reply; where it
// fails, s is the zero Step.
func (r *runner) stepOf(node *flow.Node, task *Task, reply *Reply, err error, s *flow.Step) error {
	if err != nil {
		*s = flow.Step{}
		return redact(fmt.Errorf("node %s: %w", node.Name, err), task.Hidden()...)
	}
	*s = flow.Step{
		AgentID:       node.AgentID,
		Node:          node.Name,
		Role:          flow.RoleAssistant,
		Input:         task.Input,
		ToolUsage:     reply.ToolUsage,
		Response:      reply.Response,
		Thinking:      reply.Thinking,
		AgentGuidance: reply.AgentGuidance,
		Model:         reply.Model,
		ServedModel:   reply.ServedModel,
		Parameters:    reply.Parameters,
		Usage:         reply.Usage,
		LatencyMS:     flow.Millis(reply.Latency),
		Cached:        reply.Cached,
		Shared:        reply.Shared,
	}
	if node.Type == flow.Superego {
		s.Constitution = node.Constitution
		s.Stack, s.Basis = stackEntries(task.Stack), basisOf(reply.Basis, task.Stack)
	} else {
		s.SystemPrompt = node.SystemPrompt
	}
	if task.fromWithheld {
		s.Input = "" // a draft the user was not shown
	}
	target, err := decide(node, task.Decisions, reply, s)
	if err != nil {
		*s = flow.Step{}
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	if target != "" {
		s.NextAgent = &target
	}
	return nil
}

// runUsage adds up the tokens of this run's steps and of the calls that
// made none. It is never nil: done always carries usage, zeros included
// (a model that reports no tokens, as the offline one), so that a script
// reading done.usage never finds it missing.
func (r *runner) runUsage() *flow.RunUsage {
	u := r.usage
	for _, s := range r.steps[min(r.turn+1, len(r.steps)):] {
		if s.Usage != nil {
			u.PromptTokens += s.Usage.PromptTokens
			u.CompletionTokens += s.Usage.CompletionTokens
		}
	}
	return &u
}

// decide sets the step's decision (and fallback, where the reply had no
// valid one) and returns the next node, "" for the end.
func decide(node *flow.Node, allowed []string, reply *Reply, s *flow.Step) (string, error) {
	if len(reply.ToolUsage) > 0 && !reply.Final {
		s.Decision = flow.NeedsTool
		if target, ok := node.Target(flow.NeedsTool); ok {
			return target, nil
		}
		return node.Name, nil
	}
	var target string
	var err error
	s.Decision, s.Fallback, target, err = node.Decide(reply.Decision, allowed)
	return target, err
}
