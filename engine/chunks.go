package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"

	"superego/flow"
)

// maxChunkJudges bounds the chunk judgements of one draft in flight at once.
const maxChunkJudges = 4

// chunker judges an inner agent's draft while it streams, chunk by chunk,
// with the superego its node leads to (judge_stream, docs/gating.md). Accepted
// chunks go out at once, in order; a withheld chunk stops the agent's call,
// and nothing after the last accepted chunk goes out. The raw partials stay
// held with the turn; once the call ends, they are replaced by one partial
// with the text no chunk judgement released, which the final judgement
// releases or withholds with the rest of the turn.
type chunker struct {
	r          *runner
	agent      *flow.Node
	judge      *flow.Node
	task       *Task
	ctx        context.Context // the agent's call; cancelled when a chunk is withheld
	cancel     context.CancelFunc
	run        context.Context // the run's
	judges     context.Context // the chunk judgements': cancelled once the draft is whole
	stopJudges context.CancelFunc
	wg         sync.WaitGroup

	mu          sync.Mutex
	text        []rune // the draft's visible text so far
	cut         int    // runes of text cut into chunks
	released    int    // runes of text sent
	queue       []*judgement
	inFlight    int
	finished    bool  // the agent's call ended: no more chunks
	stopped     bool  // nothing more goes out before the final judgement
	withheld    Reply // the judgement that withheld a chunk, if one did
	withholding bool
	err         error // the first sink error
	usage       flow.Usage
	chunks      []flow.Chunk
}

// judgement is one chunk's judgement, in the order the chunks were cut.
type judgement struct {
	text  string
	end   int // runes of the draft judged once it is
	done  bool
	reply Reply
	err   error
}

func (r *runner) newChunker(ctx context.Context, agent *flow.Node, task *Task) *chunker {
	judge, _ := agent.StreamJudge()
	c := &chunker{r: r, agent: agent, judge: r.t.Def.Graph.Nodes[judge], task: task, run: ctx}
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.judges, c.stopJudges = context.WithCancel(ctx)
	return c
}

// wrap passes the agent's events on to out, and reads its partials.
func (c *chunker) wrap(out func(flow.Event)) func(flow.Event) {
	return func(e flow.Event) {
		out(e)
		if p, ok := e.Data.(flow.Partial); ok {
			c.mu.Lock()
			c.text = append(c.text, []rune(p.Delta)...)
			c.cutChunks()
			c.mu.Unlock()
		}
	}
}

// cutChunks starts a judgement for each chunk the text now holds. c.mu is held.
func (c *chunker) cutChunks() {
	for !c.finished && !c.stopped && c.inFlight < maxChunkJudges {
		end := cutPoint(c.text, c.cut, c.judge.JudgeStream.ChunkChars)
		if end < 0 {
			return
		}
		j := &judgement{text: string(c.text[c.cut:end]), end: end}
		before := string(c.text[max(0, c.cut-c.judge.JudgeStream.ContextChars):c.cut])
		c.queue = append(c.queue, j)
		c.cut = end
		c.inFlight++
		c.wg.Add(1)
		go c.judgeChunk(j, before)
	}
}

// cutPoint is where the chunk that starts at from ends: at a sentence or
// line end near size runes on, else at a space, else at size; -1 while the
// text is too short to tell.
func cutPoint(text []rune, from, size int) int {
	lo, hi := from+size*3/4, min(len(text), from+size*5/4)
	if len(text)-from < size {
		return -1
	}
	for i := hi - 1; i >= lo; i-- {
		if text[i] == '\n' || strings.ContainsRune(".!?", text[i]) && i+1 < len(text) && unicode.IsSpace(text[i+1]) {
			end := i + 1
			for end < len(text) && text[end] == ' ' {
				end++ // the space after a sentence goes with it
			}
			return end
		}
	}
	if hi < from+size*5/4 {
		return -1 // a sentence may still end within reach
	}
	for i := from + size; i >= lo; i-- {
		if unicode.IsSpace(text[i]) {
			return i + 1
		}
	}
	return from + size
}

// judgeChunk asks the judge about one chunk, then sends what is ready.
func (c *chunker) judgeChunk(j *judgement, before string) {
	defer c.wg.Done()
	t := c.task.forJudge(c.judge, c.agent, stackFor(c.judge, c.r.stack))
	t.Decisions, t.Chunk = c.judge.Decisions(), &DraftChunk{Before: before, Text: j.text}
	reply, err := c.act(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	j.done, j.reply, j.err = true, reply, err
	if reply.Usage != nil {
		c.usage.PromptTokens += reply.Usage.PromptTokens
		c.usage.CompletionTokens += reply.Usage.CompletionTokens
	}
	c.inFlight--
	c.advance()
	c.cutChunks()
}

// act runs a chunk judgement; its own partials go nowhere.
func (c *chunker) act(t *Task) (reply Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic judging a chunk: %v", p)
		}
	}()
	return c.r.x.Agent.Act(c.judges, t, func(flow.Event) {})
}

// advance takes the judgements that are done off the queue, in order:
// an accepted chunk goes out, a withheld one stops everything. A judgement
// that failed, or decided nothing the judge may decide, lets nothing more
// out early: the final judgement decides. c.mu is held.
func (c *chunker) advance() {
	for len(c.queue) > 0 && c.queue[0].done {
		j := c.queue[0]
		c.queue = c.queue[1:]
		if c.stopped {
			continue
		}
		d := strings.ToUpper(strings.TrimSpace(j.reply.Decision))
		valid := false
		for _, a := range c.judge.Decisions() {
			valid = valid || a == d
		}
		if j.err != nil || !valid {
			c.stopped = true
			continue
		}
		c.chunks = append(c.chunks, flow.Chunk{End: j.end, Decision: d})
		if c.judge.Withholds(d) {
			c.stopped, c.withholding, c.withheld = true, true, j.reply
			c.withheld.Decision = d
			c.cancel()
			continue
		}
		c.released = j.end
		err := c.r.sink.Emit(flow.Event{Name: flow.EventPartial, Data: flow.Partial{StepID: c.task.StepID, Node: c.agent.Name, AgentID: c.agent.AgentID, Delta: j.text}})
		if err != nil && c.err == nil {
			c.err = err
		}
	}
}

// finish ends the chunking once the agent's call has returned, and makes
// the held turn's partials the text nothing has released yet. The
// judgements still in flight are called off: the whole draft is about to be
// judged, and waiting for them would add a judge's time to the run's. If a
// chunk was withheld, the call was stopped: its reply is the text so far,
// going to the judge, whose verdict is the chunk's.
func (c *chunker) finish(reply Reply, err error) (Reply, error) {
	c.mu.Lock()
	c.finished = true
	c.stopJudges()
	c.mu.Unlock()
	c.wg.Wait()
	c.cancel()
	r := c.r
	r.usage.PromptTokens += c.usage.PromptTokens
	r.usage.CompletionTokens += c.usage.CompletionTokens
	if len(c.chunks) > 0 {
		if r.chunks == nil {
			r.chunks = map[string][]flow.Chunk{}
		}
		r.chunks[c.judge.Name] = append(r.chunks[c.judge.Name], c.chunks...)
	}
	kept := r.held[:0]
	for _, ev := range r.held {
		if p, ok := ev.Data.(flow.Partial); !ok || p.StepID != c.task.StepID {
			kept = append(kept, ev)
		}
	}
	r.held = kept
	if c.err != nil {
		return reply, c.err
	}
	// A withheld chunk decides, however the stopped call ended: cut short
	// with an error, or with what it had read.
	if c.withholding && c.run.Err() == nil {
		if r.verdicts == nil {
			r.verdicts = map[string]*Reply{}
		}
		r.verdicts[c.judge.Name] = &c.withheld // its tokens are the judge's step's, not counted apart
		if u := c.withheld.Usage; u != nil {
			r.usage.PromptTokens -= u.PromptTokens
			r.usage.CompletionTokens -= u.CompletionTokens
		}
		_, decision := c.agent.StreamJudge()
		return Reply{Decision: decision, Response: string(c.text), Model: reply.Model, ServedModel: reply.ServedModel, Parameters: reply.Parameters,
			Latency: reply.Latency, Usage: reply.Usage}, nil
	}
	if tail := string(c.text[c.released:]); tail != "" && err == nil {
		r.held = append(r.held, flow.Event{Name: flow.EventPartial, Data: flow.Partial{StepID: c.task.StepID, Node: c.agent.Name, AgentID: c.agent.AgentID, Delta: tail}})
	}
	return reply, err
}

// speculation is the turn a speculating superego's ACCEPT leads to, started
// at the same time as the superego (docs/gating.md). Its events wait in a buffer,
// seen by nobody; its writes wait for the verdict. ACCEPT with no guidance
// adopts it, as if it had run after the judge; any other verdict discards
// it.
type speculation struct {
	node    *flow.Node
	cancel  context.CancelFunc
	verdict chan struct{} // closed once the judge has decided
	done    chan struct{} // closed when the speculative turn has ended

	mu     sync.Mutex
	accept bool
	closed bool
	buffer []flow.Event
	route  func(flow.Event) error // where events go once adopted
	err    error                  // the first error routing them

	held  []flow.Event // the events held when it started: the turn's goroutine may not read the runner's
	steps []*flow.Step // written by the turn's goroutine, read after done
	fail  error
	lost  flow.Usage // tokens of a call that made no step
	ended *flow.Step // a judge's BLOCK, with no transition, of one of its calls
}

// speculate starts the node of judge's ACCEPT transition on the judge's
// input, if it may run once more.
func (r *runner) speculate(ctx context.Context, judge *flow.Node) *speculation {
	g := &r.t.Def.Graph
	target, _ := judge.Target(flow.Accept)
	node := g.Nodes[target]
	if node == nil || r.iters[target] >= node.Iterations() || r.nsteps >= g.Limit() {
		return nil
	}
	sp := &speculation{node: node, verdict: make(chan struct{}), done: make(chan struct{}), held: slices.Clone(r.held)}
	var specCtx context.Context
	specCtx, sp.cancel = context.WithCancel(ctx)
	// The log as it will be if the judge accepts with no guidance.
	steps := append(make([]*flow.Step, 0, len(r.steps)+4), r.steps...)
	steps = append(steps, &flow.Step{StepID: fmt.Sprint(len(steps) + 1), AgentID: judge.AgentID, Node: judge.Name, Role: flow.RoleAssistant,
		Decision: flow.Accept, NextAgent: &target})
	go sp.run(specCtx, r, steps, r.iters[target], r.nsteps+1)
	return sp
}

// run is the speculative turn: the node's iterations until it leads
// elsewhere.
func (sp *speculation) run(ctx context.Context, r *runner, steps []*flow.Step, iters, nsteps int) {
	base := len(steps)
	defer func() {
		if p := recover(); p != nil {
			sp.fail = fmt.Errorf("panic in speculative node %s: %v", sp.node.Name, p)
		}
		sp.steps = steps[base:]
		close(sp.done)
	}()
	n, g := sp.node, &r.t.Def.Graph
	for iters < n.Iterations() && nsteps < g.Limit() {
		iters, nsteps = iters+1, nsteps+1
		task := r.task(steps, sp.held, n)
		task.BeforeWrite = sp.wait
		sp.emit(flow.Event{Name: flow.EventNodeStart, Data: flow.NodeStart{Node: n.Name, AgentID: n.AgentID}})
		actCtx := r.nodeStarted(ctx, n, task.StepID, true)
		calls := r.calls(actCtx, n, task, steps, sp.emit, func(s flow.Step) (flow.Step, error) {
			s.StepID, s.Timestamp = fmt.Sprint(len(steps)+1), r.now().UTC()
			steps = append(steps, &s) // the log's record, and its event's
			sp.emit(flow.Event{Name: flow.EventCompleteStep, Data: &s})
			return s, nil
		})
		task.Calls = calls
		reply, err := r.x.Agent.Act(actCtx, task, sp.emit)
		lost := calls.spent()
		sp.lost.PromptTokens += lost.PromptTokens
		sp.lost.CompletionTokens += lost.CompletionTokens
		if calls.ended != nil {
			sp.ended = calls.ended
			return
		}
		var step flow.Step
		err = r.stepOf(n, task, &reply, err, &step)
		r.nodeEnded(actCtx, n, task.StepID, true, step.Decision, err)
		if err != nil {
			if reply.Usage != nil {
				sp.lost.PromptTokens += reply.Usage.PromptTokens
				sp.lost.CompletionTokens += reply.Usage.CompletionTokens
			}
			sp.fail = err
			return
		}
		step.StepID, step.Timestamp = fmt.Sprint(len(steps)+1), r.now().UTC()
		steps = append(steps, &step) // the log's record, and its event's: read, never changed, from here
		sp.emit(flow.Event{Name: flow.EventCompleteStep, Data: &step})
		waits := slices.ContainsFunc(step.ToolUsage, func(u flow.ToolUse) bool { return u.Awaiting || u.AwaitingResult })
		if step.NextAgent == nil || *step.NextAgent != n.Name || waits { // a call waits for a person or the client: the run pauses there
			return
		}
	}
}

// errDiscarded stops a speculative write whose turn the judge did not take.
var errDiscarded = errors.New("the judge did not accept: this speculative call is discarded")

// wait holds a write until the verdict.
func (sp *speculation) wait(ctx context.Context) error {
	select {
	case <-sp.verdict:
		if sp.accept {
			return nil
		}
		return errDiscarded
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (sp *speculation) emit(e flow.Event) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	switch {
	case sp.route != nil:
		if err := sp.route(e); err != nil && sp.err == nil {
			sp.err = err
		}
	case !sp.closed:
		sp.buffer = append(sp.buffer, e)
	}
}

// accepted reports whether the judge's step takes the speculative turn as
// it is: ACCEPT, with no guidance that would change it.
func (sp *speculation) accepted(judged *flow.Step) bool {
	return sp != nil && judged.Decision == flow.Accept && judged.AgentGuidance == "" && judged.NextAgent != nil && *judged.NextAgent == sp.node.Name
}

// adopt makes the speculative turn the run's: its events go out (held, if
// a superego judges the node) as if it ran after the judge, and the run
// waits for it to end. It returns the turn's last step.
func (sp *speculation) adopt(r *runner) (*flow.Step, error) {
	route := func(e flow.Event) error { return r.emit(e) }
	if sp.node.Judged() {
		route = func(e flow.Event) error {
			if e.Name == flow.EventNodeStart {
				return r.emit(e)
			}
			return r.hold(e)
		}
	}
	sp.mu.Lock()
	sp.accept, sp.closed = true, true
	close(sp.verdict)
	for _, e := range sp.buffer {
		if err := route(e); err != nil && sp.err == nil {
			sp.err = err
		}
	}
	sp.buffer, sp.route = nil, route
	sp.mu.Unlock()
	<-sp.done
	for _, s := range sp.steps {
		r.x.Observe.stepped(r.t.FlowID, r.t.Def.Graph.Nodes[s.Node], s.Decision, s.Basis)
		if s.Judged == nil { // judgements count toward no limit (docs/actions.md)
			r.iters[sp.node.Name]++
			r.nsteps++
		}
	}
	r.steps = append(r.steps, sp.steps...)
	r.usage.PromptTokens += sp.lost.PromptTokens
	r.usage.CompletionTokens += sp.lost.CompletionTokens
	if err := errors.Join(sp.fail, sp.err); err != nil {
		return nil, err
	}
	if sp.ended != nil { // a judge refused one of its calls, and that ends the run
		last := *sp.ended
		return &last, r.appendStep(&last, r.t.Def.Graph.Nodes[sp.ended.Node])
	}
	last := sp.steps[len(sp.steps)-1]
	if sp.node.Judged() && !r.t.Def.Graph.Holds(last.NextAgent) {
		return last, r.settle("", true)
	}
	return last, nil
}

// discard stops the speculative turn and forgets it; only its tokens are
// counted, apart.
func (sp *speculation) discard(r *runner) {
	if sp == nil {
		return
	}
	sp.mu.Lock()
	if !sp.closed {
		sp.closed = true
		close(sp.verdict)
	}
	sp.buffer = nil
	sp.mu.Unlock()
	sp.cancel()
	<-sp.done
	r.usage.SpeculativePromptTokens += sp.lost.PromptTokens
	r.usage.SpeculativeCompletionTokens += sp.lost.CompletionTokens
	for _, s := range sp.steps {
		if s.Usage != nil {
			r.usage.SpeculativePromptTokens += s.Usage.PromptTokens
			r.usage.SpeculativeCompletionTokens += s.Usage.CompletionTokens
		}
	}
}
