package flow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Agent runs one node once: one model call, and the tools the model asks for.
// It may emit partial_output, tool_call and tool_result events as they happen.
type Agent interface {
	Act(ctx context.Context, t *Task, emit func(Event)) (Reply, error)
}

// Task is everything a node's agent is given for one iteration.
type Task struct {
	FlowID     string
	InstanceID string
	Node       *Node
	StepID     string // of the step this iteration will append

	History      []Step // earlier turns, hidden fields removed
	UserMessage  string // the message that opened this turn
	Input        string // the message this node works on
	InputFrom    string // agent id that produced Input; "" for the user
	Guidance     string // agent_guidance of the step before this node's turn
	GuidanceFrom string
	ToolRounds   []Step   // this node's NEEDS_TOOL steps just before, oldest first
	Decisions    []string // what the model may decide
	Context      string   // the instance's active rules and references, rendered; for inner agents

	// For a supervisor (a node with allowed_actions): the instance's
	// visible steps, this turn's included, and its rules and references.
	Supervision *Supervision
}

// Supervision is what a supervisor's tools work on.
type Supervision struct {
	Steps   []Step
	Context []ContextItem
}

// Reply is what an agent's model answered.
type Reply struct {
	Thinking      string
	Decision      string
	AgentGuidance string
	Response      string
	ToolUsage     []ToolUse
	// Final says the tool calls ended the node's turn, and Decision
	// stands: a worker that has written its output is done.
	Final   bool
	Model   string
	Usage   *Usage
	Latency time.Duration
}

// Executor runs turns of flow instances. Its zero value needs an Agent.
type Executor struct {
	Agent Agent
	Now   func() time.Time // default time.Now
	// Context is rules and references every instance of every flow starts
	// with, before its flow's own.
	Context []ContextItem
}

// Turn is one run of an instance: the input that starts it and the log it
// continues.
type Turn struct {
	FlowID     string
	Def        *Definition
	InstanceID string
	RunID      string
	Steps      []Step // the instance's log before this run
	Input      string
	Resume     bool    // continue the interrupted run the log ends with; Input is unused
	Review     *Review // answer the human review the log ends with; Input is unused
}

// Review is a human's answer to a supervisor's HUMAN_REVIEW.
type Review struct {
	Approve bool
	Note    string
}

// Outcome is how a run ended.
type Outcome struct {
	Status   string
	Response string
	Err      error // for StatusFailed
}

// Run executes one turn and reports it through emit, which receives every
// event in order: run_start, the user's complete_step, then per node
// node_start, partials and tool events, complete_step, and last done. An
// error from emit fails the run: a step that cannot be recorded must not be
// acted on. A run stopped by the engine's shutdown ends without done, so
// that it resumes at the next start.
func (x *Executor) Run(ctx context.Context, t Turn, emit func(Event) error) Outcome {
	now := x.Now
	if now == nil {
		now = time.Now
	}
	// Room for a typical turn's steps, so appending rarely copies the log.
	steps := append(make([]Step, 0, len(t.Steps)+6), t.Steps...)
	r := &runner{x: x, t: t, now: now, emit: emit, steps: steps, iters: map[string]int{}}
	r.contextual = len(x.Context) > 0 || len(t.Def.Context) > 0 || t.Def.supervised()
	out := r.run(ctx)
	if out.Status == statusInterrupted {
		return out
	}
	if out.Status == StatusFailed {
		r.send(EventError, ErrorData{ErrorCode(out.Err), out.Err.Error()})
	}
	if err := r.send(EventDone, Done{t.InstanceID, out.Status, out.Response}); err != nil && out.Err == nil {
		out = Outcome{Status: StatusFailed, Err: err}
	}
	return out
}

type runner struct {
	x     *Executor
	t     Turn
	now   func() time.Time
	emit  func(Event) error
	steps []Step
	iters map[string]int
	turn  int // index in steps of this turn's user step
	// contextual: the flow has rules, references or supervisors, so tasks
	// carry the instance's context.
	contextual bool
}

func (r *runner) send(name string, data any) error {
	return r.emit(Event{Name: name, Data: data})
}

func (r *runner) run(ctx context.Context) Outcome {
	g := &r.t.Def.Graph
	if err := r.send(EventRunStart, RunStart{r.t.InstanceID, r.t.RunID, r.t.FlowID, r.t.Resume}); err != nil {
		return Outcome{Status: StatusFailed, Err: err}
	}
	var cur, response string
	nsteps := 0
	if r.t.Resume {
		// The log says where the run was: the steps of its turn give the
		// iterations spent, the last step the node that runs next.
		r.turn = -1
		for i, s := range r.steps {
			if s.Role == RoleUser {
				r.turn = i
			}
		}
		if r.turn < 0 {
			return Outcome{Status: StatusFailed, Err: fmt.Errorf("resume: the log has no user step: %w", ErrInvalid)}
		}
		for _, s := range r.steps[r.turn+1:] {
			r.iters[s.Node]++
			nsteps++
			if s.Response != "" {
				response = s.Response
			}
		}
		last := r.steps[len(r.steps)-1]
		if status, end := ending(last, g.Nodes[last.Node]); end {
			return Outcome{Status: status, Response: response} // it had ended; only done was missing
		}
		cur = *last.NextAgent
	} else if r.t.Review != nil {
		next, status, err := r.review()
		if err != nil {
			return Outcome{Status: StatusFailed, Err: err}
		}
		if next == "" {
			return Outcome{Status: status, Response: r.t.Review.Note}
		}
		cur = next
	} else {
		cur = g.Start
		if n := len(r.steps); n > 0 {
			if last := r.steps[n-1]; last.Decision == NeedsClarification && last.NextAgent != nil {
				cur = *last.NextAgent
			}
		}
		r.turn = len(r.steps)
		first := cur
		user := Step{AgentID: "user", Role: RoleUser, Response: r.t.Input, NextAgent: &first}
		if err := r.appendStep(user); err != nil {
			return Outcome{Status: StatusFailed, Err: err}
		}
	}
	for hops := 0; ; {
		if ctx.Err() != nil {
			return r.stopped(ctx, response)
		}
		node := g.Nodes[cur]
		if node == nil {
			return Outcome{Status: StatusFailed, Response: response,
				Err: fmt.Errorf("node %q is not in flow %q any more; the run cannot go on: %w", cur, r.t.FlowID, ErrInvalid)}
		}
		if r.iters[cur] >= node.Iterations() {
			// MAX_ITERATIONS chains can cycle between exhausted nodes
			// without a step; hops bounds them.
			target, ok := node.Target(MaxIterations)
			if hops++; !ok || target == "" || hops > len(g.Nodes) {
				return Outcome{Status: StatusIterationLimit, Response: response}
			}
			cur = target
			continue
		}
		if nsteps >= g.Limit() {
			return Outcome{Status: StatusIterationLimit, Response: response}
		}
		nsteps, hops = nsteps+1, 0
		r.iters[cur]++

		step, err := r.act(ctx, node)
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			return r.stopped(ctx, response)
		}
		if err != nil && node.OnError != "" {
			step, err = onError(node, err), nil
		}
		if err != nil {
			return Outcome{Status: StatusFailed, Response: response, Err: err}
		}
		if step.Response != "" {
			response = step.Response
		}
		if err := r.appendStep(step); err != nil {
			return Outcome{Status: StatusFailed, Response: response, Err: err}
		}
		if status, end := ending(step, node); end {
			return Outcome{Status: status, Response: response}
		}
		cur = *step.NextAgent
	}
}

// stopped is the outcome of a run whose context ended: cancelled, or, when
// the engine is shutting down, interrupted, to resume at the next start.
func (r *runner) stopped(ctx context.Context, response string) Outcome {
	if errors.Is(context.Cause(ctx), ErrClosed) {
		return Outcome{Status: statusInterrupted, Response: response}
	}
	return Outcome{Status: StatusCancelled, Response: response}
}

// statusInterrupted is a run stopped by shutdown. It is never recorded: its
// log ends without done, which is how the next start finds it.
const statusInterrupted = "interrupted"

// onError is the step of a superego whose model failed, deciding as its
// on_error says: "allow" takes ACCEPT, "block" BLOCK.
func onError(node *Node, err error) Step {
	d := map[string]string{"allow": Accept, "block": Block}[node.OnError]
	s := Step{AgentID: node.AgentID, Node: node.Name, Role: RoleAssistant, Constitution: node.Constitution, Decision: d,
		Fallback: fmt.Sprintf("the model failed (%v); on_error %q decided %s", err, node.OnError, d)}
	if target, _ := node.Target(d); target != "" {
		s.NextAgent = &target
	}
	return s
}

// review appends the human's answer to the HUMAN_REVIEW the log ends with,
// and says where the run goes: the supervisor's ACCEPT transition when it
// was approved, its BLOCK one when not; "" and the status when it ends.
func (r *runner) review() (next, status string, err error) {
	for i, s := range r.steps {
		if s.Role == RoleUser {
			r.turn = i
		}
	}
	r.t.Input = r.steps[r.turn].Response // the message the turn is about
	last := r.steps[len(r.steps)-1]
	node := r.t.Def.Graph.Nodes[last.Node]
	d, verdict, status := Accept, "APPROVED", StatusCompleted
	if !r.t.Review.Approve {
		d, verdict, status = Block, "REJECTED", StatusBlocked
	}
	step := Step{AgentID: "human_review", Node: last.Node, Role: RoleSystem, Input: last.Input, Decision: verdict, Response: r.t.Review.Note}
	target := ""
	if node != nil {
		target, _ = node.Target(d)
	}
	if target != "" {
		step.NextAgent = &target
	}
	return target, status, r.appendStep(step)
}

// ending reports whether a run ends after step, and how.
func ending(step Step, node *Node) (status string, end bool) {
	switch {
	case step.Decision == NeedsClarification:
		return StatusAwaitingInput, true
	case step.Decision == HumanReview:
		return StatusAwaitingReview, true
	case step.Decision == "REJECTED" && step.Role == RoleSystem && step.NextAgent == nil:
		return StatusBlocked, true // a human rejected what a supervisor sent for review
	case step.NextAgent == nil && step.Decision == Block && node != nil && node.Type == Superego:
		return StatusBlocked, true
	case step.NextAgent == nil:
		return StatusCompleted, true
	}
	return "", false
}

// appendStep numbers a step, stamps it, and emits it.
func (r *runner) appendStep(s Step) error {
	s.StepID = strconv.Itoa(len(r.steps) + 1)
	s.Timestamp = r.now().UTC()
	r.steps = append(r.steps, s)
	return r.send(EventCompleteStep, s)
}

// act runs one iteration of node and makes its step.
func (r *runner) act(ctx context.Context, node *Node) (Step, error) {
	if err := r.send(EventNodeStart, NodeStart{node.Name, node.AgentID}); err != nil {
		return Step{}, err
	}
	task := r.task(node)
	reply, err := r.x.Agent.Act(ctx, task, func(e Event) { _ = r.emit(e) })
	if err != nil {
		return Step{}, redact(fmt.Errorf("node %s: %w", node.Name, err), task.Guidance)
	}
	s := Step{
		AgentID:       node.AgentID,
		Node:          node.Name,
		Role:          RoleAssistant,
		Input:         task.Input,
		ToolUsage:     reply.ToolUsage,
		Response:      reply.Response,
		Thinking:      reply.Thinking,
		AgentGuidance: reply.AgentGuidance,
		Model:         reply.Model,
		Usage:         reply.Usage,
		LatencyMS:     reply.Latency.Milliseconds(),
	}
	if node.Type == Superego {
		s.Constitution = node.Constitution
	} else {
		s.SystemPrompt = node.SystemPrompt
	}
	target, err := decide(node, task.Decisions, reply, &s)
	if err != nil {
		return Step{}, fmt.Errorf("node %s: %w", node.Name, err)
	}
	if target != "" {
		s.NextAgent = &target
	}
	return s, nil
}

// decide sets the step's decision (and fallback, where the reply had no
// valid one) and returns the next node, "" for the end.
func decide(node *Node, allowed []string, reply Reply, s *Step) (string, error) {
	if len(reply.ToolUsage) > 0 && !reply.Final {
		s.Decision = NeedsTool
		if target, ok := node.Target(NeedsTool); ok {
			return target, nil
		}
		return node.Name, nil
	}
	d := strings.ToUpper(strings.TrimSpace(reply.Decision))
	for _, a := range allowed {
		if d == a {
			s.Decision = d
			target, _ := node.Target(d)
			return target, nil
		}
	}
	if star, ok := node.Transitions[AnyDecision]; ok && decisionRe.MatchString(d) {
		s.Decision = d
		return node.resolve(star), nil
	}
	fallback := Complete
	if node.Type == Superego {
		fallback = Caution
	}
	why := "the reply had no decision"
	if d != "" {
		why = fmt.Sprintf("%q is not one of %s", truncate(d, 40), strings.Join(allowed, ", "))
	}
	s.Decision = fallback
	if star, ok := node.Transitions[AnyDecision]; ok {
		s.Fallback = why + `; followed "*"`
		return node.resolve(star), nil
	}
	s.Fallback = why + "; used " + fallback
	target, ok := node.Target(fallback)
	if !ok {
		return "", fmt.Errorf("%w: %s, and the node has no %s or \"*\" transition to fall back on", ErrModelOutput, why, fallback)
	}
	return target, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// task gathers what node's agent needs from the log.
func (r *runner) task(node *Node) *Task {
	t := &Task{
		FlowID:      r.t.FlowID,
		InstanceID:  r.t.InstanceID,
		Node:        node,
		StepID:      strconv.Itoa(len(r.steps) + 1),
		UserMessage: r.t.Input,
		Input:       r.t.Input,
		Decisions:   node.Decisions(),
	}
	for _, s := range r.steps[:r.turn] {
		s.Thinking, s.AgentGuidance = "", ""
		t.History = append(t.History, s)
	}
	this := r.steps[r.turn+1:]
	i := len(this)
	for i > 0 && this[i-1].Node == node.Name && this[i-1].Decision == NeedsTool {
		i--
	}
	t.ToolRounds = this[i:]
	if r.contextual {
		items := InstanceContext(append(slices.Clone(r.x.Context), r.t.Def.Context...), r.steps)
		if node.Type == InnerAgent {
			t.Context = RenderContext(items)
		}
		if len(node.AllowedActions) > 0 {
			visible := make([]Step, len(r.steps))
			for i, s := range r.steps {
				s.Thinking, s.AgentGuidance = "", ""
				visible[i] = s
			}
			t.Supervision = &Supervision{Steps: visible, Context: items}
		}
	}
	if i > 0 {
		t.Guidance, t.GuidanceFrom = this[i-1].AgentGuidance, this[i-1].AgentID
	}
	for j := len(this) - 1; j >= 0; j-- {
		s := this[j]
		if s.Response != "" && s.Decision == Modify {
			t.Input = s.Response // the user's message, as a supervisor rewrote it
			break
		}
		if s.Response != "" && r.t.Def.Graph.Nodes[s.Node].Type == InnerAgent {
			t.Input, t.InputFrom = s.Response, s.AgentID
			break
		}
	}
	return t
}

// redacted is an error whose message had hidden text taken out.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// redact takes hidden text out of an error's message: a provider's error
// may quote the request, and the request holds the previous node's
// agent_guidance.
func redact(err error, hidden string) error {
	if hidden == "" || !strings.Contains(err.Error(), hidden) {
		return err
	}
	return &redacted{strings.ReplaceAll(err.Error(), hidden, "[hidden]"), err}
}
