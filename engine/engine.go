package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"superego/flow"
)

// Engine starts runs of flows on instances, lets clients watch them, and
// owns their goroutines: a run goes on when the client that started it goes
// away, and ends when it ends, is cancelled, or the engine closes.
type Engine struct {
	Flows   map[string]*flow.Flow
	Exec    *Executor
	Store   flow.Store
	MaxRuns int          // runs in flight at once; 0 means 256
	Log     *slog.Logger // default slog.Default()
	// Replicas, where set, shares runs with other engines on the same
	// database: they are written with a job, and run where there is room.
	Replicas Replicas
	// MaxInput bounds the bytes of input, a conversation's included, that
	// the runs in flight were started with: a run's memory grows with its
	// input, several times over. 0 means DefaultMaxInput.
	MaxInput int64

	variants variants

	mu       sync.Mutex
	input    int64                  // bytes of input the live runs hold
	live     map[string]*liveRun    // by instance id
	backlogs map[string]*backlog    // idle instances' logs, shared by their readers
	unsaved  map[string]*lostEnding // by instance id: endings of lost runs not recorded yet
	closed   bool
	wg       sync.WaitGroup
}

// backlog is an idle instance's log as its subscribers read it: read once,
// by the first of them while the others wait for that read, shared, each
// subscriber with a cursor, and dropped when the last one goes. A run that
// begins or ends on the instance takes it out of Engine.backlogs: readers
// that come later read the log again.
type backlog struct {
	events []flow.Event
	err    error
	read   chan struct{} // closed once events, or err, are there
	refs   int
}

type liveRun struct {
	ctx    context.Context // the run's own: it outlives the request that started it
	cancel context.CancelCauseFunc
	input  int64 // bytes of input it was started with, counted against MaxInput

	mu      sync.Mutex // orders numbering, delivery and subscribing
	seq     int64
	pending []pendingEvent // published, not yet delivered: in order
	err     error          // the first write that failed; the run fails at its next event
	nolog   bool           // its instance's creation failed: it has no log to end
	drained sync.Cond      // pending became empty, or a held write ended
	holding int            // held events whose writes are not done
	log     []flow.Event   // delivered events its subscribers have yet to read (forgetRead)
	ended   bool           // log is complete
	subs    map[*Subscription]struct{}
	watch   func(flow.Event) // Run's watcher, if any: called in deliver
	// finished: its done is delivered, and a client may act on it before
	// the run has let go of its instance; free is closed once it has. It
	// is made, under Engine.mu, when a client first waits for it.
	finished atomic.Bool
	free     chan struct{}
}

// pendingEvent waits until it, and every event before it, is durable.
type pendingEvent struct {
	ev    flow.Event
	ready bool
}

// newLiveRun makes a run's state: what it holds while it waits for its
// model, a thousand times over when a thousand do, is made only when it is
// needed (its subscribers, its queue of events, the channel a client waits
// on for it to let go of its instance).
func newLiveRun() *liveRun {
	run := &liveRun{}
	run.drained.L = &run.mu
	return run
}

// Subscription reads an instance's events: its Backlog, then the live run's
// events as they are delivered. Subscribers share the run's own list of
// events, each with a cursor, so a slow reader costs nothing and loses
// nothing: it reads at its own pace, until the run ends.
type Subscription struct {
	Instance string
	Backlog  []flow.Event
	run      *liveRun
	next     int           // index in run.log
	after    int64         // live events up to this id came in the backlog
	wake     chan struct{} // one token: events arrived, or the run ended
	release  func()        // lets go of a shared backlog, or of a remote run's wake-ups
	remote   *remote       // a run that runs on another replica
}

// Events iterates over the subscription's events until the run ends or ctx
// is done.
func (s *Subscription) Events(ctx context.Context) iter.Seq[flow.Event] {
	return func(yield func(flow.Event) bool) {
		for len(s.Backlog) > 0 {
			ev := s.Backlog[0]
			s.Backlog = s.Backlog[1:]
			if !yield(ev) {
				return
			}
		}
		if s.remote != nil {
			s.remote.events(ctx, yield)
			return
		}
		for s.run != nil {
			ev, ok, ended := s.take()
			switch {
			case ok:
				if !yield(ev) {
					return
				}
				continue
			case ended:
				return
			}
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			}
		}
	}
}

// take returns the next live event, if one is there.
func (s *Subscription) take() (ev flow.Event, ok, ended bool) {
	run := s.run
	run.mu.Lock()
	defer run.mu.Unlock()
	for !ok && s.next < len(run.log) {
		ev = run.log[s.next]
		s.next++
		ok = ev.ID > s.after
	}
	if s.next == len(run.log) {
		run.forgetRead()
	}
	if !ok {
		return flow.Event{}, false, run.ended
	}
	return ev, true, false
}

// Buffered reports whether an event is there to read without waiting.
func (s *Subscription) Buffered() bool {
	if len(s.Backlog) > 0 {
		return true
	}
	if s.run == nil {
		return false
	}
	s.run.mu.Lock()
	defer s.run.mu.Unlock()
	return s.next < len(s.run.log)
}

// Close stops the subscription; call it when its reader is done.
func (s *Subscription) Close() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
	if s.run == nil {
		return
	}
	s.run.mu.Lock()
	delete(s.run.subs, s)
	s.run.forgetRead()
	s.run.mu.Unlock()
}

// Idle reports whether the subscription has no live run behind it: all it
// will ever deliver is its Backlog.
func (s *Subscription) Idle() bool { return s.run == nil && s.remote == nil }

// Start begins a run of a flow, on an instance or, where req names none,
// on a new one; the subscription it returns sees the whole run.
func (e *Engine) Start(ctx context.Context, req Request) (*Subscription, error) {
	if e.Replicas != nil {
		return e.dispatch(ctx, &req, nil, nil)
	}
	var sub *Subscription
	run, turn, err := e.start(ctx, &req, nil, func(run *liveRun) { sub = run.subscribe(nil, 0) })
	if err != nil {
		return nil, err
	}
	sub.Instance = turn.InstanceID
	go e.run(run, turn, nil)
	return sub, nil
}

// StartReview answers the human review an instance waits for, and goes on
// with its run as Start does: approved, along the supervisor's ACCEPT
// transition; rejected, along its BLOCK one.
func (e *Engine) StartReview(ctx context.Context, instanceID string, review flow.Review) (*Subscription, error) {
	inst, err := e.Store.Get(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	if e.Replicas != nil {
		return e.dispatch(ctx, &Request{FlowID: inst.FlowID, InstanceID: instanceID}, &review, nil)
	}
	var sub *Subscription
	run, turn, err := e.start(ctx, &Request{FlowID: inst.FlowID, InstanceID: instanceID}, &review, func(run *liveRun) { sub = run.subscribe(nil, 0) })
	if err != nil {
		return nil, err
	}
	sub.Instance = turn.InstanceID
	go e.run(run, turn, nil)
	return sub, nil
}

// Run runs a flow as Start does, but on the calling goroutine, for a
// caller that waits for the run anyway and whose watcher keeps up without
// blocking, such as one that collects events in memory: watch sees each
// event as it is delivered, in order, on whichever goroutine delivers it.
// Run returns when the run has ended and every event has been watched; the
// run goes on if the caller's client goes away, as every run does. A reader
// that may block, a socket, wants Start: a subscription never holds a run
// back.
func (e *Engine) Run(ctx context.Context, req Request, watch func(flow.Event)) error {
	if e.Replicas != nil {
		_, err := e.dispatch(ctx, &req, nil, watch)
		return err
	}
	run, turn, err := e.start(ctx, &req, nil, func(run *liveRun) { run.watch = watch })
	if err != nil {
		return err
	}
	e.run(run, turn, nil)
	return nil
}

// start reserves the instance and lets attach hook a reader onto the run
// before its first event; the caller runs it.
func (e *Engine) start(ctx context.Context, req *Request, review *flow.Review, attach func(*liveRun)) (*liveRun, *Turn, error) {
	f := e.Flows[req.FlowID]
	if f == nil {
		return nil, nil, fmt.Errorf("flow %q: %w", req.FlowID, flow.ErrNotFound)
	}
	instanceID := req.InstanceID
	isNew := instanceID == ""
	if isNew {
		instanceID = flow.NewID()
	} else if inst, err := e.Store.Get(ctx, instanceID); err != nil {
		return nil, nil, err
	} else if inst.FlowID != req.FlowID {
		return nil, nil, fmt.Errorf("instance %s runs flow %q, not %q: %w", instanceID, inst.FlowID, req.FlowID, flow.ErrInvalid)
	}
	for i, s := range req.Prior {
		client := s.Role == flow.RoleSystem && s.AgentID == flow.ClientInstructions
		if s.Role != flow.RoleUser && s.Role != flow.RoleAssistant && !client || !isNew {
			return nil, nil, fmt.Errorf("prior message %d: a new instance's messages are user or assistant ones, or its client's instructions: %w", i, flow.ErrInvalid)
		}
	}
	turn, err := e.turn(ctx, f, req.Options)
	if err != nil {
		return nil, nil, err
	}
	e.saveEndings()
	if err := e.savedEnding(instanceID); err != nil {
		return nil, nil, err // its last run's ids are not in its log yet
	}
	run := newLiveRun()
	run.input = req.size()
	for {
		err := e.reserve(instanceID, run)
		if err == nil {
			break
		}
		// A run that has sent its done is letting go of the instance: its
		// client, which may answer at once (with its tools' results,
		// §4a), waits for that rather than being refused.
		free := e.finishing(instanceID)
		if !errors.Is(err, flow.ErrBusy) || free == nil {
			return nil, nil, err
		}
		select {
		case <-free:
		case <-ctx.Done():
			return nil, nil, err
		}
	}
	var st flow.State
	if isNew {
		// Queued ahead of the run's events: they wait for it, and a
		// failure fails the run at its next event.
		e.Store.Create(flow.Instance{ID: instanceID, FlowID: req.FlowID, CreatedAt: time.Now().UTC(), Tags: req.Options.Tags}, run.created)
	} else {
		events, err := e.Store.Events(ctx, instanceID, 0)
		if err != nil {
			e.release(instanceID)
			e.wg.Done()
			return nil, nil, fmt.Errorf("start run on instance %s: %w", instanceID, err)
		}
		st = flow.Replay(events)
	}
	if err := e.goOn(ctx, &turn, instanceID, st, *req, review); err != nil {
		e.release(instanceID)
		e.wg.Done()
		return nil, nil, err
	}
	run.mu.Lock()
	attach(run)
	run.seq = st.LastID
	run.mu.Unlock()
	return run, &turn, nil
}

// goOn checks that req, or a person's answer to a review, answers what
// the instance id, in state st, waits for, and sets the turn up from
// st: here (start) as on a replica (dispatch).
func (e *Engine) goOn(ctx context.Context, turn *Turn, id string, st flow.State, req Request, review *flow.Review) error {
	if req.Continue && st.Status != flow.StatusAwaitingToolResult {
		return fmt.Errorf("instance %s is %s: %w", id, st.Status, flow.ErrNoWait)
	}
	var held []flow.Event
	if review != nil {
		var err error
		held, err = e.Store.Held(ctx, id)
		if err == nil {
			err = answering(st, held, review)
		}
		if err != nil {
			return fmt.Errorf("instance %s: %w", id, err)
		}
	}
	turn.InstanceID, turn.RunID, turn.Steps, turn.Input, turn.Prior = id, flow.NewID(), st.Steps, req.Input, req.Prior
	turn.Options.Review, turn.Held, turn.Continue = review, held, req.Continue
	if review != nil || req.Continue {
		// A person's answer, or a client's results, go on with the turn
		// they answer, under its stack.
		turn.Options.Stack = st.Options.Stack
	}
	return nil
}

// answering checks that a person's answer answers a review the instance
// waits for, and names the review where it is the only one.
func answering(st flow.State, held []flow.Event, review *flow.Review) error {
	if st.Status != flow.StatusAwaitingReview {
		return fmt.Errorf("it is %s: %w", st.Status, flow.ErrNoReview)
	}
	steps := st.Steps
	for _, ev := range held {
		if s, ok := ev.Data.(flow.Step); ok {
			steps = append(slices.Clip(steps), s)
		}
	}
	pending := Reviews(steps)
	ids := make([]string, len(pending))
	for i, p := range pending {
		ids[i] = p.ReviewID
	}
	switch {
	case review.ReviewID == "" && len(pending) > 1:
		return fmt.Errorf("%d reviews wait (%s): name one with review_id: %w", len(pending), strings.Join(ids, ", "), flow.ErrNoReview)
	case review.ReviewID == "" && len(pending) == 1:
		review.ReviewID = ids[0]
	case review.ReviewID != "" && !slices.Contains(ids, review.ReviewID):
		return fmt.Errorf("review %q does not wait (reviews waiting: %s): %w", review.ReviewID, strings.Join(ids, ", "), flow.ErrNoReview)
	}
	return nil
}

// turn is a run of flow f with options: its variant's definition, and the
// record a replay walks.
func (e *Engine) turn(ctx context.Context, f *flow.Flow, opt flow.RunOptions) (Turn, error) {
	def, err := e.variants.of(f, opt.Variant)
	if err != nil {
		return Turn{}, err
	}
	t := Turn{FlowID: f.ID, Def: def, Options: opt}
	if opt.Replay != nil {
		if t.Recorded, err = recorded(ctx, e.Store, opt.Replay.Instance); err != nil {
			return Turn{}, err
		}
	}
	return t, nil
}

// run executes a reserved run to its end: the engine counts it in flight,
// and Close waits for it. A panic in the engine's own part of the run ends
// the run where it is, logged, and leaves every other run and the server
// going; the executor turns one in a node into a failed run. A claim, for
// a run shared between replicas, is released once the run's events are
// all written; a cancel from any replica stops the run.
func (e *Engine) run(run *liveRun, turn *Turn, claim *Claim) {
	id := turn.InstanceID // what the sink's functions need of turn, which they would keep on the heap
	defer e.wg.Done()
	defer e.release(id)
	ended := false
	if claim != nil {
		defer func() { claim.Release(ended) }()
		stopped := make(chan struct{})
		defer close(stopped)
		go func() {
			select {
			case <-claim.Stop:
				run.cancel(context.Canceled)
			case <-claim.Lost:
				run.cancel(flow.ErrClosed) // as a shutdown does: no ending written
			case <-stopped:
			}
		}()
	}
	defer run.end()
	defer func() {
		if p := recover(); p != nil {
			e.runLog(turn).Error("run stopped by a panic; it resumes at the next start", "panic", fmt.Sprint(p))
		}
	}()
	sink := Sink{
		Emit:   func(evs ...flow.Event) error { return e.publish(id, run, evs, false) },
		Settle: func(evs ...flow.Event) error { return e.publish(id, run, evs, true) },
		Hold: func(ev flow.Event) error {
			run.mu.Lock()
			run.holding++
			run.mu.Unlock()
			e.Store.Hold(id, ev, run.held)
			run.mu.Lock()
			defer run.mu.Unlock()
			return run.err
		},
		Sync: run.sync,
	}
	ctx := e.Exec.Observe.runStarted(run.ctx, turn.info())
	r := e.Exec.newRunner(turn, sink)
	ended = e.finish(ctx, run, turn, r.end(r.run(ctx)), claim)
}

// finish settles how a run ended, tells the observer and logs it where
// that is news to an operator; it reports whether the run ended (one
// interrupted did not). It is apart from run so that what it needs takes
// no room on the stack while a run waits on its model: a thousand runs in
// flight hold a thousand stacks.
func (e *Engine) finish(ctx context.Context, run *liveRun, turn *Turn, out Outcome, claim *Claim) bool {
	lost := false
	if claim != nil {
		select {
		case <-claim.Lost:
			lost = true
		default:
		}
	}
	// The run may have ended before it heard that a write failed: it ends
	// failed all the same. A run whose lease is lost writes nothing more.
	if err := run.flushed(); err != nil && !lost {
		out = e.lose(run, *turn, err)
	}
	e.Exec.Observe.runEnded(ctx, turn.info(), out)
	switch {
	case out.Status == statusInterrupted && lost:
		e.runLog(turn).InfoContext(ctx, "run stopped: this replica lost its lease; the replica that holds it now resumes it")
	case out.Status == statusInterrupted:
		e.runLog(turn).InfoContext(ctx, "run interrupted by shutdown; it resumes when the server starts again")
	case out.Err != nil:
		attrs := []any{"code", flow.ErrorCode(out.Err), "err", out.Err}
		if p, ok := errors.AsType[*panicked](out.Err); ok {
			attrs = append(attrs, "stack", string(p.stack))
		}
		e.runLog(turn).WarnContext(ctx, "run failed", attrs...)
	}
	return out.Status != statusInterrupted
}

// info names the turn's run.
func (t *Turn) info() RunInfo {
	return RunInfo{FlowID: t.FlowID, InstanceID: t.InstanceID, RunID: t.RunID, Resumed: t.Resume && !t.Opened}
}

// runLog is the logger of a run's lines: each names the run and its
// instance. It is made when a line is written, not with every run.
func (e *Engine) runLog(turn *Turn) *slog.Logger {
	return e.logger().With("run_id", turn.RunID, "instance_id", turn.InstanceID, "flow_id", turn.FlowID)
}

// flushed waits until every event published is durable, or dropped after
// a write that failed, and returns the first write that failed.
func (run *liveRun) flushed() error {
	run.mu.Lock()
	defer run.mu.Unlock()
	for len(run.pending) > 0 {
		run.drained.Wait()
	}
	return run.err
}

// end waits until every event of the run is durable, then tells its
// subscribers there will be no more.
func (run *liveRun) end() {
	run.cancel(nil)
	run.flushed() // the log is whole before the instance is free again
	run.mu.Lock()
	defer run.mu.Unlock()
	run.ended = true
	run.wakeAll()
}

// lose ends a run whose events could not all be written: however far it
// got, it failed. Its subscribers are told so, with code storage, and the
// engine records that ending after every id the run numbered; an ending it
// cannot record yet it keeps, and records as soon as it can (saveEndings),
// so that no instance reads running once its run has ended.
func (e *Engine) lose(run *liveRun, turn Turn, cause error) Outcome {
	run.mu.Lock()
	now := time.Now().UTC()
	end := []flow.Event{
		{ID: run.seq + 1, Name: flow.EventError, Time: now, Data: flow.ErrorData{Code: flow.ErrorCode(cause), Message: cause.Error()}},
		{ID: run.seq + 2, Name: flow.EventDone, Time: now, Data: flow.Done{InstanceID: turn.InstanceID, Status: flow.StatusFailed}},
	}
	run.seq += 2
	nolog := run.nolog
	run.mu.Unlock()
	if !nolog {
		// Held events are dropped with it: the run ends without their judgement.
		if err := flow.Wait(func(done func(error)) { e.Store.Settle(turn.InstanceID, end, done) }); err != nil {
			e.keepEnding(turn.InstanceID, end)
			e.runLog(&turn).Error("the failed run's ending is not recorded yet: its instance reads running until it is", "err", err)
		}
	}
	run.mu.Lock()
	for _, ev := range end {
		run.pending = append(run.pending, pendingEvent{ev: ev, ready: true})
	}
	run.deliver()
	run.mu.Unlock()
	return Outcome{Status: flow.StatusFailed, Err: cause}
}

// lostEnding is the ending of a run that failed, not recorded yet; mu is held
// while it is being written, so that it is written once.
type lostEnding struct {
	mu     sync.Mutex
	events []flow.Event
}

func (e *Engine) keepEnding(id string, events []flow.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.unsaved == nil {
		e.unsaved = map[string]*lostEnding{}
	}
	e.unsaved[id] = &lostEnding{events: events}
}

// endingOf is the ending of the instance's last run, if it is not recorded.
func (e *Engine) endingOf(id string) *lostEnding {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unsaved[id]
}

// saveEndings queues a write of each ending not recorded yet that is not
// being written: as requests come, once the store takes writes again.
func (e *Engine) saveEndings() {
	e.mu.Lock()
	todo := map[string]*lostEnding{}
	for id, u := range e.unsaved {
		if u.mu.TryLock() {
			todo[id] = u
		}
	}
	e.mu.Unlock()
	for id, u := range todo {
		e.Store.Settle(id, u.events, func(err error) {
			if err == nil {
				e.forget(id, u)
			}
			u.mu.Unlock()
		})
	}
}

// savedEnding records the ending of the instance's last run, if it is not
// recorded yet, or reports why it cannot.
func (e *Engine) savedEnding(id string) error {
	u := e.endingOf(id)
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if e.endingOf(id) != u {
		return nil // written meanwhile
	}
	if err := flow.Wait(func(done func(error)) { e.Store.Settle(id, u.events, done) }); err != nil {
		return fmt.Errorf("instance %s: its last run failed, and its ending is not recorded yet: %w: %w", id, flow.ErrStorage, err)
	}
	e.forget(id, u)
	return nil
}

func (e *Engine) forget(id string, u *lostEnding) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.unsaved[id] == u {
		delete(e.unsaved, id)
	}
}

// Recover finds the runs the store says are in progress, left so by a crash
// or a shutdown, and resumes each from its last recorded step, its held
// events held still: their judge runs again before anything of them goes
// out. A run that cannot resume (its flow is gone, or no longer has what
// the run's options name) ends failed, with the reason; one whose log does
// not read (ErrCorrupt) is logged and left as it is. Neither keeps the
// others from resuming. It returns how many it resumed. only, where set,
// picks the runs by their options: a process that may share the store with
// a server resumes only its own.
func (e *Engine) Recover(ctx context.Context, only func(flow.RunOptions) bool) (int, error) {
	if e.Replicas != nil {
		return 0, nil // a run's job resumes it, on whichever replica takes it
	}
	list, err := e.Store.List(ctx, flow.ListOptions{Status: flow.StatusRunning})
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	resumed := 0
	for _, inst := range list {
		events, err := e.Store.Events(ctx, inst.ID, 0)
		if errors.Is(err, flow.ErrCorrupt) {
			e.logger().Error("interrupted run cannot resume: its log does not read", "instance_id", inst.ID, "flow_id", inst.FlowID, "err", err)
			continue
		}
		if err != nil {
			return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
		}
		st := flow.Replay(events) // the options are the interrupted run's, which it keeps
		if only != nil && !only(st.Options) {
			continue
		}
		held, err := e.Store.Held(ctx, inst.ID)
		if err != nil {
			return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
		}
		var turn Turn
		reason := ""
		if f := e.Flows[inst.FlowID]; f == nil {
			reason = fmt.Sprintf("flow %q is not loaded any more, so the interrupted run cannot resume", inst.FlowID)
		} else if turn, err = e.turn(ctx, f, st.Options); err != nil {
			reason = fmt.Sprintf("the interrupted run cannot resume: %v", err)
		}
		if reason != "" {
			end := []flow.Event{
				{ID: st.LastID + 1, Name: flow.EventError, Time: time.Now().UTC(), Data: flow.ErrorData{Code: "internal", Message: reason}},
				{ID: st.LastID + 2, Name: flow.EventDone, Time: time.Now().UTC(), Data: flow.Done{InstanceID: inst.ID, Status: flow.StatusFailed, Usage: &flow.RunUsage{}}},
			}
			// Held events stay unseen: the run ends without their judgement.
			if err := flow.Wait(func(done func(error)) { e.Store.Settle(inst.ID, end, done) }); err != nil {
				return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
			}
			e.logger().Warn("interrupted run failed", "instance_id", inst.ID, "flow_id", inst.FlowID, "reason", reason)
			continue
		}
		run := newLiveRun()
		if err := e.reserve(inst.ID, run); err != nil {
			return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
		}
		run.seq = st.LastID
		turn.InstanceID, turn.RunID, turn.Steps, turn.Held, turn.Resume, turn.Unfinished = inst.ID, flow.NewID(), st.Steps, held, true, st.Unfinished
		go e.run(run, &turn, nil)
		e.runLog(&turn).Info("resuming interrupted run", "steps", len(st.Steps), "held", len(held))
		resumed++
	}
	return resumed, nil
}

func (e *Engine) reserve(id string, run *liveRun) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	max := e.maxRuns()
	switch {
	case e.closed:
		return flow.ErrClosed
	case e.live[id] != nil:
		return fmt.Errorf("instance %s: %w", id, flow.ErrBusy)
	case len(e.live) >= max:
		return fmt.Errorf("%d runs in flight: %w", len(e.live), flow.ErrTooMany)
	case run.input > e.maxInput():
		return fmt.Errorf("an input of %s, a conversation's included, where this server's runs in flight may hold %s: %w", size(run.input), size(e.maxInput()), flow.ErrInvalid)
	case e.input+run.input > e.maxInput():
		return fmt.Errorf("the runs in flight hold %s of input, and this run's %s would take them past the server's %s; retry later: %w",
			size(e.input), size(run.input), size(e.maxInput()), flow.ErrInputInFlight)
	}
	if e.live == nil {
		e.live = map[string]*liveRun{}
	}
	run.ctx, run.cancel = context.WithCancelCause(context.Background())
	e.live[id] = run
	e.input += run.input
	delete(e.backlogs, id) // the run makes it stale
	e.wg.Add(1)
	return nil
}

// finishing is closed once the instance's run, which has delivered its
// done, lets go of the instance; it is nil while the run goes on.
func (e *Engine) finishing(id string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch run := e.live[id]; {
	case run == nil: // let go of since
		c := make(chan struct{})
		close(c)
		return c
	case run.finished.Load():
		if run.free == nil {
			run.free = make(chan struct{})
		}
		return run.free
	}
	return nil
}

func (e *Engine) release(id string) {
	e.mu.Lock()
	if run := e.live[id]; run != nil {
		if run.free != nil {
			close(run.free)
		}
		e.input -= run.input
	}
	delete(e.live, id)
	delete(e.backlogs, id)
	e.mu.Unlock()
}

// publish numbers events and queues them for the store, as one write
// (partial outputs are not stored); with settle, that write also ends the
// instance's held turn. Events reach subscribers in order, each once it
// and all before it are durable: a partial on its own at once, events of a
// group together. publish reports the first write that failed.
func (e *Engine) publish(id string, run *liveRun, evs []flow.Event, settle bool) error {
	run.mu.Lock()
	if run.err != nil {
		err := run.err
		run.mu.Unlock()
		return err // nothing more of the run is written, nor shown: it ends failed
	}
	queued := time.Now() // with its monotonic reading, for the observer
	now := queued.UTC()
	first := run.seq + 1
	var stored []flow.Event // none for a partial output, the most frequent event
	for i := range evs {
		run.seq++
		evs[i].ID, evs[i].Time = run.seq, now
		if evs[i].Name == flow.EventPartial {
			continue
		}
		if stored == nil {
			stored = make([]flow.Event, 0, len(evs))
		}
		stored = append(stored, evs[i])
	}
	last, ready := run.seq, len(stored) == 0
	for i := range evs {
		run.pending = append(run.pending, pendingEvent{ev: evs[i], ready: ready})
	}
	err := run.err
	if ready {
		run.deliver()
	}
	run.mu.Unlock()
	if !ready {
		// Not under run.mu: a store may call done before it returns.
		done := func(err error) { e.Exec.Observe.wrote(queued); run.written(first, last, err) }
		if settle {
			e.Store.Settle(id, stored, done)
		} else {
			e.Store.Append(id, stored, done)
		}
	}
	return err
}

// written marks events first to last durable, and delivers what is ready;
// a write that failed fails the run, and nothing after it is shown.
func (run *liveRun) written(first, last int64, err error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	switch {
	case run.err != nil:
		return // the run failed at an earlier write: these are not shown
	case err != nil:
		run.fail(fmt.Errorf("%w: events %d to %d: %w", flow.ErrStorage, first, last, err))
		return
	}
	// pending is in id order with no gaps, so the events' places are known.
	base := run.pending[0].ev.ID
	for id := first; id <= last; id++ {
		run.pending[id-base].ready = true
	}
	run.deliver()
}

// held is told that a held event's write is done.
func (run *liveRun) held(err error) {
	run.failed(err)
	run.mu.Lock()
	defer run.mu.Unlock()
	run.holding--
	run.drained.Broadcast()
}

// sync waits until every event the run has published or held is durable,
// and reports the first write that failed.
func (run *liveRun) sync() error {
	run.mu.Lock()
	defer run.mu.Unlock()
	for len(run.pending) > 0 || run.holding > 0 {
		run.drained.Wait()
	}
	return run.err
}

// failed records a write that failed; the run fails at its next event.
func (run *liveRun) failed(err error) {
	if err == nil {
		return
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	run.fail(fmt.Errorf("%w: %w", flow.ErrStorage, err))
}

// created is the result of the write that creates the run's instance.
func (run *liveRun) created(err error) {
	if err == nil {
		return
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	run.nolog = true
	run.fail(fmt.Errorf("%w: %w", flow.ErrStorage, err))
}

// fail records the first write that failed and drops the events not
// delivered yet: they come after it, and a client is shown only what is
// durable. run.mu is held.
func (run *liveRun) fail(err error) {
	if run.err == nil {
		run.err = err
	}
	run.pending = run.pending[:0]
	run.drained.Broadcast()
}

// deliver moves the ready prefix of pending to the run's log and wakes its
// subscribers. run.mu is held.
func (run *liveRun) deliver() {
	n := 0
	for ; n < len(run.pending) && run.pending[n].ready; n++ {
		// A subscriber that comes later starts at the log's end, so with
		// no subscribers there is nothing to keep.
		if len(run.subs) > 0 {
			run.log = append(run.log, run.pending[n].ev)
		}
		if run.watch != nil {
			run.watch(run.pending[n].ev)
		}
		if run.pending[n].ev.Name == flow.EventDone {
			run.finished.Store(true)
		}
	}
	if n == 0 {
		return
	}
	run.pending = append(run.pending[:0], run.pending[n:]...)
	run.wakeAll()
	if len(run.pending) == 0 {
		run.drained.Broadcast()
	}
}

// forgetRead drops the log's events once every subscriber has read them:
// the store has them, and a subscriber that comes later starts at the
// log's end and reads what went before from the store. While its readers
// keep up, a run holds only the events they have yet to read. run.mu is
// held.
func (run *liveRun) forgetRead() {
	for s := range run.subs {
		if s.next < len(run.log) {
			return
		}
	}
	clear(run.log)
	run.log = run.log[:0]
	for s := range run.subs {
		s.next = 0
	}
}

// wakeAll wakes the run's subscribers. It is not inlined, so that the
// room its walk over them takes is not on the way of every event to a
// watcher.
//
//go:noinline
func (run *liveRun) wakeAll() {
	for s := range run.subs {
		select {
		case s.wake <- struct{}{}:
		default: // it has a token already
		}
	}
}

// subscribe follows the run from its next delivered event. run.mu is held.
func (run *liveRun) subscribe(backlog []flow.Event, after int64) *Subscription {
	if n := len(backlog); n > 0 {
		after = backlog[n-1].ID
	}
	s := &Subscription{Backlog: backlog, run: run, next: len(run.log), after: after, wake: make(chan struct{}, 1)}
	if run.subs == nil {
		run.subs = map[*Subscription]struct{}{}
	}
	run.subs[s] = struct{}{}
	return s
}

// Subscribe returns the instance's stored events after the given id and,
// while a run is in progress, its live events. The store is read without
// holding the run back: the subscription joins the run first, and skips
// the live events its read of the store already had.
func (e *Engine) Subscribe(ctx context.Context, id string, after int64) (*Subscription, error) {
	e.mu.Lock()
	run := e.live[id]
	e.mu.Unlock()
	// A live run's instance exists, though its creation may not be
	// committed yet; any other must be in the store.
	if run == nil {
		if _, err := e.Store.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	if run != nil {
		run.mu.Lock()
		// A run that has delivered its done has stored all it will: what
		// is after it is read from the store, as of a run that has ended.
		if !run.ended && !run.finished.Load() {
			sub := run.subscribe(nil, after)
			sub.Instance = id
			run.mu.Unlock()
			backlog, err := e.Store.Events(ctx, id, after)
			if err != nil {
				sub.Close()
				return nil, err
			}
			sub.Backlog = backlog
			if n := len(backlog); n > 0 {
				run.mu.Lock()
				sub.after = backlog[n-1].ID
				run.mu.Unlock()
			}
			return sub, nil
		}
		run.mu.Unlock()
	}
	if e.Replicas != nil {
		// Running elsewhere, or queued: followed from the log.
		events, err := e.Store.Events(ctx, id, 0)
		if err != nil {
			return nil, err
		}
		if st := flow.Replay(events); st.Status == flow.StatusRunning {
			i := sort.Search(len(events), func(i int) bool { return events[i].ID > after })
			return e.follow(id, after, events[i:], st.RunStartID), nil
		}
	}
	return e.idle(ctx, id, after)
}

// idle subscribes to an instance with no run: its log, read once and shared
// by every reader while any reads it. Two hundred replays that come at once
// hold one copy of the log, not two hundred.
func (e *Engine) idle(ctx context.Context, id string, after int64) (*Subscription, error) {
	e.mu.Lock()
	b := e.backlogs[id]
	first := b == nil
	if first {
		b = &backlog{read: make(chan struct{})}
		if e.backlogs == nil {
			e.backlogs = map[string]*backlog{}
		}
		e.backlogs[id] = b
	}
	b.refs++
	e.mu.Unlock()
	release := func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if b.refs--; (b.refs == 0 || b.err != nil) && e.backlogs[id] == b {
			delete(e.backlogs, id)
		}
	}
	if first {
		// Read for every reader that joins meanwhile: this one's leaving
		// does not end it.
		b.events, b.err = e.Store.Events(context.WithoutCancel(ctx), id, 0)
		close(b.read)
	} else {
		select {
		case <-b.read:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	if b.err != nil {
		release() // a reader that comes later reads again
		return nil, b.err
	}
	i := sort.Search(len(b.events), func(i int) bool { return b.events[i].ID > after })
	return &Subscription{Instance: id, Backlog: e.withEnding(id, after, b.events[i:]), release: release}, nil
}

// Cancel stops the run in progress on an instance; it ends "cancelled".
func (e *Engine) Cancel(ctx context.Context, id string) error {
	e.mu.Lock()
	run := e.live[id]
	e.mu.Unlock()
	var inst flow.Instance
	if run == nil {
		var err error
		if inst, err = e.Store.Get(ctx, id); err != nil {
			return err
		}
	}
	switch {
	case e.endingOf(id) != nil:
		// Its run has ended, failed, though its log does not say so yet
		// (and it may not have let go of the instance yet): recording
		// that ends it.
		return e.savedEnding(id)
	case run != nil:
		run.cancel(context.Canceled)
		return nil
	}
	events, err := e.Store.Events(ctx, id, 0)
	switch status := flow.Replay(events).Status; {
	case err == nil && status == flow.StatusAwaitingToolResult:
		return e.abandon(ctx, id, inst.FlowID, "cancelled")
	case e.Replicas != nil && err != nil:
		return err
	case e.Replicas != nil && status == flow.StatusRunning:
		// Running elsewhere, or queued: its replica is told. A run whose
		// done is written is over, whatever its claim says.
		return e.Replicas.Cancel(ctx, id)
	}
	return fmt.Errorf("instance %s: %w", id, flow.ErrIdle)
}

// abandon ends an instance's wait for its client's tool results: each call
// is answered "not run: " and why, and the instance is cancelled.
func (e *Engine) abandon(ctx context.Context, id, flowID, why string) error {
	return e.Run(ctx, Request{FlowID: flowID, InstanceID: id, Continue: true, Options: flow.RunOptions{Abandon: why}}, nil)
}

// ExpireWaits ends, until ctx is done, the waits for clients' tool results
// that have lasted longer than wait (SPEC §4a: --tool-wait): each call is
// answered "not run: the wait for the client's results expired".
func (e *Engine) ExpireWaits(ctx context.Context, wait time.Duration) {
	tick := time.NewTicker(min(wait/10+time.Second, time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		list, err := e.Store.List(ctx, flow.ListOptions{Status: flow.StatusAwaitingToolResult})
		if err != nil {
			e.logger().Warn("waits for tool results not checked", "err", err)
			continue
		}
		for _, inst := range list {
			if time.Since(inst.UpdatedAt) < wait {
				continue
			}
			err := e.abandon(ctx, inst.ID, inst.FlowID, "the wait for the client's results expired")
			if err != nil && !errors.Is(err, flow.ErrBusy) && !errors.Is(err, flow.ErrNoWait) && !errors.Is(err, flow.ErrClosed) {
				e.logger().Warn("an expired wait for tool results not ended", "instance_id", inst.ID, "err", err)
			}
		}
	}
}

// Close refuses new runs and waits for those in flight until ctx is done.
// The rest it stops where they are: their logs end without done, and
// Recover resumes them at the next start.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	finished := make(chan struct{})
	go func() { e.wg.Wait(); close(finished) }()
	select {
	case <-finished:
		e.recordEndings()
		return nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	for _, run := range e.live {
		run.cancel(flow.ErrClosed)
	}
	e.mu.Unlock()
	<-finished
	e.recordEndings()
	return errors.New("flow.engine: runs interrupted at shutdown")
}

// recordEndings tries once more to record the endings of failed runs that
// are not recorded yet, and names those it cannot: the next start finds
// their runs unfinished, and resumes them.
func (e *Engine) recordEndings() {
	e.mu.Lock()
	ids := slices.Collect(maps.Keys(e.unsaved))
	e.mu.Unlock()
	for _, id := range ids {
		if err := e.savedEnding(id); err != nil {
			e.logger().Error("a failed run's ending is not recorded: the next start resumes it", "instance_id", id, "err", err)
		}
	}
}

// Events are the instance's recorded events after the given id and, where
// its last run failed and its log does not say so yet, that run's ending.
func (e *Engine) Events(ctx context.Context, id string, after int64) ([]flow.Event, error) {
	events, err := e.Store.Events(ctx, id, after)
	if err != nil {
		return nil, err
	}
	return e.withEnding(id, after, events), nil
}

// withEnding is events, read from the instance's log, with the ending of
// its last run after them where that run failed and its log does not say
// so yet: a reader is told as the run's own client was. events may be
// shared: what is added goes to a copy.
func (e *Engine) withEnding(id string, after int64, events []flow.Event) []flow.Event {
	if u := e.endingOf(id); u != nil {
		for _, ev := range u.events {
			if ev.ID > after {
				events = append(slices.Clip(events), ev)
			}
		}
	}
	return events
}

func (e *Engine) logger() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

// Create makes a new, empty instance of a flow.
func (e *Engine) Create(ctx context.Context, flowID string) (flow.Instance, error) {
	if e.Flows[flowID] == nil {
		return flow.Instance{}, fmt.Errorf("flow %q: %w", flowID, flow.ErrNotFound)
	}
	inst := flow.Instance{ID: flow.NewID(), FlowID: flowID, CreatedAt: time.Now().UTC()}
	if err := flow.Wait(func(done func(error)) { e.Store.Create(inst, done) }); err != nil {
		return flow.Instance{}, fmt.Errorf("create instance: %w", err)
	}
	return inst, nil
}

// DefaultMaxInput is MaxInput's default: 16 MiB of input in flight. A
// guarded_chat run held about 30 times its input at its peak in the load
// benchmark (README, "Memory under load").
const DefaultMaxInput = 16 << 20

func (e *Engine) maxInput() int64 {
	if e.MaxInput > 0 {
		return e.MaxInput
	}
	return DefaultMaxInput
}

// size is a number of bytes as a message says it.
func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// maxRuns is how many runs may be in flight at once.
func (e *Engine) maxRuns() int {
	if e.MaxRuns > 0 {
		return e.MaxRuns
	}
	return 256
}

// Room reports whether the engine would take one more run now.
func (e *Engine) Room() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	max := e.maxRuns()
	return !e.closed && len(e.live) < max
}

// Closed reports whether the engine has stopped taking runs.
func (e *Engine) Closed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}
