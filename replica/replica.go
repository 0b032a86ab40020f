// Package replica lets several superego servers share one PostgreSQL
// database (docs/operations.md): any of them takes any request, a run runs on exactly
// one of them at a time, any of them follows any run live, and when one
// dies another goes on with its runs from their logs within seconds.
//
// A run has a row in run_leases that says which replica runs it, written
// in the transaction that writes the run's first events. The replica that
// takes a request runs the run itself when it has room: it claims the row
// at once. Without room, the run is a job on River, written in the same
// transaction, for the first replica that has. A replica renews its claims
// every second (the lease, 5 s long, is the heartbeat); every two seconds
// each replica gives the runs of leases that expired (their replica died)
// to the queue as jobs, and the replica whose worker takes the job goes on
// with the run from its log; the job stays, a minute on, as a watchdog. A
// replica that finds a lease of its own gone, or has not renewed for a
// lease's time, stops that run where it is. A run that ends deletes its row
// and its job. River's own rescue of stuck
// jobs (an hour) is not what notices a dead replica: a job is only ever
// worked for an instant, to claim a run.
//
// Logs grow on one replica and are followed on others through LISTEN and
// NOTIFY: the store notifies "INSTANCE:LAST_ID" on each commit, one
// listening connection per replica wakes the streams that follow that
// instance, and they read the events from the log. While that connection
// is down, streams poll every second.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"superego/engine"
	"superego/flow"
	"superego/postgres"
)

// Timings of claims; vars, so that a test may shorten them.
var (
	leaseFor   = 5 * time.Second // a claim not renewed for this long is dead
	renewEvery = time.Second
	reapEvery  = 2 * time.Second
	watchAfter = time.Minute // when a taken run's job looks at it again
	fullWait   = 200 * time.Millisecond
	pollEvery  = 200 * time.Millisecond // River's fetches when no insert notifies
)

// Channels the replicas notify.
const (
	logChannel    = "superego_log"
	cancelChannel = "superego_cancel"
	queue         = "runs"
)

// Replicas is this server's part of a set of replicas on one database.
type Replicas struct {
	ID string // this replica, in claims and in River

	store  *postgres.Store
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	engine *engine.Engine
	log    *slog.Logger
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	watchers map[string]map[chan struct{}]struct{}
	claims   map[string]*held // runs claimed here, by instance
	renewed  time.Time        // when the last renew that worked began
}

var _ engine.Replicas = (*Replicas)(nil)

// Open joins the replicas of store's database: River's tables are brought
// up to date, and the store notifies commits. workers is how many runs
// this replica takes from the queue at once.
func Open(ctx context.Context, store *postgres.Store, workers int, log *slog.Logger) (*Replicas, error) {
	r := &Replicas{ID: flow.NewID(), store: store, pool: store.Pool(), log: log,
		watchers: map[string]map[chan struct{}]struct{}{}, claims: map[string]*held{}}
	if err := r.migrate(ctx); err != nil {
		return nil, fmt.Errorf("replicas: bring River's tables up to date: %w", err)
	}
	workerSet := river.NewWorkers()
	river.AddWorker(workerSet, &runWorker{r: r})
	client, err := river.NewClient(riverpgxv5.New(r.pool), &river.Config{
		ID:                r.ID,
		FetchPollInterval: pollEvery,
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: workers}},
		Workers:           workerSet,
		Logger:            log,
		// A job is worked for an instant, to claim a run: one running a
		// minute is a replica's that died while it worked, and waits for
		// River's rescue (an hour by default) before another replica may
		// take the run.
		JobTimeout:           30 * time.Second,
		RescueStuckJobsAfter: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	r.river = client
	store.Notify = logChannel
	return r, nil
}

// migrate applies River's migrations, one replica at a time.
func (r *Replicas) migrate(ctx context.Context) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(5716853209843)`); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(5716853209843)`)
	m, err := rivermigrate.New(riverpgxv5.New(r.pool), &rivermigrate.Config{Logger: r.log})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// Start takes runs for engine from the queue, renews and reaps claims, and
// listens for logs that grow and cancels.
func (r *Replicas) Start(ctx context.Context, engine *engine.Engine) error {
	r.engine = engine
	r.renewed = time.Now()
	ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	if err := r.river.Start(ctx); err != nil {
		return fmt.Errorf("replicas: start River: %w", err)
	}
	r.wg.Add(3)
	go r.listen(ctx)
	go r.every(ctx, renewEvery, r.renew)
	go r.every(ctx, reapEvery, r.reap)
	return nil
}

// Close stops taking runs. Claims of runs still here expire, and other
// replicas go on with them; the engine's Close, before, interrupts them and
// gives them back at once.
func (r *Replicas) Close(ctx context.Context) error {
	err := r.river.Stop(ctx)
	if r.stop != nil {
		r.stop()
	}
	r.wg.Wait()
	return err
}

func (r *Replicas) every(ctx context.Context, d time.Duration, f func(context.Context) error) {
	defer r.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("replicas", "err", err)
			}
		}
	}
}

// runArgs is a run's job: the instance whose run it is.
type runArgs struct {
	Instance string `json:"instance_id"`
}

func (runArgs) Kind() string { return "superego_run" }

// Dispatch writes the run's opening and its lease in one transaction:
// claimed here for d.Here, with no job (the reaper makes one if this
// replica dies), else with a job, waiting for a replica.
func (r *Replicas) Dispatch(ctx context.Context, d engine.Dispatch) (*engine.Claim, error) {
	err := flow.Wait(func(done func(error)) {
		r.store.Begin(d.Instance, d.InstanceID, d.Opening, func(ctx context.Context, tx pgx.Tx) error {
			if d.Here {
				_, err := tx.Exec(ctx, `INSERT INTO run_leases (instance_id, owner, expires_at, started) VALUES ($1, $2, now() + $3::interval, true)`,
					d.InstanceID, r.ID, leaseFor.String())
				return err
			}
			job, err := r.river.InsertTx(ctx, tx, runArgs{d.InstanceID}, &river.InsertOpts{Queue: queue})
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO run_leases (instance_id, expires_at, job_id) VALUES ($1, now() + $2::interval, $3)`,
				d.InstanceID, leaseFor.String(), job.Job.ID)
			return err
		}, done)
	})
	if err != nil {
		if isConflict(err) {
			return nil, fmt.Errorf("instance %s: %w", d.InstanceID, flow.ErrBusy)
		}
		return nil, fmt.Errorf("dispatch a run of %s: %w", d.InstanceID, err)
	}
	if !d.Here {
		return nil, nil
	}
	return r.claim(d.InstanceID, false), nil
}

// isConflict reports whether a write failed because another run of the
// instance was written first: its lease, or its events (the log's key, or
// its trigger, which raises this message).
func isConflict(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "23505": // unique_violation
		return pe.ConstraintName == "run_leases_pkey" || pe.ConstraintName == "log_pkey"
	case "P0001": // raise_exception
		return pe.Message == "event ids only grow"
	}
	return false
}

// held is a run this replica claimed.
type held struct {
	stop  chan struct{} // closed by a cancel of the run
	lost  chan struct{} // closed when its lease is found gone: another replica may run it
	since time.Time     // a renew that began before it cannot know it
}

// hold registers a claim of this replica's, written already, for cancels
// and renewals to reach.
func (r *Replicas) hold(instance string) *held {
	h := &held{stop: make(chan struct{}), lost: make(chan struct{}), since: time.Now()}
	r.mu.Lock()
	r.claims[instance] = h
	r.mu.Unlock()
	return h
}

// drop forgets the claim h, if it is still the instance's.
func (r *Replicas) drop(instance string, h *held) {
	r.mu.Lock()
	if r.claims[instance] == h {
		delete(r.claims, instance)
	}
	r.mu.Unlock()
}

// claim holds a lease this replica has just written, as an engine.Claim.
func (r *Replicas) claim(instance string, resumed bool) *engine.Claim {
	h := r.hold(instance)
	return &engine.Claim{Stop: h.stop, Lost: h.lost, Resumed: resumed, Release: func(ended bool) {
		r.drop(instance, h)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.release(ctx, instance, ended); err != nil {
			r.log.Warn("release a run's claim", "instance", instance, "err", err)
		}
	}}
}

// release ends this replica's claim of an instance's run: with the run,
// the lease and any job go, in one statement (a job still running, whose
// worker is returning, finds no lease and ends); a run interrupted here
// goes back to the queue at once.
func (r *Replicas) release(ctx context.Context, instance string, ended bool) error {
	if ended {
		_, err := r.pool.Exec(ctx, `WITH lease AS (DELETE FROM run_leases WHERE instance_id = $1 AND owner = $2 RETURNING job_id)
			DELETE FROM river_job WHERE id IN (SELECT job_id FROM lease) AND state <> 'running'`, instance, r.ID)
		return err
	}
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var job *int64
	err = tx.QueryRow(ctx, `UPDATE run_leases SET owner = NULL WHERE instance_id = $1 AND owner = $2 RETURNING job_id`, instance, r.ID).Scan(&job)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := r.requeue(ctx, tx, instance, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// requeue readies the job of a run that no replica holds any more, in tx,
// or makes one for a run that had none (one that ran where it was
// dispatched) or whose job is gone.
func (r *Replicas) requeue(ctx context.Context, tx pgx.Tx, instance string, job *int64) error {
	if job != nil {
		_, err := r.river.JobRetryTx(ctx, tx, *job)
		if !errors.Is(err, rivertype.ErrNotFound) {
			return err
		}
		// The job is gone (deleted by hand, or by River's cleaner): the
		// run gets a new one rather than none.
	}
	res, err := r.river.InsertTx(ctx, tx, runArgs{instance}, &river.InsertOpts{Queue: queue})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE run_leases SET job_id = $2 WHERE instance_id = $1`, instance, res.Job.ID)
	return err
}

// Cancel marks the run's lease cancelled and tells the replica that holds
// it; one that takes it later finds the mark.
func (r *Replicas) Cancel(ctx context.Context, instance string) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, `UPDATE run_leases SET cancel = true WHERE instance_id = $1`, instance)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("instance %s: %w", instance, flow.ErrIdle)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, cancelChannel, instance); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// cancelled stops a run claimed here.
func (r *Replicas) cancelled(instance string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.claims[instance]; ok {
		close(h.stop)
		delete(r.claims, instance)
	}
}

// Watch wakes when the instance's log grows, on any replica.
func (r *Replicas) Watch(instance string) (<-chan struct{}, func()) {
	wake := make(chan struct{}, 1) // one token: the log grew since the reader last looked
	r.mu.Lock()
	if r.watchers[instance] == nil {
		r.watchers[instance] = map[chan struct{}]struct{}{}
	}
	r.watchers[instance][wake] = struct{}{}
	r.mu.Unlock()
	return wake, func() {
		r.mu.Lock()
		delete(r.watchers[instance], wake)
		if len(r.watchers[instance]) == 0 {
			delete(r.watchers, instance)
		}
		r.mu.Unlock()
	}
}

// wake wakes the readers of an instance's log, or every reader.
func (r *Replicas) wake(instance string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	poke := func(ws map[chan struct{}]struct{}) {
		for w := range ws {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
	if instance != "" {
		poke(r.watchers[instance])
		return
	}
	for _, ws := range r.watchers {
		poke(ws)
	}
}

// listen holds the replica's listening connection: logs that grow wake
// their readers, cancels stop their runs. While it is down, readers are
// woken every second instead, and it is opened again.
func (r *Replicas) listen(ctx context.Context) {
	defer r.wg.Done()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("replicas: the listening connection dropped; streams of other replicas' runs poll until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			r.wake("")
		}
	}
}

func (r *Replicas) listenOnce(ctx context.Context) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, ch := range []string{logChannel, cancelChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	r.wake("") // whatever was written while nobody listened
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			conn.Conn().Close(context.Background()) // not back into the pool, still listening
			return err
		}
		switch n.Channel {
		case logChannel:
			instance, _, _ := strings.Cut(n.Payload, ":")
			r.wake(instance)
		case cancelChannel:
			r.cancelled(n.Payload)
		}
	}
}

// renew extends this replica's leases; a cancel that a notification did
// not bring arrives here. A lease it finds gone (it expired, and another
// replica took the run) stops the run here, as does not having renewed for
// a lease's time: the lease is the only right to run it.
func (r *Replicas) renew(ctx context.Context) error {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, leaseFor/2)
	defer cancel()
	renewed, cancels, err := r.extend(ctx)
	r.mu.Lock()
	for id, h := range r.claims {
		if err == nil && !renewed[id] && h.since.Before(began) || err != nil && time.Since(r.renewed) >= leaseFor {
			r.log.Warn("a run's lease is lost; it stops here, for the replica that holds it now", "instance", id)
			close(h.lost)
			delete(r.claims, id)
		}
	}
	if err == nil {
		r.renewed = began
	}
	r.mu.Unlock()
	for _, id := range cancels {
		r.cancelled(id)
	}
	return err
}

// extend renews this replica's leases, and says which it renewed and
// which of them were cancelled.
func (r *Replicas) extend(ctx context.Context) (renewed map[string]bool, cancels []string, err error) {
	rows, err := r.pool.Query(ctx, `UPDATE run_leases SET expires_at = now() + $2::interval WHERE owner = $1 RETURNING instance_id, cancel`, r.ID, leaseFor.String())
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	renewed = map[string]bool{}
	for rows.Next() {
		var id string
		var cancel bool
		if err := rows.Scan(&id, &cancel); err != nil {
			return nil, nil, err
		}
		renewed[id] = true
		if cancel {
			cancels = append(cancels, id)
		}
	}
	return renewed, cancels, rows.Err()
}

// reap gives the runs of expired leases, whose replica died, to whichever
// replica takes their job first. Each lease is freed and its job made ready
// in a transaction of its own: one that cannot be (a lost job, a failing
// row) is left for the next pass, and keeps no other run from going on.
func (r *Replicas) reap(ctx context.Context) error {
	rows, err := r.pool.Query(ctx, `SELECT instance_id FROM run_leases WHERE owner IS NOT NULL AND expires_at < now()`)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := r.reapOne(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("queue the run of %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// reapOne frees an instance's lease, if it is still expired, and readies
// its job, in one transaction.
func (r *Replicas) reapOne(ctx context.Context, instance string) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var job *int64
	err = tx.QueryRow(ctx, `UPDATE run_leases SET owner = NULL WHERE instance_id = $1 AND owner IS NOT NULL AND expires_at < now() RETURNING job_id`, instance).Scan(&job)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // renewed, or reaped by another replica, meanwhile
	}
	if err != nil {
		return err
	}
	if err := r.requeue(ctx, tx, instance, job); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	r.log.Warn("a replica stopped running a run; it goes to another", "instance", instance)
	return nil
}

// runWorker takes a run's job: it claims the run, if nobody alive holds
// it, and runs it; the job then waits a minute, watching the run, until the
// run's end deletes it.
type runWorker struct {
	river.WorkerDefaults[runArgs]
	r *Replicas
}

func (w *runWorker) Work(ctx context.Context, job *river.Job[runArgs]) error {
	r, instance := w.r, job.Args.Instance
	if !r.engine.Room() {
		// Full: give another replica a moment to take it first, then put
		// it back, ready at once (a snooze of any length would wait for
		// River's scheduler).
		select {
		case <-time.After(fullWait):
		case <-ctx.Done():
		}
		return river.JobSnooze(0)
	}
	// A lease of this replica's own that expired is still its run's: its
	// renew extends it, or finds it taken and stops the run.
	var started, cancel bool
	err := r.pool.QueryRow(ctx, `UPDATE run_leases SET owner = $2, expires_at = now() + $3::interval
		WHERE instance_id = $1 AND (owner IS NULL OR owner <> $2 AND expires_at < now()) RETURNING started, cancel`, instance, r.ID, leaseFor.String()).Scan(&started, &cancel)
	if errors.Is(err, pgx.ErrNoRows) {
		var alive bool
		if err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_leases WHERE instance_id = $1)`, instance).Scan(&alive); err != nil {
			return err
		}
		if alive {
			return river.JobSnooze(watchAfter) // running on a replica that is alive
		}
		return nil // over
	}
	if err != nil {
		return err
	}
	claim := r.claim(instance, started)
	if cancel {
		r.cancelled(instance)
	}
	if err := r.engine.Take(ctx, instance, claim); err != nil {
		claim.Release(false)
		if errors.Is(err, flow.ErrTooMany) || errors.Is(err, flow.ErrClosed) {
			return river.JobSnooze(0) // no room here after all
		}
		return err
	}
	if !started {
		if _, err := r.pool.Exec(ctx, `UPDATE run_leases SET started = true WHERE instance_id = $1`, instance); err != nil {
			return err
		}
	}
	return river.JobSnooze(watchAfter)
}
