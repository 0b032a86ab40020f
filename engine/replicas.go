package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"superego/flow"
)

// Replicas shares runs between engines on one database (docs/operations.md). A run
// is durable, with the job that runs it, from its first write; it runs on
// one replica at a time, the one that holds its claim; when that replica
// stops renewing the claim (it died), another takes the run over and goes
// on from its log, as after a crash. Any replica's clients may follow any
// run, live, from the log.
type Replicas interface {
	// Dispatch writes, in one transaction, a new instance (if d names
	// one), the run's opening events and its job. With d.Here the run is
	// claimed for this replica, which runs it at once; without, the first
	// replica with room takes it. ErrBusy: another run of the instance
	// got there first.
	Dispatch(ctx context.Context, d Dispatch) (*Claim, error)
	// Cancel asks whichever replica runs an instance's run, or will, to
	// stop it; ErrIdle when none does.
	Cancel(ctx context.Context, instance string) error
	// Watch wakes when an instance's log grows, whichever replica wrote it.
	Watch(instance string) (wake <-chan struct{}, stop func())
}

// Dispatch is a run to write and queue.
type Dispatch struct {
	Instance   *flow.Instance // a new instance, created with the run; nil for an existing one
	InstanceID string
	Opening    []flow.Event // numbered
	Here       bool
}

// Claim is a replica's hold on an instance's run.
type Claim struct {
	Stop <-chan struct{} // closed when a cancel of the run arrives, from any replica
	// Lost is closed when this replica no longer holds the run: it stops
	// where it is and writes nothing more, for the replica that does.
	Lost    <-chan struct{}
	Resumed bool // the run had begun on a replica that stopped: it goes on with a run_start of its own
	// Release ends the claim: ended, with the run; otherwise the run was
	// interrupted (a shutdown), and another replica may take it at once.
	Release func(ended bool)
}

// dispatch starts a run the replicas' way: its opening and its job written
// together; run here when this engine has room, else by the first replica
// that has. watch, where set, sees the run's events on this goroutine, as
// Run's caller wants; otherwise a subscription does.
func (e *Engine) dispatch(ctx context.Context, req *Request, review *flow.Review, watch func(flow.Event)) (*Subscription, error) {
	f := e.Flows[req.FlowID]
	if f == nil {
		return nil, fmt.Errorf("flow %q: %w", req.FlowID, flow.ErrNotFound)
	}
	turn, err := e.turn(ctx, f, req.Options)
	if err != nil {
		return nil, err
	}
	d := Dispatch{InstanceID: req.InstanceID}
	var st flow.State
	if d.InstanceID == "" {
		d.InstanceID = flow.NewID()
		d.Instance = &flow.Instance{ID: d.InstanceID, FlowID: req.FlowID, CreatedAt: time.Now().UTC(), Tags: req.Options.Tags}
	} else {
		inst, err := e.Store.Get(ctx, d.InstanceID)
		if err != nil {
			return nil, err
		}
		if inst.FlowID != req.FlowID {
			return nil, fmt.Errorf("instance %s runs flow %q, not %q: %w", d.InstanceID, inst.FlowID, req.FlowID, flow.ErrInvalid)
		}
		events, err := e.Store.Events(ctx, d.InstanceID, 0)
		if err != nil {
			return nil, fmt.Errorf("start run on instance %s: %w", d.InstanceID, err)
		}
		st = flow.Replay(events)
	}
	if st.Status == flow.StatusRunning {
		return nil, fmt.Errorf("instance %s: %w", d.InstanceID, flow.ErrBusy)
	}
	if err := e.goOn(ctx, &turn, d.InstanceID, st, *req, review); err != nil {
		return nil, err
	}
	if err := req.checkPrior(d.Instance != nil); err != nil {
		return nil, err
	}
	d.Opening = e.Exec.Opening(turn)
	now := time.Now().UTC()
	for i := range d.Opening {
		d.Opening[i].ID, d.Opening[i].Time = st.LastID+int64(i)+1, now
	}
	run := newLiveRun()
	run.input = req.size() // past MaxInput here, the run is a job for a replica with room
	switch err := e.reserve(d.InstanceID, run); {
	case err == nil:
		d.Here = true
	case err == flow.ErrClosed:
		return nil, err
	}
	claim, err := e.Replicas.Dispatch(ctx, d)
	if err != nil {
		if d.Here {
			e.release(d.InstanceID)
			e.wg.Done()
		}
		return nil, err
	}
	// The run goes on from its opening, which is in the log now.
	turn.Steps = slices.Clip(st.Steps)
	for _, ev := range d.Opening {
		if s, ok := ev.Data.(*flow.Step); ok {
			turn.Steps = append(turn.Steps, *s)
		}
	}
	turn.Resume, turn.Opened, turn.Prior = true, true, nil
	if !d.Here {
		sub := e.follow(d.InstanceID, st.LastID, d.Opening, d.Opening[0].ID)
		if watch == nil {
			return sub, nil
		}
		defer sub.Close()
		for ev := range sub.Events(context.Background()) {
			watch(ev)
		}
		return nil, nil
	}
	run.seq = d.Opening[len(d.Opening)-1].ID
	if watch != nil {
		for _, ev := range d.Opening {
			watch(ev)
		}
		run.watch = watch
		e.host(run, &turn, claim)
		return nil, nil
	}
	run.mu.Lock()
	sub := run.subscribe(d.Opening, 0)
	sub.Instance = d.InstanceID
	run.mu.Unlock()
	go e.host(run, &turn, claim)
	return sub, nil
}

// Take runs here an instance's run that claim holds: one dispatched to the
// first replica with room, or one whose replica stopped. ErrTooMany when
// this engine has no room: the caller gives the claim back.
func (e *Engine) Take(ctx context.Context, instance string, claim *Claim) error {
	inst, err := e.Store.Get(ctx, instance)
	if err != nil {
		return err
	}
	events, err := e.Store.Events(ctx, instance, 0)
	if err != nil {
		return err
	}
	held, err := e.Store.Held(ctx, instance)
	if err != nil {
		return err
	}
	st := flow.Replay(events)
	if st.Status != flow.StatusRunning {
		claim.Release(true) // over already
		return nil
	}
	f := e.Flows[inst.FlowID]
	var turn Turn
	if f != nil {
		turn, err = e.turn(ctx, f, st.Options)
	}
	run := newLiveRun()
	if err := e.reserve(instance, run); err != nil {
		return err
	}
	run.seq = st.LastID
	if f == nil || err != nil {
		reason := fmt.Sprintf("flow %q is not loaded here, so the run cannot go on", inst.FlowID)
		if err != nil {
			reason = err.Error()
		}
		turn = Turn{FlowID: inst.FlowID, InstanceID: instance, RunID: flow.NewID(), Def: &flow.Definition{}, Steps: st.Steps}
		go e.failRun(run, turn, claim, reason)
		return nil
	}
	turn.InstanceID, turn.RunID, turn.Steps, turn.Held, turn.Resume, turn.Opened, turn.Unfinished = instance, flow.NewID(), st.Steps, held, true, !claim.Resumed, st.Unfinished
	go e.host(run, &turn, claim)
	e.runLog(&turn).Info("took over a run", "resumed", claim.Resumed)
	return nil
}

// failRun ends a run that cannot go on here, with the reason, what it held
// withheld.
func (e *Engine) failRun(run *liveRun, turn Turn, claim *Claim, reason string) {
	defer e.wg.Done()
	defer e.release(turn.InstanceID)
	defer run.end()
	defer claim.Release(true)
	info := RunInfo{FlowID: turn.FlowID, InstanceID: turn.InstanceID, RunID: turn.RunID, Resumed: true}
	ctx := e.Exec.Observe.runStarted(context.Background(), info)
	defer e.Exec.Observe.runEnded(ctx, info, Outcome{Status: flow.StatusFailed, Err: errors.New(reason)})
	end := []flow.Event{{Name: flow.EventError, Data: flow.ErrorData{Code: "internal", Message: reason}}, {Name: flow.EventDone, Data: flow.Done{InstanceID: turn.InstanceID, Status: flow.StatusFailed, Usage: &flow.RunUsage{}}}}
	if err := e.publish(turn.InstanceID, run, end, true); err != nil {
		e.runLog(&turn).Error("run's end not recorded", "err", err)
	}
	e.runLog(&turn).Warn("run failed", "reason", reason)
}

// follow is a subscription to a run that runs on another replica: backlog,
// then the log as it grows, until the done of the run that started at
// event start.
func (e *Engine) follow(id string, after int64, backlog []flow.Event, start int64) *Subscription {
	wake, stop := e.Replicas.Watch(id)
	r := &remote{store: e.Store, id: id, wake: wake, after: after, start: start}
	for _, ev := range backlog {
		r.saw(ev)
	}
	return &Subscription{Instance: id, Backlog: backlog, release: stop, remote: r}
}

// remote reads the log of a run that runs elsewhere.
type remote struct {
	store flow.Store
	id    string
	wake  <-chan struct{}
	after int64 // the last event read
	start int64 // the run_start of the run followed
	ended bool
}

func (r *remote) saw(ev flow.Event) {
	r.after = ev.ID
	switch {
	case ev.Name == flow.EventRunStart && ev.ID > r.start:
		r.start = ev.ID
	case ev.Name == flow.EventDone && ev.ID > r.start:
		r.ended = true
	}
}

// events yields the log's events after those read, whenever the log
// grows, until the run's done.
func (r *remote) events(ctx context.Context, yield func(flow.Event) bool) {
	for !r.ended {
		events, err := r.store.Events(ctx, r.id, r.after)
		if err != nil {
			return // the stream ends; the client may come back with Last-Event-ID
		}
		for _, ev := range events {
			r.saw(ev)
			if !yield(ev) || r.ended {
				return
			}
		}
		select {
		case <-r.wake:
		case <-ctx.Done():
			return
		}
	}
}
