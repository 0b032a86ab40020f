package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"superego/flow"
)

// Messages a model gets as a call's result where the call did not run as
// asked, or its result was not handed over.
const (
	Interrupted = "interrupted: this call may or may not have taken effect"
)

// ToolInfo is what the executor must know of a tool to decide a call to
// it. The zero value is the careful one: a tool changes things and
// reaches outside the machine unless it says otherwise.
type ToolInfo struct {
	Description string
	ReadOnly    bool
	ClosedWorld bool
	// Client: a client's own tool (docs/gateway.md), which the client runs. An
	// accepted call goes to it; its result comes back in a later run.
	Client bool
	// Parameters is the JSON schema of the tool's arguments, which a call's
	// arguments must meet to run (nil: any JSON object).
	Parameters map[string]any
}

// judgedFirst reports whether a call to the tool goes to a call judge:
// every tool but those that are read-only and closed-world.
func (i ToolInfo) judgedFirst() bool { return !i.ReadOnly || !i.ClosedWorld }

// Result is what running a call gave: the text the model gets, or the
// error it gets instead.
type Result struct {
	Output string
	Error  string
	// Proposed: the call is a supervisor's change that waits for a
	// person's review (ToolUse.Proposed).
	Proposed bool
}

// Action is a tool call, or its result, put to a judge (docs/actions.md).
type Action struct {
	Kind        string
	Agent       string       // the agent whose call it is
	Call        flow.ToolUse // for a result, with the result in Output or Error
	Description string       // the tool's, as its server gave it: untrusted
	Others      []flow.ToolUse
	Earlier     []flow.ToolUse // the instance's earlier judged calls, with their results as the agent saw them
}

// Calls decides, records and runs the tool calls of one reply of a node's
// model (docs/actions.md). The agent proposes each call as soon as its arguments
// are whole: the node's permissions decide at once, and a call they do not
// decide goes to the node's tool_judge while the model goes on. Finish
// waits for the verdicts, records each judgement as a step, runs the calls
// that may run, in order, a call that changes things recorded as started
// before it runs, has open-world results judged before the model can read
// them, and returns the calls as the node's step records them.
//
// An agent that is given no Calls makes its own with Ungated.
type Calls struct {
	node   *flow.Node
	task   *Task
	flowID string
	ctx    context.Context  // the iteration's: judgements stop with it
	out    func(flow.Event) // the node's events, emitted or held as its turn is
	// record appends a judgement's step, numbered; sync waits until every
	// event out and record have sent is durable (nil: nothing to wait for).
	record func(flow.Step) (flow.Step, error)
	sync   func() error
	act    func(ctx context.Context, t *Task) (Reply, error)
	obs    *Observer
	stack  []flow.Layer // the run's, for the judges that take it (docs/stacks.md)

	toolJudge, resultJudge *flow.Node
	earlier                []flow.ToolUse

	mu    sync.Mutex
	calls []*call
	lost  flow.Usage // tokens of judgements whose call changed before its verdict
	// forgetting are the judgements of replaced or dropped calls still
	// going: spent waits for them, so that none outlives its iteration
	// and their tokens are counted.
	forgetting sync.WaitGroup
	ended      *flow.Step // a judge's BLOCK that ends the run
}

// call is one proposed call and how it was decided.
type call struct {
	use     flow.ToolUse
	written json.RawMessage // use.Input as the model wrote it, before it was decoded
	info    ToolInfo
	run     Run
	// preset: decided already, by a person's review, or refused because
	// its arguments do not decode
	preset bool

	ruling  flow.Ruling
	decided chan struct{} // closed once the verdict is in
	verdict *verdict      // the judge's, where one judged, until its step is recorded
	judged  bool          // a judge decided it
}

// verdict is a judge's judgement of a call or a result.
type verdict struct {
	judge *flow.Node
	kind  string
	input string // the call or result as it was judged, for the step
	reply Reply
	err   error
	start time.Time
	at    time.Time // when it ended: steps are recorded in that order

	stack []flow.Layer // the stack it was judged under (docs/stacks.md)
}

// Ungated makes Calls that let every call run, with no rule, no judge and
// no record: for nodes that judge rather than act (a superego's own tools,
// a chunk's judge) and for an agent run on its own. emit gets its events.
func Ungated(emit func(flow.Event)) *Calls {
	return &Calls{node: &noNode, task: &noTask, ctx: context.Background(), out: emit}
}

// noNode and noTask are what Ungated's Calls read of a node and a task:
// nothing. Calls only reads them.
var (
	noNode flow.Node
	noTask Task
)

// Run runs an accepted call with input, its arguments as the call's
// record holds them: the one value the rules and the judges read.
type Run func(ctx context.Context, input json.RawMessage) Result

// Propose gives the node's i-th call of the reply, as soon as its
// arguments are whole; use.Input holds them as the model wrote them. The
// same call proposed again changes nothing; a call whose arguments differ
// from those proposed before replaces it. A call whose arguments do not
// decode, or that info's parameters do not accept, never runs: the model
// reads why.
func (c *Calls) Propose(i int, use flow.ToolUse, info ToolInfo, run Run) {
	written := use.Input
	c.mu.Lock()
	same := i < len(c.calls) && c.calls[i] != nil && c.calls[i].use.ToolName == use.ToolName && string(c.calls[i].written) == string(written)
	c.mu.Unlock()
	if same { // a streamed call proposed again once the reply ends: decoded already
		return
	}
	input, args, invalid := flow.DecodeArguments(use.Input, info.Parameters)
	if invalid == nil {
		use.Input = input
	} else if !json.Valid(use.Input) {
		use.Input, _ = json.Marshal(string(use.Input)) // kept as text, so the record stays valid JSON
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.calls) <= i {
		c.calls = append(c.calls, nil)
	}
	if old := c.calls[i]; old != nil {
		if old.use.ToolName == use.ToolName && string(old.use.Input) == string(use.Input) {
			return
		}
		c.forgetting.Go(func() { c.forget(old) })
	}
	k := &call{use: use, written: written, info: info, run: run, decided: make(chan struct{})}
	c.calls[i] = k
	if invalid != nil {
		k.use.Refused, k.use.Output, k.preset = true, "refused: invalid arguments: "+invalid.Error(), true
		close(k.decided)
		return
	}
	if a := c.approved(use.ID); a != nil {
		k.use.JudgedBy, k.use.Refused, k.use.Output, k.preset = a.JudgedBy, a.Refused, a.Output, true
		close(k.decided)
		return
	}
	k.ruling = c.node.Permissions.Decide(use.ToolName, args)
	if k.ruling.Effect != "" {
		c.obs.ruled(c.flowID, k.ruling.Effect)
	}
	if k.ruling.Effect != "" || c.toolJudge == nil || !info.judgedFirst() {
		close(k.decided)
		return
	}
	others := make([]flow.ToolUse, 0, len(c.calls))
	for _, o := range c.calls {
		if o != nil && o != k {
			others = append(others, o.use)
		}
	}
	a := &Action{Kind: flow.KindCall, Agent: c.node.AgentID, Call: use, Description: info.Description, Others: others, Earlier: c.earlier}
	go func() {
		k.verdict = c.judge(c.toolJudge, a)
		close(k.decided)
	}()
}

// approved is the person's answer to a call that waited for review.
func (c *Calls) approved(id string) *flow.ToolUse {
	for i := range c.task.Approved {
		if id != "" && c.task.Approved[i].ID == id {
			return &c.task.Approved[i]
		}
	}
	return nil
}

// forget waits for a replaced call's judgement and counts its tokens.
func (c *Calls) forget(k *call) {
	<-k.decided
	if v := k.verdict; v != nil && v.reply.Usage != nil {
		c.mu.Lock()
		c.lost.PromptTokens += v.reply.Usage.PromptTokens
		c.lost.CompletionTokens += v.reply.Usage.CompletionTokens
		c.mu.Unlock()
	}
}

// spent are the tokens of judgements made for calls the model changed or
// dropped before its reply ended, once those judgements have ended. It is
// read once the agent's call has returned, when no call is proposed.
func (c *Calls) spent() flow.Usage {
	c.forgetting.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// judgeDecisions are what a judge of an action may decide: a result is
// accepted or blocked, as no person is asked about one.
func judgeDecisions(kind string) []string {
	if kind == flow.KindResult {
		return []string{flow.Accept, flow.Block}
	}
	return []string{flow.Accept, flow.Block, flow.HumanReview}
}

// judge asks a judge node about an action. It runs on its own goroutine.
func (c *Calls) judge(judge *flow.Node, a *Action) (v *verdict) {
	v = &verdict{judge: judge, kind: a.Kind, input: a.text(), stack: stackFor(judge, c.stack), start: time.Now()}
	t := c.task.forJudge(judge, c.node, v.stack)
	t.Input, t.Decisions, t.Action = v.input, judgeDecisions(a.Kind), a
	defer func() {
		if p := recover(); p != nil {
			v.err = fmt.Errorf("panic in judge %s: %v", judge.Name, p)
		}
		v.at = time.Now()
	}()
	v.reply, v.err = c.act(c.ctx, t)
	if v.err != nil {
		v.err = redact(v.err, t.Hidden()...)
	}
	return v
}

// text is the action as a judgement step's input records it.
func (a *Action) text() string {
	s := a.Call.ToolName + " " + string(a.Call.Input)
	if a.Kind == flow.KindResult {
		s += "\n→ " + a.Call.ResultText()
	}
	return s
}

// errJudgeEnded stops an agent's turn: a judge whose BLOCK leads nowhere
// refused a call or a result, and the run ends there (Calls.ended).
var errJudgeEnded = errors.New("a judge ended the run")

// Finish decides and runs the reply's first n calls, in order, and returns
// them as the step records them. ctx is the agent's.
func (c *Calls) Finish(ctx context.Context, n int) ([]flow.ToolUse, error) {
	c.mu.Lock()
	calls := slices.Clone(c.calls[:min(n, len(c.calls))])
	for _, k := range c.calls[len(calls):] {
		if k != nil {
			c.forgetting.Go(func() { c.forget(k) })
		}
	}
	c.mu.Unlock()
	for _, k := range calls {
		if k == nil {
			return nil, fmt.Errorf("%w: a tool call was never proposed", flow.ErrModelOutput)
		}
		select {
		case <-k.decided:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Judgements go into the log in the order they were made.
	judged := slices.DeleteFunc(slices.Clone(calls), func(k *call) bool { return k.verdict == nil })
	slices.SortStableFunc(judged, func(a, b *call) int { return a.verdict.at.Compare(b.verdict.at) })
	for _, k := range judged {
		if err := c.settle(k); err != nil {
			return nil, err
		}
	}
	uses := make([]flow.ToolUse, len(calls))
	var results []*call
	sent := 0    // calls that go to the client
	ran := false // a call ran here
	for i, k := range calls {
		c.rule(k)
		k.use.Client = k.info.Client
		if k.info.Client && !k.preset && !k.use.Refused && !k.use.Awaiting {
			if p := c.task.Client; sent > 0 && p != nil && p.Parallel != nil && !*p.Parallel {
				k.use.Refused, k.use.Output = true, "not run: parallel_tool_calls is false, so one call at a time"
			} else {
				k.use.AwaitingResult = true // the client runs it, and answers in its next request
				sent++
				uses[i] = k.use
				continue
			}
		}
		if k.use.Refused || k.use.Awaiting {
			if k.use.Refused {
				c.out(flow.Event{Name: flow.EventToolCall, Data: flow.ToolCall{Node: c.node.Name, ToolName: k.use.ToolName, Input: k.use.Input, ToolCallID: k.use.ID}})
				c.out(resultEvent(c.node.Name, k.use))
			}
			uses[i] = k.use
			continue
		}
		if !k.info.Client { // a client's call ran there, and its result is in
			if k.info.judgedFirst() && c.task.BeforeWrite != nil {
				if err := c.task.BeforeWrite(ctx); err != nil {
					return nil, err // a speculative turn whose judge did not accept: nothing ran
				}
			}
			c.out(flow.Event{Name: flow.EventToolCall, Data: flow.ToolCall{Node: c.node.Name, ToolName: k.use.ToolName, Input: k.use.Input, ToolCallID: k.use.ID}})
			if !k.info.ReadOnly && c.sync != nil {
				// At most once: the call is on record as started before it
				// runs, so that a run resumed after a crash does not run it again.
				if err := c.sync(); err != nil {
					return nil, err
				}
			}
			r, err := runCall(ctx, k)
			if err != nil {
				return nil, err
			}
			ran = true
			k.use.Output, k.use.Error, k.use.Proposed = r.Output, r.Error, r.Proposed
		}
		if c.resultJudge != nil && (!k.info.ClosedWorld || judgesResults(c.node, k.use.ToolName)) {
			k.decided = make(chan struct{})
			a := &Action{Kind: flow.KindResult, Agent: c.node.AgentID, Call: k.use, Description: k.info.Description, Earlier: c.earlier}
			go func() {
				k.verdict = c.judge(c.resultJudge, a)
				close(k.decided)
			}()
			results = append(results, k)
		} else {
			c.out(resultEvent(c.node.Name, k.use))
		}
		uses[i] = k.use
	}
	if len(results) == 0 {
		return uses, c.durable(ran)
	}
	for _, k := range results {
		select {
		case <-k.decided:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	slices.SortStableFunc(results, func(a, b *call) int { return a.verdict.at.Compare(b.verdict.at) })
	for _, k := range results {
		if err := c.settle(k); err != nil {
			return nil, err
		}
		c.out(resultEvent(c.node.Name, k.use))
		uses[slices.Index(calls, k)] = k.use
	}
	return uses, c.durable(ran)
}

// durable waits, where a call ran, until its results are on record before
// the model reads them: a run resumed after a crash goes on with what the
// model read, and not with "interrupted" for a call whose result it had.
func (c *Calls) durable(ran bool) error {
	if !ran || c.sync == nil {
		return nil
	}
	return c.sync()
}

// runCall runs an accepted call. A panic, a bug in the tool, fails the
// run; a tool's error is the model's to read.
func runCall(ctx context.Context, k *call) (r Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s panicked: %v", flow.ErrToolFailed, k.use.ToolName, p)
		}
	}()
	return k.run(ctx, k.use.Input), nil
}

// rule applies what decides a call that no judge took: a person's answer,
// a rule, or the node's default.
func (c *Calls) rule(k *call) {
	if k.preset || k.judged {
		return
	}
	effect, by := k.ruling.Effect, k.ruling.Rule
	if effect == "" {
		effect = flow.EffectAllow
		if p := c.node.Permissions; p != nil && p.Default != "" {
			effect, by = p.Default, "default: "+p.Default
		}
	}
	if by != "" {
		k.use.JudgedBy = &flow.JudgedBy{Rule: by}
	}
	switch effect {
	case flow.EffectDeny:
		k.use.Refused, k.use.Output = true, "refused by rule "+by
	case flow.EffectAsk:
		k.use.Awaiting = true
	}
}

// settle records a judge's verdict on a call or its result as the judge's
// step, and applies it to the call.
func (c *Calls) settle(k *call) error {
	v := k.verdict
	k.verdict, k.judged = nil, true
	s, decision := c.judgement(c.node, k.use, v)
	if decision == flow.Block {
		if target, ok := v.judge.Transitions[flow.Block]; ok && target == nil {
			s.NextAgent = nil
			c.ended = &s
			return errJudgeEnded
		}
	}
	s, err := c.record(s)
	if err != nil {
		return err
	}
	by := &flow.JudgedBy{Node: v.judge.Name, StepID: s.StepID, Decision: decision}
	switch {
	case v.kind == flow.KindResult && decision != flow.Accept:
		k.use.WithheldOutput = k.use.ResultText()
		k.use.Output, k.use.Error = "withheld by "+v.judge.Name+": "+s.Response, ""
		k.use.ResultJudgedBy = by
	case v.kind == flow.KindResult:
		k.use.ResultJudgedBy = by
	case decision == flow.Accept:
		k.use.JudgedBy = by
	case decision == flow.HumanReview:
		k.use.JudgedBy, k.use.Awaiting = by, true
	default:
		k.use.JudgedBy, k.use.Refused, k.use.Output = by, true, "refused by "+v.judge.Name+": "+s.Response
	}
	return nil
}

// judgement is the judge's step of a verdict, and its decision, observed.
func (c *Calls) judgement(agent *flow.Node, use flow.ToolUse, v *verdict) (flow.Step, string) {
	s, decision := judgementStep(agent, use, v)
	c.obs.judged(c.flowID, v.judge.Name, v.kind, decision, v.at.Sub(v.start))
	return s, decision
}

// judgementStep is the judge's step of a verdict, and the decision it
// stands for: a judge whose model failed, or that answered none of its
// decisions, refuses (or, with on_error "allow", accepts), and says why.
func judgementStep(agent *flow.Node, use flow.ToolUse, v *verdict) (flow.Step, string) {
	s := flow.Step{AgentID: v.judge.AgentID, Node: v.judge.Name, Role: flow.RoleAssistant, Input: v.input, Constitution: v.judge.Constitution,
		Judged: &flow.Judged{Node: agent.Name, ToolCallID: use.ID, ToolName: use.ToolName, Kind: v.kind}}
	next := agent.Name
	s.NextAgent = &next
	r := v.reply
	s.Response, s.Thinking, s.AgentGuidance, s.Model, s.Usage, s.LatencyMS, s.Cached = r.Response, r.Thinking, r.AgentGuidance, r.Model, r.Usage, flow.Millis(r.Latency), r.Cached
	s.ServedModel, s.Parameters, s.Shared = r.ServedModel, r.Parameters, r.Shared
	s.Stack, s.Basis = stackEntries(v.stack), basisOf(r.Basis, v.stack)
	allowed := judgeDecisions(v.kind)
	d := strings.ToUpper(strings.TrimSpace(r.Decision))
	switch {
	case v.err != nil && v.judge.OnError == "allow":
		d, s.Fallback = flow.Accept, fmt.Sprintf("the model failed (%v); on_error %q decided ACCEPT", v.err, "allow")
	case v.err != nil:
		d, s.Fallback = flow.Block, fmt.Sprintf("the model failed (%v); the %s is refused", v.err, v.kind)
		s.Response = "the judge could not decide"
	case !slices.Contains(allowed, d):
		d, s.Fallback = flow.Block, flow.NoDecision(d, allowed)+"; the "+v.kind+" is refused"
	}
	s.Decision = d
	if v.kind == flow.KindResult && d != flow.Accept {
		// A result kept from the model is kept from clients too: its
		// step shows the call; the result stays hidden (withheld_output).
		s.Input, _, _ = strings.Cut(s.Input, "\n→ ")
	}
	return s, d
}

func resultEvent(node string, u flow.ToolUse) flow.Event {
	by := u.JudgedBy
	if u.ResultJudgedBy != nil {
		by = u.ResultJudgedBy
	}
	return flow.Event{Name: flow.EventToolResult, Data: flow.ToolResult{Node: node, ToolName: u.ToolName, Output: u.Output, Error: u.Error,
		ToolCallID: u.ID, JudgedBy: by, Refused: u.Refused}}
}

// judgesResults reports whether the node has the results of calls to tool
// judged, whatever the tool says of itself.
func judgesResults(n *flow.Node, tool string) bool {
	return slices.ContainsFunc(n.JudgeResults, func(p string) bool { return ToolMatches(p, tool) })
}

// ToolMatches reports whether pattern, a tool's name that may end in *,
// names tool.
func ToolMatches(pattern, tool string) bool {
	prefix, star := strings.CutSuffix(pattern, "*")
	return pattern == tool || star && strings.HasPrefix(tool, prefix)
}

// finishInterrupted records the step of the iteration a crash cut short
// between its calls and its step, and counts it.
func (r *runner) finishInterrupted() error {
	u := r.t.Unfinished
	r.t.Unfinished = flow.Unfinished{}
	node := r.t.Def.Graph.Nodes[u.Node]
	if len(u.Calls) == 0 || node == nil {
		return nil
	}
	for i := range u.Calls {
		if !u.Ended[i] {
			u.Calls[i].Output = Interrupted
		}
	}
	s := flow.Step{AgentID: node.AgentID, Node: node.Name, Role: flow.RoleAssistant, ToolUsage: u.Calls,
		Decision: flow.NeedsTool, Fallback: "the run was interrupted while its tool calls ran; none runs again"}
	if task := r.task(r.steps, nil, node); !task.fromWithheld {
		s.Input = task.Input // and none of a draft the user was not shown
	}
	if node.Type == flow.Superego {
		s.Constitution = node.Constitution
	} else {
		s.SystemPrompt = node.SystemPrompt
	}
	next := node.Name
	if t, ok := node.Target(flow.NeedsTool); ok {
		next = t
	}
	s.NextAgent = &next
	r.iters[node.Name]++
	r.nsteps++
	return r.appendStep(&s, node)
}

// waiting is a tool call that waits for a person's review, and its node.
type waiting struct {
	node string
	use  flow.ToolUse
}

// awaitingCalls are the turn's tool calls that wait for a person's review
// and have no answer yet.
func awaitingCalls(turn []*flow.Step) []waiting {
	var out []waiting
	for _, s := range turn {
		for _, u := range s.ToolUsage {
			if u.Awaiting && s.AgentID != flow.Reviewer {
				out = append(out, waiting{s.Node, u})
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return slices.DeleteFunc(out, func(w waiting) bool { return answerOf(turn, w.use.ID) != nil })
}

// answerOf is the person's answer to the review id, if the turn has one.
func answerOf(turn []*flow.Step, id string) *flow.Step {
	for _, s := range turn {
		if s.AgentID == flow.Reviewer && s.ReviewID == id {
			return s
		}
	}
	return nil
}

// reviewed are node's calls that waited for review, now all answered, and
// not yet run or refused: as the answers decided them.
func reviewed(turn []*flow.Step, node string) []flow.ToolUse {
	var out []flow.ToolUse
	done := map[string]bool{}
	for _, s := range turn {
		if s.Node != node || s.AgentID == flow.Reviewer {
			continue
		}
		for _, u := range s.ToolUsage {
			if !u.Awaiting {
				done[u.ID] = true
				continue
			}
			a := answerOf(turn, u.ID)
			if a == nil {
				return nil // it still waits: nothing runs before every answer is in
			}
			u.Awaiting, u.Output = false, ""
			u.JudgedBy = &flow.JudgedBy{Node: flow.Reviewer, StepID: a.StepID, Decision: a.Decision}
			if a.Decision == flow.Rejected {
				u.Refused, u.Output = true, "refused by "+flow.Reviewer+": "+a.Response
			}
			out = append(out, u)
		}
	}
	return slices.DeleteFunc(out, func(u flow.ToolUse) bool { return done[u.ID] })
}

// PendingReview is a review an instance waits for (docs/actions.md).
type PendingReview struct {
	ReviewID  string          `json:"review_id"`
	Kind      string          `json:"kind"` // "tool_call", "changes", or "decision" (a supervisor's HUMAN_REVIEW)
	Node      string          `json:"node"`
	ToolName  string          `json:"tool_name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Reviews are the reviews an instance whose log has steps waits for: its
// last turn's tool calls that wait, the changes a supervisor proposed, or
// its HUMAN_REVIEW, none answered yet.
func Reviews(log []flow.Step) []PendingReview {
	steps := logOf(log, 0)
	i := lastUserStep(steps)
	if i < 0 {
		return nil
	}
	turn := steps[i+1:]
	var out []PendingReview
	for _, w := range awaitingCalls(turn) {
		out = append(out, PendingReview{ReviewID: w.use.ID, Kind: "tool_call", Node: w.node, ToolName: w.use.ToolName, Arguments: w.use.Input})
	}
	if len(out) > 0 || len(turn) == 0 {
		return out
	}
	last := turn[len(turn)-1]
	switch {
	case awaitsReview(turn):
		for j := len(turn) - 1; j >= 0; j-- {
			if slices.ContainsFunc(turn[j].ToolUsage, func(u flow.ToolUse) bool { return u.Proposed && u.Error == "" }) {
				return []PendingReview{{ReviewID: turn[j].StepID, Kind: "changes", Node: turn[j].Node}}
			}
		}
	case last.Decision == flow.HumanReview && last.Judged == nil && last.AgentID != flow.Reviewer:
		return []PendingReview{{ReviewID: last.StepID, Kind: "decision", Node: last.Node}}
	}
	return nil
}

// waitingResults are the turn's calls sent to the client whose results
// have not come back.
func waitingResults(turn []*flow.Step) []waiting {
	var out []waiting
	for j, s := range turn {
		for _, u := range usageOf(s) {
			if u.AwaitingResult && !settledLater(turn[j+1:], u.ID) {
				out = append(out, waiting{s.Node, u})
			}
		}
	}
	return out
}

// settledLater reports whether a later step records the call as run,
// refused or answered.
func settledLater(later []*flow.Step, id string) bool {
	for _, s := range later {
		if slices.ContainsFunc(usageOf(s), func(u flow.ToolUse) bool { return u.ID == id && !u.AwaitingResult }) {
			return true
		}
	}
	return false
}

// usageOf is a step's tool usage as the agent made it: a step withheld when
// its turn paused for the client (docs/gateway.md) shows only the calls sent to the
// client, and keeps the results that came back, and the refusals, apart.
func usageOf(s *flow.Step) []flow.ToolUse {
	if s.Withheld != "" {
		return s.WithheldToolUsage
	}
	return s.ToolUsage
}

// answered are node's calls sent to the client, with the results the
// client gave, as the agent's next iteration records them: judged by their
// result judge first.
func answered(turn []*flow.Step, node string, results []flow.ClientResult) []flow.ToolUse {
	var out []flow.ToolUse
	for _, w := range waitingResults(turn) {
		i := slices.IndexFunc(results, func(c flow.ClientResult) bool { return c.ToolCallID == w.use.ID })
		if w.node != node || i < 0 {
			continue
		}
		u := w.use
		u.AwaitingResult, u.Output = false, results[i].Output
		out = append(out, u)
	}
	return out
}

// notRun is the step that answers the calls a turn's client never
// answered, each "not run: " and why.
func (r *runner) notRun(turn []*flow.Step, why string) (flow.Step, bool) {
	waiting := waitingResults(turn)
	if len(waiting) == 0 {
		return flow.Step{}, false
	}
	node := waiting[0].node
	s := flow.Step{AgentID: node, Node: node, Role: flow.RoleAssistant, Decision: flow.NeedsTool, Fallback: "the client's results never came: " + why}
	if n := r.t.Def.Graph.Nodes[node]; n != nil {
		s.AgentID = n.AgentID
	}
	for _, w := range waiting {
		u := w.use
		u.AwaitingResult, u.Output = false, "not run: "+why
		s.ToolUsage = append(s.ToolUsage, u)
	}
	s.NextAgent = &node
	return s, true
}

// abandon ends a turn that waits for its client: each call it waits for is
// answered "not run: " and the reason, and the run ends cancelled.
func (r *runner) abandon(reason string) Outcome {
	if s, ok := r.notRun(r.steps[r.turn+1:], reason); ok {
		if err := r.appendStep(&s, r.t.Def.Graph.Nodes[s.Node]); err != nil {
			return Outcome{Status: flow.StatusFailed, Err: err}
		}
	}
	return Outcome{Status: flow.StatusCancelled}
}

// WaitingCalls are the calls of an instance's last turn that its client was
// sent and has not answered (docs/gateway.md), given the instance's steps.
func WaitingCalls(log []flow.Step) []flow.ToolUse {
	steps := logOf(log, 0)
	var out []flow.ToolUse
	for _, w := range waitingResults(steps[max(0, lastUserStep(steps)):]) {
		out = append(out, w.use)
	}
	return out
}

// ToolDescriber is an Agent that says what it offers a task's node as a
// tool: a replay asks a judge again about a recorded call with what the
// call's judge was told of its tool.
type ToolDescriber interface {
	ToolInfo(t *Task, name string) (ToolInfo, bool)
}

// judgementOf is what decided a call, or its result: a judge's step, a
// rule or a person, or nothing (nil).
type judgementOf struct {
	kind string
	by   *flow.JudgedBy
}

// judgementsOf are what decided a call and its result, the call's first.
func judgementsOf(u flow.ToolUse) [2]judgementOf {
	return [2]judgementOf{{flow.KindCall, u.JudgedBy}, {flow.KindResult, u.ResultJudgedBy}}
}

// rejudge makes again the judgements of actions the record made with rec,
// node's recorded step: the record's judgement of each of its calls, and
// of each result, taken where the call first comes. A judge the replay
// asks again is asked what the record's was asked: the call with its
// tool's description and the reply's calls before it, or the result, in
// the light of the same earlier calls; any other judge's judgement is
// reused, with no call. It returns rec with its calls' judgements these
// ones; changed where a judge asked again decides otherwise, and ended
// where its decision, a BLOCK that leads nowhere, ends the run: the step
// to end it with, not recorded yet.
func (r *runner) rejudge(ctx context.Context, node *flow.Node, rec flow.Step) (step flow.Step, changed bool, ended *flow.Step, err error) {
	task := r.task(r.steps, r.held, node)
	send := func(e flow.Event) error {
		if node.Judged() {
			return r.hold(e)
		}
		return r.emit(e)
	}
	c := r.calls(ctx, node, task, r.steps, func(flow.Event) {}, r.recorder(send))
	describer, _ := r.x.Agent.(ToolDescriber)
	ids := r.replay.ids
	for i, u := range rec.ToolUsage {
		for _, j := range judgementsOf(u) {
			if j.by == nil || j.by.Node == "" {
				continue // decided by a rule or a person, or not judged
			}
			was, ok := r.replay.judgement(node.Name, u.ID, j.kind)
			if !ok {
				continue
			}
			judge := r.t.Def.Graph.Nodes[was.Node]
			if judge == nil || !r.replay.ask[was.Node] {
				was.Reused, was.Cached, was.Usage, was.LatencyMS = true, false, nil, 0
				s, err := c.record(was)
				if err != nil {
					return rec, false, nil, err
				}
				ids[was.StepID] = s.StepID
				continue
			}
			a := &Action{Kind: j.kind, Agent: node.AgentID, Earlier: c.earlier}
			if describer != nil {
				info, _ := describer.ToolInfo(task, u.ToolName)
				a.Description = info.Description
			}
			if j.kind == flow.KindCall {
				a.Call = flow.ToolUse{ID: u.ID, ToolName: u.ToolName, Input: u.Input}
				for _, o := range rec.ToolUsage[:i] {
					a.Others = append(a.Others, flow.ToolUse{ID: o.ID, ToolName: o.ToolName, Input: o.Input})
				}
			} else {
				a.Call = u
				if u.WithheldOutput != "" {
					a.Call.Output, a.Call.Error = u.WithheldOutput, ""
				}
			}
			v := c.judge(judge, a)
			if ctx.Err() != nil {
				return rec, false, nil, ctx.Err()
			}
			s, d := c.judgement(node, u, v)
			if target, ok := judge.Transitions[flow.Block]; d == flow.Block && ok && target == nil {
				s.NextAgent = nil
				return rec, true, &s, nil
			}
			if s, err = c.record(s); err != nil {
				return rec, false, nil, err
			}
			ids[was.StepID] = s.StepID
			if d != was.Decision {
				return rec, true, nil, nil
			}
		}
	}
	// The step's calls name the judgements made here, or taken before.
	rec.ToolUsage = slices.Clone(rec.ToolUsage)
	for i, u := range rec.ToolUsage {
		for _, by := range []**flow.JudgedBy{&u.JudgedBy, &u.ResultJudgedBy} {
			if *by != nil && ids[(*by).StepID] != "" {
				b := **by
				b.StepID = ids[b.StepID]
				*by = &b
			}
		}
		rec.ToolUsage[i] = u
	}
	return rec, false, nil, nil
}

// awaitsReview reports whether a turn's steps hold changes proposed for a
// person's review (ToolUse.Proposed) that no review has answered yet.
func awaitsReview(turn []*flow.Step) bool {
	for i := len(turn) - 1; i >= 0 && turn[i].AgentID != flow.Reviewer; i-- {
		for _, u := range turn[i].ToolUsage {
			if u.Proposed && u.Error == "" {
				return true
			}
		}
	}
	return false
}
