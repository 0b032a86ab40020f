package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
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
	go e.host(run, turn, nil)
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
	go e.host(run, turn, nil)
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
	e.host(run, turn, nil)
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
	if err := req.checkPrior(isNew); err != nil {
		return nil, nil, err
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
		// docs/gateway.md), waits for that rather than being refused.
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
		if s, ok := ev.Data.(*flow.Step); ok {
			steps = append(slices.Clip(steps), *s)
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

// host carries a reserved run to its end: the engine counts it in flight,
// and Close waits for it. A panic in the engine's own part of the run ends
// the run where it is, logged, and leaves every other run and the server
// going; the executor turns one in a node into a failed run. A claim, for
// a run shared between replicas, is released once the run's events are
// all written; a cancel from any replica stops the run.
func (e *Engine) host(run *liveRun, turn *Turn, claim *Claim) {
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
	ended = e.finish(ctx, run, turn, r.end(r.walk(ctx)), claim)
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
// that have lasted longer than wait (docs/gateway.md: --tool-wait): each call is
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
// benchmark (docs/benchmarks.md, "Memory under load").
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
