// Package sqlite stores flow instances in SQLite, through the pure-Go
// modernc.org/sqlite driver, so the binary needs no C toolchain.
//
// The schema is the log: one row an instance, one row an event, appended
// and never updated. A step's hidden fields live in their own column, apart
// from the JSON a client may see. Everything else about an instance (its
// status, its steps, when it last changed) is derived from its events.
//
// Writes go through one goroutine that commits whatever appends are waiting
// in a single transaction: concurrent runs share a commit instead of
// queueing for SQLite's one writer, and each Append returns only once its
// event is durable, so no run acts on a step the store could lose.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"superego/flow"
)

const schema = `
CREATE TABLE IF NOT EXISTS instances (
	id         TEXT PRIMARY KEY,
	flow_id    TEXT NOT NULL,
	created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS instances_by_created ON instances (created_at);
CREATE TABLE IF NOT EXISTS events (
	instance_id TEXT    NOT NULL REFERENCES instances (id),
	seq         INTEGER NOT NULL,
	name        TEXT    NOT NULL,
	time        TEXT    NOT NULL,
	data        TEXT    NOT NULL,
	hidden      TEXT,
	PRIMARY KEY (instance_id, seq)
);`

// timeFormat is fixed-width, so times sort as text.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

// Store is a flow.Store in a SQLite database file.
type Store struct {
	read  *sql.DB
	write *sql.DB // one connection: SQLite has one writer
	queue chan appendReq
	done  chan struct{}
	once  sync.Once
}

var _ flow.Store = (*Store)(nil)

type appendReq struct {
	id     string
	e      flow.Event
	data   []byte
	hidden []byte // nil for events that are not steps
	errc   chan error
}

// maxBatch bounds one group commit.
const maxBatch = 512

// Open opens (creating if need be) the database at path, in WAL mode.
func Open(path string) (*Store, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(ON)"
	write, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	if _, err := write.Exec(schema); err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	read, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{read: read, write: write,
		// A run waits for its own append, so the queue holds at most one
		// event a run in flight; its buffer lets a commit's worth wait
		// without blocking the runs that enqueue.
		queue: make(chan appendReq, maxBatch),
		done:  make(chan struct{})}
	go s.writer()
	return s, nil
}

// Close stops the writer, once the appends already queued are committed,
// and closes the database.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.queue) })
	<-s.done
	return errors.Join(s.read.Close(), s.write.Close())
}

func (s *Store) writer() {
	defer close(s.done)
	batch := make([]appendReq, 0, maxBatch)
	for first := range s.queue {
		batch = append(batch[:0], first)
	more:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		err := s.commit(batch)
		for _, r := range batch {
			r.errc <- err
		}
	}
}

func (s *Store) commit(batch []appendReq) error {
	tx, err := s.write.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.Prepare(`INSERT INTO events (instance_id, seq, name, time, data, hidden) VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, r := range batch {
		var hidden any
		if r.hidden != nil {
			hidden = string(r.hidden)
		}
		if _, err := stmt.Exec(r.id, r.e.ID, r.e.Name, r.e.Time.UTC().Format(timeFormat), string(r.data), hidden); err != nil {
			return fmt.Errorf("event %d of instance %s: %w", r.e.ID, r.id, err)
		}
	}
	return tx.Commit()
}

func (s *Store) Create(ctx context.Context, inst flow.Instance) error {
	_, err := s.write.ExecContext(ctx, `INSERT INTO instances (id, flow_id, created_at) VALUES (?, ?, ?)`,
		inst.ID, inst.FlowID, inst.CreatedAt.UTC().Format(timeFormat))
	if err != nil {
		return fmt.Errorf("create instance %s: %w", inst.ID, err)
	}
	return nil
}

func (s *Store) Get(ctx context.Context, id string) (flow.Instance, error) {
	inst := flow.Instance{ID: id}
	var created string
	err := s.read.QueryRowContext(ctx, `SELECT flow_id, created_at FROM instances WHERE id = ?`, id).Scan(&inst.FlowID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return inst, fmt.Errorf("instance %q: %w", id, flow.ErrNotFound)
	}
	if err != nil {
		return inst, fmt.Errorf("get instance %s: %w", id, err)
	}
	inst.CreatedAt, err = time.Parse(timeFormat, created)
	return inst, err
}

// Append records an event and returns once it is committed.
func (s *Store) Append(ctx context.Context, id string, e flow.Event) error {
	data, err := json.Marshal(e.Data)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", e.Name, err)
	}
	r := appendReq{id: id, e: e, data: data, errc: make(chan error, 1)}
	if step, ok := e.Data.(flow.Step); ok {
		if r.hidden, err = json.Marshal(flow.HiddenOf(step)); err != nil {
			return err
		}
	}
	select {
	case s.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-r.errc // waits even if ctx ends: the row may be committing
}

func (s *Store) Events(ctx context.Context, id string, after int64) ([]flow.Event, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, `SELECT seq, name, time, data, hidden FROM events WHERE instance_id = ? AND seq > ? ORDER BY seq`, id, after)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", id, err)
	}
	defer rows.Close()
	var out []flow.Event
	for rows.Next() {
		var e flow.Event
		var at, data string
		var hidden sql.NullString
		if err := rows.Scan(&e.ID, &e.Name, &at, &data, &hidden); err != nil {
			return nil, err
		}
		if e.Time, err = time.Parse(timeFormat, at); err != nil {
			return nil, err
		}
		var h flow.Hidden
		if hidden.Valid {
			if err := json.Unmarshal([]byte(hidden.String), &h); err != nil {
				return nil, fmt.Errorf("event %d of %s: %w", e.ID, id, err)
			}
		}
		if e.Data, err = flow.DecodeEvent(e.Name, []byte(data), h); err != nil {
			return nil, fmt.Errorf("event %d of %s: %w", e.ID, id, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// List derives each instance's summary in one query: its step count, its
// last event's time, and the last of its run_start and done events.
func (s *Store) List(ctx context.Context, opt flow.ListOptions) ([]flow.Summary, error) {
	q := `SELECT i.id, i.flow_id, i.created_at,
		(SELECT COUNT(*) FROM events e WHERE e.instance_id = i.id AND e.name = 'complete_step'),
		(SELECT MAX(e.time) FROM events e WHERE e.instance_id = i.id),
		(SELECT e.name || char(10) || e.data FROM events e WHERE e.instance_id = i.id AND e.name IN ('run_start', 'done') ORDER BY e.seq DESC LIMIT 1)
		FROM instances i`
	var args []any
	if opt.FlowID != "" {
		q += ` WHERE i.flow_id = ?`
		args = append(args, opt.FlowID)
	}
	q += ` ORDER BY i.created_at DESC, i.id DESC`
	if opt.Limit > 0 && opt.Status == "" {
		q += ` LIMIT ?`
		args = append(args, opt.Limit)
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []flow.Summary
	for rows.Next() {
		var sum flow.Summary
		var created string
		var updated, last sql.NullString
		if err := rows.Scan(&sum.ID, &sum.FlowID, &created, &sum.Steps, &updated, &last); err != nil {
			return nil, err
		}
		if sum.CreatedAt, err = time.Parse(timeFormat, created); err != nil {
			return nil, err
		}
		sum.UpdatedAt = sum.CreatedAt
		if updated.Valid {
			if sum.UpdatedAt, err = time.Parse(timeFormat, updated.String); err != nil {
				return nil, err
			}
		}
		sum.Status = statusOf(last)
		if opt.Status != "" && sum.Status != opt.Status {
			continue
		}
		if out = append(out, sum); opt.Limit > 0 && len(out) == opt.Limit {
			break
		}
	}
	return out, rows.Err()
}

// statusOf reads the status from the last run_start or done event, given as
// "name\ndata": a done says how the run ended; a run_start, that one is in
// progress.
func statusOf(last sql.NullString) string {
	if !last.Valid {
		return flow.StatusNew
	}
	name, data, _ := strings.Cut(last.String, "\n")
	var d flow.Done
	if name == flow.EventDone && json.Unmarshal([]byte(data), &d) == nil {
		return d.Status
	}
	return flow.StatusRunning
}
