package experiment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"superego/engine"
	"superego/flow"
)

// Lab runs experiments on an engine. Every outcome is an ordinary instance
// of its condition's flow, tagged with the experiment, condition, sample
// and repeat, run by the engine as any other run is: its history, streams
// and export are the instance's. The lab keeps, beside the instances, each
// experiment's plan and, per outcome, its instance and, once its run has
// ended, its outcome; a run interrupted by a crash is resumed by the
// engine (Engine.Recover) and followed to its end, and an outcome finished
// is never run again.
type Lab struct {
	Engine *engine.Engine
	Store  Store
	// Env is what documents and replays may refer to; a document's dataset
	// paths are relative to Env.Dir.
	Env Env
	Log *slog.Logger
	// RateLimited, where set, counts the provider answers of 429 waited out
	// so far (backoff.Transport.Waits): progress reports how many an
	// experiment met.
	RateLimited func() int64

	mu      sync.Mutex
	runs    map[string]*run // experiments running in this process
	closed  bool
	wg      sync.WaitGroup
	reports reports // made from outcomes, while no report is kept
}

// Options are how one session of an experiment's runs goes.
type Options struct {
	NoCache     bool // make every model call again, the reply cache unused
	RetryErrors bool // run again the outcomes whose runs failed
}

// Sentinel causes that stop an experiment's session.
var (
	ErrCancelled = errors.New("experiment: cancelled")
	// ErrStopped stops a session to be resumed by hand; its experiment
	// is "stopped".
	ErrStopped = errors.New("experiment: stopped")
	// ErrShutdown stops a session with the server; its experiment stays
	// "running", and the server resumes it when it starts again.
	ErrShutdown = errors.New("experiment: the server is shutting down")
)

// ErrFinished is Start's answer for an experiment that has completed: it
// is not a failure, and a caller says so (RetryErrors runs its failed
// outcomes again).
var ErrFinished = errors.New("already finished: nothing is left to run")

// run is an experiment's session in this process.
type run struct {
	id     string
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error // why the session ended early; set before done closes

	mu       sync.Mutex
	progress Progress
	started  time.Time
	session  int   // outcomes finished in this session
	limited  int64 // RateLimited when the session started
	lastSent time.Time
	inflight map[string]bool // instances running
	watches  map[*Watch]struct{}
	writes   sync.WaitGroup // outcomes being recorded
	failure  error          // the first write that failed
}

// Progress is how far an experiment is.
type Progress struct {
	Done        int     `json:"done"`
	Total       int     `json:"total"`
	Errors      int     `json:"errors"`
	Rate        float64 `json:"rate"`  // outcomes a second, in this session
	ETA         float64 `json:"eta_s"` // seconds left at that rate; 0 when unknown
	RateLimited int64   `json:"rate_limited"`
}

// Create keeps a checked plan as a new experiment, "running", to be run by
// Start; running the same file again makes another experiment, whose
// model calls the reply cache serves.
func (l *Lab) Create(ctx context.Context, p *Plan) (Record, error) {
	if _, err := newJudge(l.Engine.Exec.Agent, p.RefusalJudge, l.Env.Providers); err != nil {
		return Record{}, fmt.Errorf("%w: %w", flow.ErrInvalid, err)
	}
	r := Record{ID: flow.NewID(), Name: p.Name, CreatedAt: time.Now().UTC(), Status: StatusRunning, Plan: p.Encode()}
	if err := l.Store.CreateExperiment(ctx, r); err != nil {
		return Record{}, fmt.Errorf("create experiment: %w", err)
	}
	return r, nil
}

// Start runs the experiment's outcomes that have not finished, in the
// background: Wait waits for them, Subscribe follows them, Cancel stops
// them.
func (l *Lab) Start(ctx context.Context, id string, opts Options) error {
	rec, plan, err := l.load(ctx, id)
	if err != nil {
		return err
	}
	if rec.Status == StatusCompleted && !opts.RetryErrors {
		return fmt.Errorf("experiment %s: %w", id, ErrFinished)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return flow.ErrClosed
	case l.runs[id] != nil:
		return fmt.Errorf("experiment %s: %w", id, flow.ErrBusy)
	}
	if rec.Status != StatusRunning || rec.Report != nil {
		rec.Status, rec.Report = StatusRunning, nil // the session may change the outcomes
		if err := l.Store.UpdateExperiment(ctx, rec); err != nil {
			return fmt.Errorf("experiment %s: %w", id, err)
		}
	}
	r := &run{id: id, done: make(chan struct{}), inflight: map[string]bool{}, watches: map[*Watch]struct{}{}, started: time.Now()}
	r.progress.Total = len(plan.Conditions) * len(plan.Samples) * plan.Repeats
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	if l.RateLimited != nil {
		r.limited = l.RateLimited()
	}
	if l.runs == nil {
		l.runs = map[string]*run{}
	}
	l.runs[id] = r
	l.wg.Add(1)
	go l.session(r, plan, opts)
	return nil
}

// Wait waits until the experiment's session in this process ends, or ctx
// does; it reports why a session ended early.
func (l *Lab) Wait(ctx context.Context, id string) error {
	l.mu.Lock()
	r := l.runs[id]
	l.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel stops an experiment: its runs in flight are cancelled, and no
// outcome is started; resume takes it up again.
func (l *Lab) Cancel(ctx context.Context, id string) error {
	rec, err := l.Store.Experiment(ctx, id)
	if err != nil {
		return err
	}
	if rec.Status == StatusCompleted || rec.Status == StatusCancelled {
		return fmt.Errorf("experiment %s is %s: %w", id, rec.Status, flow.ErrIdle)
	}
	l.mu.Lock()
	r := l.runs[id]
	l.mu.Unlock()
	if r != nil {
		r.stop(l.Engine, ErrCancelled)
		<-r.done
		return nil // the session recorded the status
	}
	rec.Status = StatusCancelled
	return l.Store.UpdateExperiment(ctx, rec)
}

// Stop ends every session with cause (ErrShutdown or ErrStopped), without
// waiting: runs in flight go on until the engine closes, which interrupts
// them, and a later session resumes them. Close waits.
func (l *Lab) Stop(cause error) {
	l.mu.Lock()
	l.closed = true
	runs := slices.Collect(maps.Values(l.runs))
	l.mu.Unlock()
	for _, r := range runs {
		r.cancel(cause)
	}
}

// Close waits for every session to end, once Stop has been called and the
// engine closed, or until ctx is done.
func (l *Lab) Close(ctx context.Context) error {
	finished := make(chan struct{})
	go func() { l.wg.Wait(); close(finished) }()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ResumeAll starts every experiment a crash or a shutdown left running: a
// server calls it when it starts, after the engine has recovered its runs.
func (l *Lab) ResumeAll(ctx context.Context) (int, error) {
	recs, err := l.Store.Experiments(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		if r.Status != StatusRunning {
			continue
		}
		if err := l.Start(ctx, r.ID, Options{}); err != nil {
			l.logger().Warn("experiment not resumed", "experiment", r.ID, "err", err)
			continue
		}
		n++
	}
	return n, nil
}

func (l *Lab) logger() *slog.Logger {
	if l.Log != nil {
		return l.Log
	}
	return slog.Default()
}

// stop ends the session: no outcome starts, and the runs in flight are
// cancelled where the cause is a cancel.
func (r *run) stop(engine *engine.Engine, cause error) {
	r.cancel(cause)
	if !errors.Is(cause, ErrCancelled) {
		return
	}
	r.mu.Lock()
	ids := slices.Collect(maps.Keys(r.inflight))
	r.mu.Unlock()
	for _, id := range ids {
		engine.Cancel(context.Background(), id) // a run that just ended is ErrIdle: nothing to do
	}
}

// job is one outcome to run.
type job struct {
	slot     Slot
	sample   Sample
	cond     Planned
	prior    string // the instance a session before began for the slot, if any
	retry    bool   // its outcome failed, and is run again on a new instance
	replayOf string // for a counterfactual: the instance of the run it replays
}

// session runs the outcomes of the plan that have not finished: first
// those of ordinary conditions, then those of counterfactual ones, which
// replay the runs of the first.
func (l *Lab) session(r *run, plan *Plan, opts Options) {
	defer l.wg.Done()
	err := l.runPlan(r, plan, opts)
	cause := context.Cause(r.ctx)
	rec, gerr := l.Store.Experiment(context.Background(), r.id)
	if gerr == nil {
		switch {
		case errors.Is(cause, ErrCancelled):
			rec.Status = StatusCancelled
		case errors.Is(cause, ErrStopped):
			rec.Status = StatusStopped
		case err == nil && cause == nil:
			rec.Status = StatusCompleted
		}
		var kerr error
		if rec.Status == StatusCompleted {
			// Its report is kept with the status: reading the experiment
			// reads no outcome until a session starts again. (A stop or a
			// cancel does not wait for one.)
			rec.Report, kerr = l.keepReport(context.Background(), rec, plan)
		}
		if rec.Status != StatusRunning {
			gerr = cmp.Or(l.Store.UpdateExperiment(context.Background(), rec), kerr)
		}
	}
	if err == nil {
		err = gerr
	}
	if err == nil && cause != nil && !errors.Is(cause, ErrCancelled) {
		err = cause
	}
	if err != nil && !errors.Is(err, ErrCancelled) {
		l.logger().Warn("experiment session ended", "experiment", r.id, "err", err)
	}
	l.mu.Lock()
	delete(l.runs, r.id)
	l.mu.Unlock()
	r.mu.Lock()
	r.err = err
	status := rec.Status
	p := r.snapshot()
	r.broadcast(Event{Name: EventDone, Data: DoneData{Status: status, Progress: p}})
	for w := range r.watches {
		w.end()
	}
	r.watches = nil
	r.mu.Unlock()
	close(r.done)
}

func (l *Lab) runPlan(r *run, plan *Plan, opts Options) error {
	kept, err := l.slots(r.ctx, r.id)
	if err != nil {
		return err
	}
	judge, err := newJudge(l.Engine.Exec.Agent, plan.RefusalJudge, l.Env.Providers)
	if err != nil {
		return err
	}
	unfinished := func(k slotState, ok bool) bool {
		return !ok || !k.finished || opts.RetryErrors && k.apart
	}
	r.mu.Lock()
	for _, k := range kept {
		if !k.finished || k.apart && opts.RetryErrors {
			continue // to run (again)
		}
		r.progress.Done++
		if k.failed {
			r.progress.Errors++
		}
	}
	r.mu.Unlock()
	r.publish(true)

	for _, replays := range []bool{false, true} {
		if replays {
			if !slices.ContainsFunc(plan.Conditions, func(c Planned) bool { return c.Replay != nil }) {
				break
			}
			// The runs a counterfactual replays are those just finished too.
			if kept, err = l.slots(r.ctx, r.id); err != nil {
				return err
			}
		}
		// The jobs are made as the workers take them: a plan of millions
		// of outcomes holds only those in flight.
		jobs := func(yield func(job) bool) {
			for rep := range plan.Repeats {
				for _, s := range plan.Samples {
					for _, c := range plan.Conditions {
						if (c.Replay != nil) != replays {
							continue
						}
						slot := Slot{Condition: c.Name, Label: s.Label, SampleID: s.ID, Repeat: rep}
						k, ok := kept[slot]
						if !unfinished(k, ok) {
							continue
						}
						j := job{slot: slot, sample: s, cond: c, prior: k.instance, retry: k.finished}
						if c.Replay != nil {
							src, ok := kept[Slot{Condition: c.Replay.From, Label: s.Label, SampleID: s.ID, Repeat: rep}]
							if !ok || !src.finished {
								continue // nothing recorded to replay; counted as not done
							}
							j.replayOf = src.instance
						}
						if !yield(j) {
							return
						}
					}
				}
			}
		}
		err := l.pool(r, plan.Concurrency, jobs, judge, opts)
		r.writes.Wait() // the outcomes a counterfactual replays are recorded, and the session's are before it ends
		r.mu.Lock()
		failure := r.failure
		r.mu.Unlock()
		if err = cmp.Or(err, failure); err != nil {
			return err
		}
		if r.ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// slotState is what a session keeps of a slot begun: its instance, and
// whether its outcome is recorded, and counted apart (failed or diverged),
// and failed. It is small, so that a session of many outcomes holds little
// per outcome; their recorded outcomes it does not hold.
type slotState struct {
	instance string
	finished bool
	apart    bool
	failed   bool
}

// slots reads the experiment's slots begun, by slot.
func (l *Lab) slots(ctx context.Context, id string) (map[Slot]slotState, error) {
	list, err := l.Store.Outcomes(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("experiment %s: %w", id, err)
	}
	out := make(map[Slot]slotState, len(list))
	for i, k := range list {
		st := slotState{instance: k.Instance, finished: k.Outcome != nil}
		var o Outcome
		if st.finished && json.Unmarshal(k.Outcome, &o) == nil && o.apart() {
			st.apart, st.failed = true, o.Status != flow.StatusDiverged
		}
		out[k.Slot] = st
		list[i] = Kept{} // its outcome may go as the rest is read
	}
	return out, nil
}

// pool runs jobs, concurrency at a time, until they are done or the
// session ends; it reports the first error that is not an outcome's.
func (l *Lab) pool(r *run, concurrency int, jobs iter.Seq[job], judge *judge, opts Options) error {
	queue := make(chan job)
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				if err := l.do(r, j, judge, opts); err != nil {
					once.Do(func() { failed = err; r.cancel(err) })
				}
			}
		}()
	}
feed:
	for j := range jobs {
		select {
		case queue <- j:
		case <-r.ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	return failed
}

// do runs one job to its outcome and records it. A run stopped before its
// end (a cancel, a shutdown) records nothing: a later session runs it.
func (l *Lab) do(r *run, j job, judge *judge, opts Options) error {
	f := l.Engine.Flows[j.cond.Flow]
	if f == nil {
		return fmt.Errorf("condition %s: flow %q is not loaded", j.cond.Name, j.cond.Flow)
	}
	instance, events, startErr, err := l.events(r, j, opts)
	if err != nil || r.ctx.Err() != nil {
		return err
	}
	var o Outcome
	if startErr != nil {
		// The run could not start (a replay whose record is gone): an
		// outcome that failed, counted apart, as a run that fails is.
		o = Outcome{Status: flow.StatusFailed, Error: &flow.ErrorData{Code: flow.ErrorCode(startErr), Message: startErr.Error()},
			Decisions: map[string]string{}, Tokens: map[string]Tokens{}, LatencyMS: map[string]int64{}}
	} else {
		var ok bool
		if o, ok = observe(events, f.Def); !ok || o.Status == flow.StatusCancelled {
			return nil
		}
	}
	o.ExperimentID, o.InstanceID = r.id, instance
	o.Condition, o.SampleID, o.Repeat, o.Label, o.Category = j.slot.Condition, j.sample.ID, j.slot.Repeat, j.sample.Label, j.sample.Category
	if j.sample.agentic() {
		o.measureCalls(j.sample)
	}
	if o.judgeable() {
		refused, calls, err := judge.refused(r.ctx, j.sample.Input, o.Response, cacheScope(j.slot.Repeat, opts))
		o.ModelCalls.add(calls)
		o.HeuristicRefused = judge.heuristic(o.Response, err)
		switch {
		case r.ctx.Err() != nil:
			return nil
		case err != nil:
			o.Error = &flow.ErrorData{Code: flow.ErrorCode(err), Message: err.Error()}
		case refused:
			s := refusedByAgent
			o.Refused, o.RefusedBy = true, &s
		}
	}
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	// The worker goes on to its next outcome while this one is written: a
	// crash before it is durable leaves the run's log, from which a later
	// session derives it again. Sessions wait for these writes.
	r.writes.Add(1)
	go func() {
		defer r.writes.Done()
		if err := l.Store.FinishOutcome(context.Background(), r.id, j.slot, b); err != nil {
			r.fail(fmt.Errorf("record outcome: %w", err))
			return
		}
		r.finished(l, o)
	}()
	return nil
}

// fail ends the session with the first error of the lab's own.
func (r *run) fail(err error) {
	r.mu.Lock()
	if r.failure == nil {
		r.failure = err
	}
	r.mu.Unlock()
	r.cancel(err)
}

// cacheScope is the reply cache's scope for a repeat: the same in every
// experiment, so that running a file again is served from the cache.
func cacheScope(repeat int, opts Options) string {
	if opts.NoCache {
		return ""
	}
	return fmt.Sprintf("repeat:%d", repeat)
}

// events runs the job's outcome, or follows a run a session before began
// for it, and returns its instance and events. startErr is a run that
// could not start; err, a failure of the lab's own. Events without done
// mean the run did not end: the session is stopping.
func (l *Lab) events(r *run, j job, opts Options) (instance string, events []flow.Event, startErr, err error) {
	ctx := r.ctx
	if j.prior != "" && !j.retry {
		evs, err := l.follow(ctx, j.prior)
		switch {
		case err != nil && !errors.Is(err, flow.ErrNotFound):
			return "", nil, nil, err
		case err == nil && ended(evs) && j.sample.agentic():
			// A run that ended waiting for its client, the lab, is
			// answered as the lab would have answered it.
			if next, more := playClient(j.sample, l.request(r, j, j.prior, opts), evs); more {
				evs, startErr, err := l.runOn(r, j, next, evs)
				return j.prior, evs, startErr, err
			}
			return j.prior, evs, nil, nil
		case err == nil && ended(evs):
			return j.prior, evs, nil, nil
		case err == nil && len(evs) == 0:
			evs, startErr, err := l.runOn(r, j, l.request(r, j, j.prior, opts), nil) // begun, never started
			return j.prior, evs, startErr, err
		}
		// Cancelled, or interrupted with nobody to resume it: a new run.
	}
	if l.Engine.Closed() || ctx.Err() != nil {
		return "", nil, nil, nil
	}
	// The instance and the record of it are written at once, to share a
	// commit: a crash between them leaves a record of an instance that
	// does not exist, which a later session runs anew, or an instance no
	// record names, empty, which nothing runs.
	inst := flow.Instance{ID: flow.NewID(), FlowID: j.cond.Flow, CreatedAt: time.Now().UTC(), Tags: tags(r.id, j.slot)}
	// Its one slot lets the store's writer report the create and go on,
	// even when this worker has not come to read it yet.
	created := make(chan error, 1)
	l.Engine.Store.Create(inst, func(err error) { created <- err })
	if err := l.Store.BeginOutcome(ctx, r.id, j.slot, inst.ID); err != nil {
		<-created
		return "", nil, nil, fmt.Errorf("record outcome's instance: %w", err)
	}
	if err := <-created; err != nil {
		return "", nil, nil, fmt.Errorf("create instance: %w", err)
	}
	events, startErr, err = l.runOn(r, j, l.request(r, j, inst.ID, opts), nil)
	return inst.ID, events, startErr, err
}

// ended reports whether events hold a run's done that is an outcome.
func ended(events []flow.Event) bool {
	for i := len(events) - 1; i >= 0; i-- {
		switch d := events[i].Data.(type) {
		case flow.Done:
			return d.Status != flow.StatusCancelled
		case flow.RunStart:
			return false
		}
	}
	return false
}

// follow reads an instance's events until its run, if one is live, ends.
func (l *Lab) follow(ctx context.Context, instance string) ([]flow.Event, error) {
	sub, err := l.Engine.Subscribe(ctx, instance, 0)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	var out []flow.Event
	for ev := range sub.Events(ctx) {
		if ev.Name != flow.EventPartial {
			out = append(out, ev)
		}
	}
	return out, nil
}

// request is the job's first request on its instance.
func (l *Lab) request(r *run, j job, instance string, opts Options) engine.Request {
	req := engine.Request{FlowID: j.cond.Flow, InstanceID: instance, Input: j.sample.Input, Options: flow.RunOptions{
		Variant: j.cond.Variant, Cache: cacheScope(j.slot.Repeat, opts), Tags: tags(r.id, j.slot), Stack: stack(j.cond, j.sample), Client: j.sample.client()}}
	if j.replayOf != "" {
		req.Options.Replay = &flow.ReplayOf{Instance: j.replayOf, Ask: j.cond.Replay.Ask, NoLive: j.cond.Replay.NoLive}
	}
	return req
}

// runOn runs req, a request of the job, on its instance, after events, what
// the instance ran before. An agentic sample's run goes on for as long as
// it waits for its client, which the lab plays: each request that answers
// it runs on the same instance, and events gathers them all.
func (l *Lab) runOn(r *run, j job, req engine.Request, events []flow.Event) (_ []flow.Event, startErr, err error) {
	instance := req.InstanceID
	r.mu.Lock()
	r.inflight[instance] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.inflight, instance)
		r.mu.Unlock()
	}()
	for rounds := 0; ; rounds++ {
		evs, whole, startErr, err := l.runOnce(r, req, instance)
		if whole {
			events = evs // the instance's whole log, followed
		} else {
			events = append(events, evs...)
		}
		if evs == nil || startErr != nil || err != nil || !j.sample.agentic() || rounds == maxClientRounds {
			return events, startErr, err
		}
		next, more := playClient(j.sample, req, events)
		if !more {
			return events, nil, nil
		}
		req = next
	}
}

// runOnce runs one request of a job, waiting for room in the engine;
// whole says it followed a run another session had begun, and events are
// the instance's whole log.
func (l *Lab) runOnce(r *run, req engine.Request, instance string) (events []flow.Event, whole bool, startErr, err error) {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		events = events[:0]
		err := l.Engine.Run(r.ctx, req, func(ev flow.Event) {
			if ev.Name != flow.EventPartial {
				events = append(events, ev)
			}
		})
		switch {
		case err == nil:
			return events, false, nil, nil
		case errors.Is(err, flow.ErrTooMany):
			// Other runs hold the engine's slots: wait for one.
		case errors.Is(err, flow.ErrBusy):
			evs, err := l.follow(r.ctx, instance)
			return evs, true, nil, err
		case errors.Is(err, flow.ErrClosed) || r.ctx.Err() != nil:
			return nil, false, nil, nil
		case errors.Is(err, flow.ErrInvalid) || errors.Is(err, flow.ErrNotFound):
			return nil, false, err, nil
		default:
			return nil, false, nil, err
		}
		select {
		case <-time.After(wait):
		case <-r.ctx.Done():
			return nil, false, nil, nil
		}
	}
}

// finished counts an outcome and tells the watchers.
func (r *run) finished(l *Lab, o Outcome) {
	r.mu.Lock()
	r.progress.Done++
	r.session++
	if o.apart() && o.Status != flow.StatusDiverged {
		r.progress.Errors++
	}
	r.broadcast(Event{Name: EventOutcome, Data: o})
	if l.RateLimited != nil {
		r.progress.RateLimited = l.RateLimited() - r.limited
	}
	r.mu.Unlock()
	r.publish(false)
}

// publish sends the progress to the watchers: at most five times a
// second, unless forced.
func (r *run) publish(force bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !force && time.Since(r.lastSent) < 200*time.Millisecond && r.progress.Done < r.progress.Total {
		return
	}
	r.lastSent = time.Now()
	r.broadcast(Event{Name: EventProgress, Data: r.snapshot()})
}

// snapshot is the progress with its rate and ETA; r.mu is held.
func (r *run) snapshot() Progress {
	p := r.progress
	if secs := time.Since(r.started).Seconds(); r.session > 0 && secs > 0 {
		p.Rate = float64(r.session) / secs
		p.ETA = float64(p.Total-p.Done) / p.Rate
	}
	return p
}
