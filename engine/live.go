package engine

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"superego/flow"
)

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
