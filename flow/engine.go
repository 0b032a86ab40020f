package flow

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Flow is a loaded, valid flow definition.
type Flow struct {
	ID  string
	Def *Definition
}

// Engine starts runs of flows on instances, lets clients watch them, and
// owns their goroutines: a run goes on when the client that started it goes
// away, and ends when it ends, is cancelled, or the engine closes.
type Engine struct {
	Flows   map[string]*Flow
	Exec    *Executor
	Store   Store
	MaxRuns int          // runs in flight at once; 0 means 256
	Log     *slog.Logger // default slog.Default()
	// Replicas, where set, shares runs with other engines on the same
	// database: they are written with a job, and run where there is room.
	Replicas Replicas

	variants variants

	mu       sync.Mutex
	live     map[string]*liveRun // by instance id
	backlogs map[string]*backlog // idle instances' logs, shared by their readers
	gen      int64               // counts runs reserved and released: a backlog read across one may be stale
	closed   bool
	wg       sync.WaitGroup
}

// backlog is an idle instance's log as its subscribers read it: read once,
// shared, each subscriber with a cursor, and dropped when the last one goes.
type backlog struct {
	events []Event
	refs   int
}

type liveRun struct {
	ctx    context.Context // the run's own: it outlives the request that started it
	cancel context.CancelCauseFunc

	mu      sync.Mutex // orders numbering, delivery and subscribing
	seq     int64
	pending []pendingEvent // published, not yet delivered: in order
	err     error          // the first write that failed; the run fails at its next event
	drained sync.Cond      // pending became empty, or a held write ended
	holding int            // held events whose writes are not done
	log     []Event        // delivered events, kept while the run has subscribers to read them
	ended   bool           // log is complete
	subs    map[*Subscription]struct{}
	watch   func(Event) // Run's watcher, if any: called in deliver
}

// pendingEvent waits until it, and every event before it, is durable.
type pendingEvent struct {
	ev    Event
	ready bool
}

func newLiveRun() *liveRun {
	// Sized for a typical run, so its events rarely copy as they arrive.
	run := &liveRun{subs: map[*Subscription]struct{}{}, pending: make([]pendingEvent, 0, 8)}
	run.drained.L = &run.mu
	return run
}

// Subscription reads an instance's events: its Backlog, then the live run's
// events as they are delivered. Subscribers share the run's own list of
// events, each with a cursor, so a slow reader costs nothing and loses
// nothing: it reads at its own pace, until the run ends.
type Subscription struct {
	Instance string
	Backlog  []Event
	run      *liveRun
	next     int           // index in run.log
	after    int64         // live events up to this id came in the backlog
	wake     chan struct{} // one token: events arrived, or the run ended
	release  func()        // lets go of a shared backlog, or of a remote run's wake-ups
	remote   *remote       // a run that runs on another replica
}

// Events iterates over the subscription's events until the run ends or ctx
// is done.
func (s *Subscription) Events(ctx context.Context) iter.Seq[Event] {
	return func(yield func(Event) bool) {
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
func (s *Subscription) take() (ev Event, ok, ended bool) {
	s.run.mu.Lock()
	defer s.run.mu.Unlock()
	for s.next < len(s.run.log) {
		ev = s.run.log[s.next]
		s.next++
		if ev.ID > s.after {
			return ev, true, false
		}
	}
	return Event{}, false, s.run.ended
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
	s.run.mu.Unlock()
}

// Idle reports whether the subscription has no live run behind it: all it
// will ever deliver is its Backlog.
func (s *Subscription) Idle() bool { return s.run == nil && s.remote == nil }

// Start begins a run of a flow, on an instance or, where req names none,
// on a new one; the subscription it returns sees the whole run.
func (e *Engine) Start(ctx context.Context, req Request) (*Subscription, error) {
	if e.Replicas != nil {
		return e.dispatch(ctx, req, nil, nil)
	}
	var sub *Subscription
	run, turn, err := e.start(ctx, req, nil, func(run *liveRun) { sub = run.subscribe(nil, 0) })
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
func (e *Engine) StartReview(ctx context.Context, instanceID string, review Review) (*Subscription, error) {
	inst, err := e.Store.Get(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	if e.Replicas != nil {
		return e.dispatch(ctx, Request{FlowID: inst.FlowID, InstanceID: instanceID}, &review, nil)
	}
	var sub *Subscription
	run, turn, err := e.start(ctx, Request{FlowID: inst.FlowID, InstanceID: instanceID}, &review, func(run *liveRun) { sub = run.subscribe(nil, 0) })
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
func (e *Engine) Run(ctx context.Context, req Request, watch func(Event)) error {
	if e.Replicas != nil {
		_, err := e.dispatch(ctx, req, nil, watch)
		return err
	}
	run, turn, err := e.start(ctx, req, nil, func(run *liveRun) { run.watch = watch })
	if err != nil {
		return err
	}
	e.run(run, turn, nil)
	return nil
}

// start reserves the instance and lets attach hook a reader onto the run
// before its first event; the caller runs it.
func (e *Engine) start(ctx context.Context, req Request, review *Review, attach func(*liveRun)) (*liveRun, Turn, error) {
	f := e.Flows[req.FlowID]
	if f == nil {
		return nil, Turn{}, fmt.Errorf("flow %q: %w", req.FlowID, ErrNotFound)
	}
	instanceID := req.InstanceID
	isNew := instanceID == ""
	if isNew {
		instanceID = NewID()
	} else if inst, err := e.Store.Get(ctx, instanceID); err != nil {
		return nil, Turn{}, err
	} else if inst.FlowID != req.FlowID {
		return nil, Turn{}, fmt.Errorf("instance %s runs flow %q, not %q: %w", instanceID, inst.FlowID, req.FlowID, ErrInvalid)
	}
	for i, s := range req.Prior {
		if s.Role != RoleUser && s.Role != RoleAssistant || !isNew {
			return nil, Turn{}, fmt.Errorf("prior message %d: a new instance's messages are user or assistant ones: %w", i, ErrInvalid)
		}
	}
	turn, err := e.turn(ctx, f, req.Options)
	if err != nil {
		return nil, Turn{}, err
	}
	run := newLiveRun()
	if err := e.reserve(instanceID, run); err != nil {
		return nil, Turn{}, err
	}
	var st State
	if isNew {
		// Queued ahead of the run's events: they wait for it, and a
		// failure fails the run at its next event.
		e.Store.Create(Instance{ID: instanceID, FlowID: req.FlowID, CreatedAt: time.Now().UTC()}, run.failed)
	} else {
		events, err := e.Store.Events(ctx, instanceID, 0)
		if err != nil {
			e.release(instanceID)
			e.wg.Done()
			return nil, Turn{}, fmt.Errorf("start run on instance %s: %w", instanceID, err)
		}
		st = Replay(events)
	}
	var held []Event
	if review != nil {
		held, err = e.Store.Held(ctx, instanceID)
		if err == nil {
			err = answering(st, held, review)
		}
		if err != nil {
			e.release(instanceID)
			e.wg.Done()
			return nil, Turn{}, fmt.Errorf("instance %s: %w", instanceID, err)
		}
	}
	run.mu.Lock()
	attach(run)
	run.seq = st.LastID
	run.mu.Unlock()
	turn.InstanceID, turn.RunID, turn.Steps, turn.Input, turn.Prior, turn.Options.Review, turn.Held = instanceID, NewID(), st.Steps, req.Input, req.Prior, review, held
	if review != nil {
		turn.Options.Stack = st.Options.Stack // a person's answer goes on with the turn it answers, under its stack
	}
	return run, turn, nil
}

// answering checks that a person's answer answers a review the instance
// waits for, and names the review where it is the only one.
func answering(st State, held []Event, review *Review) error {
	if st.Status != StatusAwaitingReview {
		return fmt.Errorf("it is %s: %w", st.Status, ErrNoReview)
	}
	steps := st.Steps
	for _, ev := range held {
		if s, ok := ev.Data.(Step); ok {
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
		return fmt.Errorf("%d reviews wait (%s): name one with review_id: %w", len(pending), strings.Join(ids, ", "), ErrNoReview)
	case review.ReviewID == "" && len(pending) == 1:
		review.ReviewID = ids[0]
	case review.ReviewID != "" && !slices.Contains(ids, review.ReviewID):
		return fmt.Errorf("review %q does not wait (reviews waiting: %s): %w", review.ReviewID, strings.Join(ids, ", "), ErrNoReview)
	}
	return nil
}

// turn is a run of flow f with options: its variant's definition, and the
// record a replay walks.
func (e *Engine) turn(ctx context.Context, f *Flow, opt RunOptions) (Turn, error) {
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
func (e *Engine) run(run *liveRun, turn Turn, claim *Claim) {
	defer e.wg.Done()
	defer e.release(turn.InstanceID)
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
				run.cancel(ErrClosed) // as a shutdown does: no ending written
			case <-stopped:
			}
		}()
	}
	defer e.endRun(run, turn)
	defer func() {
		if p := recover(); p != nil {
			e.runLog(turn).Error("run stopped by a panic; it resumes at the next start", "panic", fmt.Sprint(p))
		}
	}()
	sink := Sink{
		Emit:   func(evs ...Event) error { return e.publish(turn.InstanceID, run, evs, false) },
		Settle: func(evs ...Event) error { return e.publish(turn.InstanceID, run, evs, true) },
		Hold: func(ev Event) error {
			run.mu.Lock()
			run.holding++
			run.mu.Unlock()
			e.Store.Hold(turn.InstanceID, ev, run.held)
			run.mu.Lock()
			defer run.mu.Unlock()
			return run.err
		},
		Sync: run.sync,
	}
	info := RunInfo{FlowID: turn.FlowID, InstanceID: turn.InstanceID, RunID: turn.RunID, Resumed: turn.Resume && !turn.Opened}
	ctx := e.Exec.Observe.runStarted(run.ctx, info)
	out := e.Exec.Run(ctx, turn, sink)
	e.Exec.Observe.runEnded(ctx, info, out)
	ended = out.Status != statusInterrupted
	lost := false
	if claim != nil {
		select {
		case <-claim.Lost:
			lost = true
		default:
		}
	}
	switch {
	case out.Status == statusInterrupted && lost:
		e.runLog(turn).InfoContext(ctx, "run stopped: this replica lost its lease; the replica that holds it now resumes it")
	case out.Status == statusInterrupted:
		e.runLog(turn).InfoContext(ctx, "run interrupted by shutdown; it resumes when the server starts again")
	case out.Err != nil:
		attrs := []any{"code", ErrorCode(out.Err), "err", out.Err}
		if p, ok := errors.AsType[*panicked](out.Err); ok {
			attrs = append(attrs, "stack", string(p.stack))
		}
		e.runLog(turn).WarnContext(ctx, "run failed", attrs...)
	}
}

// runLog is the logger of a run's lines: each names the run and its
// instance. It is made when a line is written, not with every run.
func (e *Engine) runLog(turn Turn) *slog.Logger {
	return e.logger().With("run_id", turn.RunID, "instance_id", turn.InstanceID, "flow_id", turn.FlowID)
}

// end waits until every event of the run is durable, then tells its
// subscribers there will be no more. It returns the first write that
// failed.
func (run *liveRun) end() error {
	run.cancel(nil)
	run.mu.Lock()
	defer run.mu.Unlock()
	for len(run.pending) > 0 {
		run.drained.Wait() // the log is whole before the instance is free again
	}
	run.ended = true
	run.wakeAll()
	return run.err
}

// endRun ends a run as end does, and logs a write that failed.
func (e *Engine) endRun(run *liveRun, turn Turn) {
	if err := run.end(); err != nil {
		e.runLog(turn).Error("run's events not all recorded", "err", err)
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
func (e *Engine) Recover(ctx context.Context, only func(RunOptions) bool) (int, error) {
	if e.Replicas != nil {
		return 0, nil // a run's job resumes it, on whichever replica takes it
	}
	list, err := e.Store.List(ctx, ListOptions{Status: StatusRunning})
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	resumed := 0
	for _, inst := range list {
		events, err := e.Store.Events(ctx, inst.ID, 0)
		if errors.Is(err, ErrCorrupt) {
			e.logger().Error("interrupted run cannot resume: its log does not read", "instance_id", inst.ID, "flow_id", inst.FlowID, "err", err)
			continue
		}
		if err != nil {
			return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
		}
		st := Replay(events) // the options are the interrupted run's, which it keeps
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
			end := []Event{
				{ID: st.LastID + 1, Name: EventError, Time: time.Now().UTC(), Data: ErrorData{"internal", reason}},
				{ID: st.LastID + 2, Name: EventDone, Time: time.Now().UTC(), Data: Done{InstanceID: inst.ID, Status: StatusFailed}},
			}
			// Held events stay unseen: the run ends without their judgement.
			if err := Wait(func(done func(error)) { e.Store.Settle(inst.ID, end, done) }); err != nil {
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
		turn.InstanceID, turn.RunID, turn.Steps, turn.Held, turn.Resume, turn.Unfinished = inst.ID, NewID(), st.Steps, held, true, st.Unfinished
		go e.run(run, turn, nil)
		e.runLog(turn).Info("resuming interrupted run", "steps", len(st.Steps), "held", len(held))
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
		return ErrClosed
	case e.live[id] != nil:
		return fmt.Errorf("instance %s: %w", id, ErrBusy)
	case len(e.live) >= max:
		return fmt.Errorf("%d runs in flight: %w", len(e.live), ErrTooMany)
	}
	if e.live == nil {
		e.live = map[string]*liveRun{}
	}
	run.ctx, run.cancel = context.WithCancelCause(context.Background())
	e.live[id] = run
	e.gen++
	delete(e.backlogs, id) // the run makes it stale
	e.wg.Add(1)
	return nil
}

func (e *Engine) release(id string) {
	e.mu.Lock()
	delete(e.live, id)
	e.gen++
	delete(e.backlogs, id)
	e.mu.Unlock()
}

// publish numbers events and queues them for the store, as one write
// (partial outputs are not stored); with settle, that write also ends the
// instance's held turn. Events reach subscribers in order, each once it
// and all before it are durable: a partial on its own at once, events of a
// group together. publish reports the first write that failed.
func (e *Engine) publish(id string, run *liveRun, evs []Event, settle bool) error {
	run.mu.Lock()
	queued := time.Now() // with its monotonic reading, for the observer
	now := queued.UTC()
	first := run.seq + 1
	stored := make([]Event, 0, len(evs))
	for i := range evs {
		run.seq++
		evs[i].ID, evs[i].Time = run.seq, now
		if evs[i].Name != EventPartial {
			stored = append(stored, evs[i])
		}
	}
	last, ready := run.seq, len(stored) == 0
	for _, ev := range evs {
		run.pending = append(run.pending, pendingEvent{ev: ev, ready: ready})
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

// written marks events first to last durable, or failed, and delivers
// what is ready.
func (run *liveRun) written(first, last int64, err error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if err != nil && run.err == nil {
		run.err = fmt.Errorf("record events %d to %d: %w", first, last, err)
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
	if run.err == nil {
		run.err = err
	}
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

func (run *liveRun) wakeAll() {
	for s := range run.subs {
		select {
		case s.wake <- struct{}{}:
		default: // it has a token already
		}
	}
}

// subscribe follows the run from its next delivered event. run.mu is held.
func (run *liveRun) subscribe(backlog []Event, after int64) *Subscription {
	if n := len(backlog); n > 0 {
		after = backlog[n-1].ID
	}
	s := &Subscription{Backlog: backlog, run: run, next: len(run.log), after: after, wake: make(chan struct{}, 1)}
	run.subs[s] = struct{}{}
	return s
}

// Subscribe returns the instance's stored events after the given id and,
// while a run is in progress, its live events. The store is read without
// holding the run back: the subscription joins the run first, and skips
// the live events its read of the store already had.
func (e *Engine) Subscribe(ctx context.Context, id string, after int64) (*Subscription, error) {
	e.mu.Lock()
	run, gen := e.live[id], e.gen
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
		if !run.ended {
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
		if st := Replay(events); st.Status == StatusRunning {
			i := sort.Search(len(events), func(i int) bool { return events[i].ID > after })
			return e.follow(id, after, events[i:], st.RunStartID), nil
		}
	}
	return e.idle(ctx, id, after, gen)
}

// idle subscribes to an instance with no run: its log, read once and shared
// by every reader while any reads it.
func (e *Engine) idle(ctx context.Context, id string, after int64, gen int64) (*Subscription, error) {
	e.mu.Lock()
	b := e.backlogs[id]
	if b != nil {
		b.refs++
	}
	e.mu.Unlock()
	if b == nil {
		events, err := e.Store.Events(ctx, id, 0)
		if err != nil {
			return nil, err
		}
		b = &backlog{events: events, refs: 1}
		e.mu.Lock()
		switch shared := e.backlogs[id]; {
		case shared != nil:
			shared.refs++
			b = shared
		case e.gen == gen && e.live[id] == nil: // no run began or ended since: the read is whole
			if e.backlogs == nil {
				e.backlogs = map[string]*backlog{}
			}
			e.backlogs[id] = b
		}
		e.mu.Unlock()
	}
	i := sort.Search(len(b.events), func(i int) bool { return b.events[i].ID > after })
	return &Subscription{Instance: id, Backlog: b.events[i:], release: func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if b.refs--; b.refs == 0 && e.backlogs[id] == b {
			delete(e.backlogs, id)
		}
	}}, nil
}

// Cancel stops the run in progress on an instance; it ends "cancelled".
func (e *Engine) Cancel(ctx context.Context, id string) error {
	e.mu.Lock()
	run := e.live[id]
	e.mu.Unlock()
	if run == nil {
		if _, err := e.Store.Get(ctx, id); err != nil {
			return err
		}
	}
	switch {
	case run != nil:
		run.cancel(context.Canceled)
		return nil
	case e.Replicas != nil:
		// Running elsewhere, or queued: its replica is told. A run whose
		// done is written is over, whatever its claim says.
		events, err := e.Store.Events(ctx, id, 0)
		if err != nil {
			return err
		}
		if Replay(events).Status == StatusRunning {
			return e.Replicas.Cancel(ctx, id)
		}
	}
	return fmt.Errorf("instance %s: %w", id, ErrIdle)
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
		return nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	for _, run := range e.live {
		run.cancel(ErrClosed)
	}
	e.mu.Unlock()
	<-finished
	return errors.New("flow.engine: runs interrupted at shutdown")
}

func (e *Engine) logger() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

// Create makes a new, empty instance of a flow.
func (e *Engine) Create(ctx context.Context, flowID string) (Instance, error) {
	if e.Flows[flowID] == nil {
		return Instance{}, fmt.Errorf("flow %q: %w", flowID, ErrNotFound)
	}
	inst := Instance{ID: NewID(), FlowID: flowID, CreatedAt: time.Now().UTC()}
	if err := Wait(func(done func(error)) { e.Store.Create(inst, done) }); err != nil {
		return Instance{}, fmt.Errorf("create instance: %w", err)
	}
	return inst, nil
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
