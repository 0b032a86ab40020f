package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"superego/flow"
)

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
		go e.host(run, &turn, nil)
		e.runLog(&turn).Info("resuming interrupted run", "steps", len(st.Steps), "held", len(held))
		resumed++
	}
	return resumed, nil
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
