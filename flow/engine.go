package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

	mu     sync.Mutex
	live   map[string]*liveRun // by instance id
	closed bool
	wg     sync.WaitGroup
}

type liveRun struct {
	ctx    context.Context // the run's own: it outlives the request that started it
	cancel context.CancelCauseFunc

	mu      sync.Mutex // orders numbering, delivery and subscribing
	seq     int64
	subs    map[*Subscription]struct{}
	pending []*pendingEvent // published, not yet delivered: in order
	err     error           // the first write that failed; the run fails at its next event
	drained sync.Cond       // pending became empty
}

// pendingEvent waits until it, and every event before it, is durable.
type pendingEvent struct {
	ev    Event
	ready bool
}

func newLiveRun() *liveRun {
	run := &liveRun{subs: map[*Subscription]struct{}{}}
	run.drained.L = &run.mu
	return run
}

// Subscription receives an instance's events: Backlog first, then C until
// it is closed, at the run's end or when the subscriber fell too far behind.
type Subscription struct {
	Backlog []Event
	C       <-chan Event
	c       chan Event
	run     *liveRun
	after   int64 // live events up to this id came in the backlog
}

// subBuffer is how many events a subscriber may lag behind before it is
// dropped: enough for a burst of deltas while a client's TCP window fills,
// without holding events for a client that has stopped reading (it can
// come back with Last-Event-ID). 256 events are 16 KB a subscriber.
const subBuffer = 256

// Start begins a run of flowID with input, on instanceID or, where that is
// "", on a new instance; the subscription it returns sees the whole run.
func (e *Engine) Start(ctx context.Context, flowID, instanceID, input string) (*Subscription, error) {
	f := e.Flows[flowID]
	if f == nil {
		return nil, fmt.Errorf("flow %q: %w", flowID, ErrNotFound)
	}
	isNew := instanceID == ""
	if isNew {
		instanceID = NewID()
	} else if inst, err := e.Store.Get(ctx, instanceID); err != nil {
		return nil, err
	} else if inst.FlowID != flowID {
		return nil, fmt.Errorf("instance %s runs flow %q, not %q: %w", instanceID, inst.FlowID, flowID, ErrInvalid)
	}
	run := newLiveRun()
	if err := e.reserve(instanceID, run); err != nil {
		return nil, err
	}
	var st State
	if isNew {
		// Queued ahead of the run's events: they wait for it, and a
		// failure fails the run at its next event.
		e.Store.Create(Instance{ID: instanceID, FlowID: flowID, CreatedAt: time.Now().UTC()}, run.failed)
	} else {
		events, err := e.Store.Events(ctx, instanceID, 0)
		if err != nil {
			e.release(instanceID)
			e.wg.Done()
			return nil, fmt.Errorf("start run on instance %s: %w", instanceID, err)
		}
		st = Replay(events)
	}
	sub := run.subscribe(nil, 0)
	e.launch(run, st.LastID, Turn{FlowID: flowID, Def: f.Def, InstanceID: instanceID, RunID: NewID(), Steps: st.Steps, Input: input})
	return sub, nil
}

// launch runs a turn on its own goroutine, owned by the engine; the run was
// reserved, so it is counted in flight and Close waits for it.
func (e *Engine) launch(run *liveRun, lastID int64, turn Turn) {
	run.seq = lastID
	go func() {
		defer e.wg.Done()
		out := e.Exec.Run(run.ctx, turn, func(ev Event) error { return e.publish(turn.InstanceID, run, ev) })
		switch {
		case out.Status == statusInterrupted:
			e.logger().Info("run interrupted by shutdown; it resumes when the server starts again", "instance", turn.InstanceID, "flow", turn.FlowID)
		case out.Err != nil:
			e.logger().Warn("run failed", "instance", turn.InstanceID, "flow", turn.FlowID, "code", ErrorCode(out.Err), "err", out.Err)
		}
		run.cancel(nil)
		run.mu.Lock()
		for len(run.pending) > 0 {
			run.drained.Wait() // the log is whole before the instance is free again
		}
		if run.err != nil {
			e.logger().Error("run's events not all recorded", "instance", turn.InstanceID, "err", run.err)
		}
		for s := range run.subs {
			close(s.c)
		}
		run.subs = nil
		run.mu.Unlock()
		e.release(turn.InstanceID)
	}()
}

// Recover finds the runs the store says are in progress, left so by a crash
// or a shutdown, and resumes each from its last recorded step; a run whose
// flow is gone ends failed, with the reason. It returns how many it resumed.
func (e *Engine) Recover(ctx context.Context) (int, error) {
	list, err := e.Store.List(ctx, ListOptions{Status: StatusRunning})
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	resumed := 0
	for _, inst := range list {
		events, err := e.Store.Events(ctx, inst.ID, 0)
		if err != nil {
			return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
		}
		st := Replay(events)
		f := e.Flows[inst.FlowID]
		if f == nil {
			reason := fmt.Sprintf("flow %q is not loaded any more, so the interrupted run cannot resume", inst.FlowID)
			for i, ev := range []Event{
				{Name: EventError, Data: ErrorData{"internal", reason}},
				{Name: EventDone, Data: Done{inst.ID, StatusFailed, ""}},
			} {
				ev.ID, ev.Time = st.LastID+int64(i)+1, time.Now().UTC()
				if err := Wait(func(done func(error)) { e.Store.Append(inst.ID, ev, done) }); err != nil {
					return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
				}
			}
			e.logger().Warn("interrupted run failed", "instance", inst.ID, "reason", reason)
			continue
		}
		run := newLiveRun()
		if err := e.reserve(inst.ID, run); err != nil {
			return resumed, fmt.Errorf("recover %s: %w", inst.ID, err)
		}
		e.launch(run, st.LastID, Turn{FlowID: inst.FlowID, Def: f.Def, InstanceID: inst.ID, RunID: NewID(), Steps: st.Steps, Resume: true})
		e.logger().Info("resuming interrupted run", "instance", inst.ID, "flow", inst.FlowID, "steps", len(st.Steps))
		resumed++
	}
	return resumed, nil
}

func (e *Engine) reserve(id string, run *liveRun) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	max := e.MaxRuns
	if max <= 0 {
		max = 256
	}
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
	e.wg.Add(1)
	return nil
}

func (e *Engine) release(id string) {
	e.mu.Lock()
	delete(e.live, id)
	e.mu.Unlock()
}

// publish numbers an event and queues it for the store (a partial output is
// not stored). Events reach subscribers in order, each once it and all
// before it are durable. publish reports the first write that failed.
func (e *Engine) publish(id string, run *liveRun, ev Event) error {
	run.mu.Lock()
	run.seq++
	ev.ID, ev.Time = run.seq, time.Now().UTC()
	p := &pendingEvent{ev: ev, ready: ev.Name == EventPartial}
	run.pending = append(run.pending, p)
	err := run.err
	if p.ready {
		run.deliver()
	}
	run.mu.Unlock()
	if !p.ready {
		// Not under run.mu: a store may call done before it returns.
		e.Store.Append(id, ev, func(err error) {
			run.mu.Lock()
			defer run.mu.Unlock()
			p.ready = true
			if err != nil && run.err == nil {
				run.err = fmt.Errorf("record event %d: %w", ev.ID, err)
			}
			run.deliver()
		})
	}
	return err
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

// deliver hands the ready prefix of pending to the subscribers, dropping
// any that lag too far behind. run.mu is held.
func (run *liveRun) deliver() {
	n := 0
	for ; n < len(run.pending) && run.pending[n].ready; n++ {
		ev := run.pending[n].ev
		for s := range run.subs {
			if ev.ID <= s.after {
				continue
			}
			select {
			case s.c <- ev:
			default:
				close(s.c)
				delete(run.subs, s)
			}
		}
	}
	if n > 0 {
		run.pending = append(run.pending[:0], run.pending[n:]...)
	}
	if len(run.pending) == 0 {
		run.drained.Broadcast()
	}
}

func (run *liveRun) subscribe(backlog []Event, after int64) *Subscription {
	if n := len(backlog); n > 0 {
		after = backlog[n-1].ID
	}
	c := make(chan Event, subBuffer)
	s := &Subscription{Backlog: backlog, C: c, c: c, run: run, after: after}
	run.subs[s] = struct{}{}
	return s
}

// Subscribe returns the instance's stored events after the given id and,
// while a run is in progress, its live events.
func (e *Engine) Subscribe(ctx context.Context, id string, after int64) (*Subscription, error) {
	if _, err := e.Store.Get(ctx, id); err != nil {
		return nil, err
	}
	e.mu.Lock()
	run := e.live[id]
	e.mu.Unlock()
	if run != nil {
		run.mu.Lock()
		defer run.mu.Unlock()
		if run.subs != nil { // still running
			backlog, err := e.Store.Events(ctx, id, after)
			if err != nil {
				return nil, err
			}
			return run.subscribe(backlog, after), nil
		}
	}
	backlog, err := e.Store.Events(ctx, id, after)
	if err != nil {
		return nil, err
	}
	c := make(chan Event)
	close(c)
	return &Subscription{Backlog: backlog, C: c, c: c}, nil
}

// Unsubscribe stops a subscription's live events; call it when its client
// goes away before the run ends.
func (e *Engine) Unsubscribe(s *Subscription) {
	if s.run == nil {
		return
	}
	s.run.mu.Lock()
	defer s.run.mu.Unlock()
	if _, ok := s.run.subs[s]; ok {
		delete(s.run.subs, s)
		close(s.c)
	}
}

// Cancel stops the run in progress on an instance; it ends "cancelled".
func (e *Engine) Cancel(ctx context.Context, id string) error {
	if _, err := e.Store.Get(ctx, id); err != nil {
		return err
	}
	e.mu.Lock()
	run := e.live[id]
	e.mu.Unlock()
	if run == nil {
		return fmt.Errorf("instance %s: %w", id, ErrIdle)
	}
	run.cancel(context.Canceled)
	return nil
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

// Closed reports whether the engine has stopped taking runs.
func (e *Engine) Closed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// Idle reports whether the subscription has no live run behind it: all it
// will ever deliver is its Backlog.
func (s *Subscription) Idle() bool { return s.run == nil }
