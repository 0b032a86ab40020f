// Package postgres stores flow instances in PostgreSQL, through pgx, with
// the log design of the SQLite store (package segment): a row for each
// commit's events of an instance, hidden fields in a column of their own,
// texts kept once, held events in their own table, a checksum on every row.
//
// Writes go through one goroutine, on a connection of its own, that commits
// whatever writes are waiting in one transaction: a commit waits for
// PostgreSQL to flush its WAL, and concurrent runs then share that wait
// instead of queueing one by one (100 concurrent runs append 4 to 5 times
// faster than with a transaction each on a pool of writers). The
// transaction is a pgx batch: its statements go in one round trip and end
// with one Sync, so the server runs them as one implicit transaction, all
// or none, without the round trips of BEGIN and COMMIT, which took about
// 100 µs of a 540 µs commit here. Something that must join the
// transaction of a run's events through an API that takes a pgx.Tx, a
// queue's job, can have an explicit one for the batches that carry it.
//
// Reads use a pool of their own, pgxpool's: pool_max_conns in the URL, or
// max(4, CPUs), so a burst of reads waits for a connection instead of
// opening hundreds, and never takes the writer's.
package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"superego/flow"
	"superego/migrate"
	"superego/segment"
)

//go:embed migrations/*.sql
var migrations embed.FS

// schema is the store's migrations. Two processes that start at once on
// one database take turns: each step's transaction first takes a lock of
// the database's own, held until it ends.
var schema = func() migrate.Schema {
	steps, err := migrate.Load(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded files are wrong: every test fails
	}
	return migrate.Schema{Migrations: steps, Lock: `SELECT pg_advisory_xact_lock(5716853209842)`, Version: version}
}()

func version(ctx context.Context, tx *sql.Tx) (int, error) {
	var recorded bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&recorded); err != nil || !recorded {
		return 0, err
	}
	return migrate.Recorded(ctx, tx)
}

// connectTimeout bounds the wait for a server that does not answer, where
// the URL sets none (connect_timeout).
const connectTimeout = 10 * time.Second

// Store is a flow.Store in a PostgreSQL database.
type Store struct {
	// Notify, where set, is a channel the store notifies, on commit, of
	// each instance whose log grew: "INSTANCE:LAST_EVENT_ID". Replicas
	// listen on it to follow runs that run elsewhere.
	Notify string

	// The writer's Create, Append, Settle and Hold, and the store's own
	// writes in the batch's transaction.
	*segment.Writer[own]

	read  *pgxpool.Pool
	write *pgxpool.Pool // one connection: the writer's

	textIDs map[string]int64 // texts the database holds, by body; the writer's own
	// writer is this store's row of writers, and commits the count of
	// commits it says; the writer's own.
	writer  string
	commits int64

	texts segment.TextCache // texts read, by id
}

var _ flow.Store = (*Store)(nil)

// own is a write's part that is the store's own: what with does in the
// batch's transaction, or, with exec, statements of the store's other
// tables (experiments, the reply cache) queued in the batch.
type own struct {
	with func(ctx context.Context, tx pgx.Tx) error
	exec func(b *pgx.Batch)
}

// Open connects to the database at connString (a postgres:// or
// postgresql:// URL, or key=value pairs) and brings its schema up to date.
// The schema is the search_path's first, as the server resolves it: a URL
// may name another with ?search_path=NAME. Errors name the database with
// its password left out.
func Open(ctx context.Context, connString string) (*Store, error) {
	s, err := open(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", redacted(connString), err)
	}
	return s, nil
}

func open(ctx context.Context, connString string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	wcfg := cfg.Copy()
	wcfg.MaxConns, wcfg.MinConns = 1, 0
	db := stdlib.OpenDB(*cfg.ConnConfig)
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		return nil, err
	}
	if err := schema.Up(ctx, db); err != nil {
		return nil, err
	}
	write, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		return nil, err
	}
	read, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		write.Close()
		return nil, err
	}
	s := &Store{read: read, write: write, textIDs: map[string]int64{}, writer: flow.NewID()}
	if _, err := write.Exec(ctx, `INSERT INTO writers (id, commits) VALUES ($1, 0)`, s.writer); err != nil {
		write.Close()
		read.Close()
		return nil, err
	}
	s.Writer = segment.NewWriter(s.commitTx, ErrClosed)
	return s, nil
}

// redacted is a connection string fit for an error: a URL without its
// password, or for key=value pairs, which may hold one, a description.
func redacted(connString string) string {
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.Redacted()
	}
	return "the PostgreSQL database"
}

// Close stops the writer, once the writes already queued are done, and
// closes the pools.
func (s *Store) Close() error {
	s.Writer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.write.Exec(ctx, `DELETE FROM writers WHERE id = $1`, s.writer) // a row left behind costs nothing but its bytes
	cancel()
	s.read.Close()
	s.write.Close()
	return nil
}

// row is a segment with the instance it belongs to and, on an instance's
// first row, its flow and creation.
type row struct {
	segment.Segment
	id        string
	flowID    *string
	createdAt *time.Time
	tags      *string // on an instance's first row, when it has tags
}

// writeTimeout bounds one commit, so that a database that stops answering
// fails the writes waiting on it instead of holding them for ever.
const writeTimeout = time.Minute

// commitTx writes a batch in one transaction, and counts it in the
// writer's row. When the connection breaks with no answer from the server
// (during COMMIT, or before it), the count says whether the transaction
// landed: if it did, the batch is done; if not, it is tried once more, on
// a new connection. No write is lost to a dropped connection, and none is
// made twice.
func (s *Store) commitTx(batch []segment.Write[own]) error {
	n := s.commits + 1
	for attempt := 1; ; attempt++ {
		err := s.commitOnce(batch, n)
		var unknown *unknownOutcome
		if !errors.As(err, &unknown) {
			if err == nil {
				s.commits = n
			}
			return err
		}
		landed, lerr := s.landed(n)
		switch {
		case lerr != nil:
			return fmt.Errorf("%w; and whether it landed could not be read: %v", err, lerr)
		case landed:
			s.commits = n
			return nil
		case attempt == 2:
			return err
		}
	}
}

// unknownOutcome is the error of a commit whose connection broke without
// the server's answer: the transaction may have committed or not.
type unknownOutcome struct{ err error }

func (u *unknownOutcome) Error() string { return "commit: " + u.err.Error() }
func (u *unknownOutcome) Unwrap() error { return u.err }

// landed reports whether the writer's commit n landed. A transaction that
// is still going on holds the writer's row, which locking it waits for.
func (s *Store) landed(n int64) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	var commits int64
	err := pgx.BeginFunc(ctx, s.read, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT commits FROM writers WHERE id = $1 FOR UPDATE`, s.writer).Scan(&commits)
	})
	return commits == n, err
}

// commitOnce writes a batch in one transaction, as the writer's commit n.
func (s *Store) commitOnce(batch []segment.Write[own], n int64) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	conn, err := s.write.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		// An error the server raised means the transaction is rolled
		// back; a connection that broke (or timed out, which breaks it)
		// leaves that unknown.
		var pe *pgconn.PgError
		if err != nil && !errors.As(err, &pe) && conn.Conn().IsClosed() {
			err = &unknownOutcome{err}
		}
	}()
	var rows []*row
	byInstance := map[string]*row{}
	textID := func(body string) (int64, error) {
		if id, ok := s.textIDs[body]; ok {
			return id, nil
		}
		// Kept at once, outside the batch: a text the batch then fails
		// to use is one no step names, and the next that has it finds it.
		key := sha256.Sum256([]byte(body))
		var id int64
		if err := conn.QueryRow(ctx, `INSERT INTO texts (key, body, sum) VALUES ($1, $2, $3) ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key RETURNING id`,
			key[:], body, textSum([]byte(body))).Scan(&id); err != nil {
			return 0, fmt.Errorf("keep text: %w", err)
		}
		s.textIDs[body] = id
		return id, nil
	}
	// Held events and settles go in the order they were queued; an
	// instance is queued before its events, and its first row holds those
	// of them the batch holds. The count comes first, so that the
	// transaction holds the writer's row from its start.
	var b pgx.Batch
	b.Queue(`UPDATE writers SET commits = $2 WHERE id = $1`, s.writer, n)
	var with []func(context.Context, pgx.Tx) error
	for _, w := range batch {
		if w.Own.exec != nil {
			w.Own.exec(&b)
			continue
		}
		r := byInstance[w.ID]
		if w.Own.with != nil {
			with = append(with, w.Own.with)
		}
		if w.Inst != nil {
			if r != nil {
				return fmt.Errorf("instance %s is created in a batch that already holds it", w.ID) // committed one by one, the second write fails alone
			}
			created := w.Inst.CreatedAt.Truncate(time.Microsecond)
			r = &row{id: w.ID, flowID: &w.Inst.FlowID, createdAt: &created, tags: nullText(segment.Tags(w.Inst.Tags))}
			r.LastTime = created
			byInstance[w.ID] = r
			rows = append(rows, r)
			if len(w.Events) == 0 {
				continue
			}
		}
		if w.Held {
			ev := w.Events[0]
			b.Queue(`INSERT INTO held (instance_id, name, data, hidden, sum) VALUES ($1, $2, $3, $4, $5)`,
				w.ID, ev.Name, string(ev.JSON), nullText(ev.Hidden), heldSum(w.ID, ev.Name, ev.JSON, ev.Hidden))
			continue
		}
		if w.Settle {
			b.Queue(`DELETE FROM held WHERE instance_id = $1`, w.ID)
		}
		if r == nil {
			r = &row{id: w.ID}
			byInstance[w.ID] = r
			rows = append(rows, r)
		}
		if err := r.Add(w.ID, w.Events, textID); err != nil {
			return err
		}
	}
	for _, r := range rows {
		events, hidden, texts := r.Columns()
		lastTime := r.LastTime.Truncate(time.Microsecond)
		var status *string
		if r.Status != "" {
			status = &r.Status
		}
		sum := logSum(r.id, r.First, r.Last, r.flowID, r.createdAt, lastTime, int64(r.Steps), status, events, hidden, texts, r.tags)
		b.Queue(`INSERT INTO log (instance_id, first_seq, last_seq, flow_id, created_at, last_time, steps, status, events, hidden, texts, tags, sum) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			r.id, r.First, r.Last, r.flowID, r.createdAt, lastTime, r.Steps, status, nullText(events), nullText(hidden), nullText(texts), r.tags, sum)
		if s.Notify != "" && r.Last > 0 {
			b.Queue(`SELECT pg_notify($1, $2)`, s.Notify, fmt.Sprint(r.id, ":", r.Last))
		}
	}
	if len(with) == 0 {
		return conn.SendBatch(ctx, &b).Close()
	}
	// Something that takes a pgx.Tx joins the batch's transaction.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return err
	}
	for _, f := range with {
		if err := f(ctx, tx); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// Begin queues, as one write, a new instance (where inst is set), events
// for its log, and what with does in the same transaction: a run's first
// events with the job that runs it.
func (s *Store) Begin(inst *flow.Instance, id string, events []flow.Event, with func(ctx context.Context, tx pgx.Tx) error, done func(error)) {
	s.Log(segment.Write[own]{Inst: inst, ID: id, Own: own{with: with}, Done: done}, events)
}

// Pool is the store's pool of connections for reads; others may share it.
func (s *Store) Pool() *pgxpool.Pool { return s.read }

// nullText is JSON to write as a json column's text; NULL for nil.
func nullText(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// logSum, textSum and heldSum are the checksums of rows of the three
// tables: every column but the sum and the keys PostgreSQL makes, in order.
// A log row's tags count only when it has them, so that rows from before
// tags keep their sums.
func logSum(id string, first, last int64, flowID *string, createdAt *time.Time, lastTime time.Time, steps int64, status *string, events, hidden, texts []byte, tags *string) int64 {
	var s segment.Sum
	s.String(id).Int(first).Int(last)
	nullString(&s, flowID)
	if createdAt == nil {
		s.Null()
	} else {
		s.Int(createdAt.UnixMicro())
	}
	s.Int(lastTime.UnixMicro()).Int(steps)
	nullString(&s, status)
	s.Bytes(events).Bytes(hidden).Bytes(texts)
	if tags != nil {
		s.String(*tags)
	}
	return s.Value()
}

// orEmpty is a nullable column's text, "" for NULL.
func orEmpty(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}

func nullString(s *segment.Sum, v *string) {
	if v == nil {
		s.Null()
	} else {
		s.String(*v)
	}
}

func textSum(body []byte) int64 {
	var s segment.Sum
	return s.Bytes(body).Value()
}

func heldSum(id, name string, data, hidden []byte) int64 {
	var s segment.Sum
	return s.String(id).String(name).Bytes(data).Bytes(hidden).Value()
}

// ErrClosed is the error of a write queued after Close.
var ErrClosed = errors.New("postgres: store is closed")

// Held reads the instance's held events; their ids are 0.
func (s *Store) Held(ctx context.Context, id string) ([]flow.Event, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return nil, err
	}
	rows, err := s.read.Query(ctx, `SELECT name, data, hidden, sum FROM held WHERE instance_id = $1 ORDER BY n`, id)
	if err != nil {
		return nil, fmt.Errorf("held events of %s: %w", id, err)
	}
	defer rows.Close()
	var out []flow.Event
	for rows.Next() {
		var name string
		var data, hidden []byte
		var sum int64
		if err := rows.Scan(&name, &data, &hidden, &sum); err != nil {
			return nil, fmt.Errorf("held events of %s: %w", id, err)
		}
		if sum != heldSum(id, name, data, hidden) {
			return nil, fmt.Errorf("instance %q: held event %d: %w", id, len(out)+1, flow.ErrCorrupt)
		}
		e, err := segment.DecodeHeld(name, data, hidden)
		if err != nil {
			return nil, fmt.Errorf("held events of %s: %w", id, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("held events of %s: %w", id, err)
	}
	return out, nil
}

// Get reads the instance's first row, and checks it.
func (s *Store) Get(ctx context.Context, id string) (flow.Instance, error) {
	rows, err := s.segments(ctx, id, `flow_id IS NOT NULL`)
	if err != nil {
		return flow.Instance{ID: id}, err
	}
	tags, err := segment.ReadTags(id, orEmpty(rows[0].tags))
	if err != nil {
		return flow.Instance{ID: id}, err
	}
	return flow.Instance{ID: id, FlowID: *rows[0].flowID, CreatedAt: rows[0].createdAt.UTC(), Tags: tags}, nil
}

// stored is a row of the log as read.
type stored struct {
	segment.Row
	flowID, status *string
	tags           *string
	createdAt      *time.Time
	lastTime       time.Time
	steps          int64
	sum            int64
}

// segments reads the instance's rows that match where, in order, each
// checked against its checksum; none is flow.ErrNotFound. The rows are
// read whole before anything else is asked of the database, so that a
// reader holds one connection at a time.
func (s *Store) segments(ctx context.Context, id, where string, args ...any) ([]stored, error) {
	rows, err := s.read.Query(ctx, `SELECT first_seq, last_seq, flow_id, created_at, last_time, steps, status, events, hidden, texts, tags, sum
		FROM log WHERE instance_id = $1 AND (`+where+`) ORDER BY first_seq`, append([]any{id}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("instance %q: %w", id, err)
	}
	defer rows.Close()
	var out []stored
	for rows.Next() {
		var r stored
		if err := rows.Scan(&r.First, &r.Last, &r.flowID, &r.createdAt, &r.lastTime, &r.steps, &r.status, &r.Events, &r.Hidden, &r.Texts, &r.tags, &r.sum); err != nil {
			return nil, fmt.Errorf("instance %q: %w", id, err)
		}
		if r.sum != logSum(id, r.First, r.Last, r.flowID, r.createdAt, r.lastTime, r.steps, r.status, r.Events, r.Hidden, r.Texts, r.tags) {
			return nil, fmt.Errorf("instance %q: %s: %w", id, r.Name(), flow.ErrCorrupt)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("instance %q: %w", id, err)
	}
	if len(out) == 0 || out[0].flowID == nil || out[0].createdAt == nil {
		return nil, fmt.Errorf("instance %q: %w", id, flow.ErrNotFound)
	}
	return out, nil
}

// Events reads the instance's first row, which says it exists, with the
// segments after event after, in one query.
func (s *Store) Events(ctx context.Context, id string, after int64) ([]flow.Event, error) {
	rows, err := s.segments(ctx, id, `flow_id IS NOT NULL OR last_seq > $2`, after)
	if err != nil {
		return nil, err
	}
	segs := make([]segment.Row, len(rows))
	for i, r := range rows {
		segs[i] = r.Row
	}
	return s.texts.Events(ctx, id, segs, after, s.loadTexts)
}

// loadTexts reads the texts with the given ids in one query, and checks
// them.
func (s *Store) loadTexts(ctx context.Context, ids []int64) (map[int64]string, error) {
	rows, err := s.read.Query(ctx, `SELECT id, body, sum FROM texts WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("texts: %w", err)
	}
	defer rows.Close()
	read := make(map[int64]string, len(ids))
	for rows.Next() {
		var id, sum int64
		var body []byte
		if err := rows.Scan(&id, &body, &sum); err != nil {
			return nil, fmt.Errorf("texts: %w", err)
		}
		if sum != textSum(body) {
			return nil, fmt.Errorf("text %d: %w", id, flow.ErrCorrupt)
		}
		read[id] = string(body)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("texts: %w", err)
	}
	return read, nil
}

// List derives each instance's summary in one query from its segments:
// their step counts, their last event's time (or the instance's creation),
// the last status they mark. It reads no events, and so checks none: a
// changed row is found when its events are read.
func (s *Store) List(ctx context.Context, opt flow.ListOptions) ([]flow.Summary, error) {
	if err := opt.Check(); err != nil {
		return nil, err
	}
	q := `SELECT i.instance_id, i.flow_id, i.created_at, i.tags::text,
		(SELECT sum(l.steps) FROM log l WHERE l.instance_id = i.instance_id),
		(SELECT max(l.last_time) FROM log l WHERE l.instance_id = i.instance_id),
		(SELECT l.status FROM log l WHERE l.instance_id = i.instance_id AND l.status IS NOT NULL ORDER BY l.first_seq DESC LIMIT 1)
		FROM log i WHERE i.flow_id IS NOT NULL`
	var args []any
	if opt.FlowID != "" {
		args = append(args, opt.FlowID)
		q += fmt.Sprintf(` AND i.flow_id = $%d`, len(args))
	}
	for _, k := range slices.Sorted(maps.Keys(opt.Tags)) {
		// The key is written out, a checked tag name, so that the index
		// on an experiment's tag serves it.
		args = append(args, opt.Tags[k])
		q += fmt.Sprintf(` AND i.tags IS NOT NULL AND i.tags->>'%s' = $%d`, k, len(args))
	}
	q += ` ORDER BY i.created_at DESC, i.instance_id DESC`
	if opt.Limit > 0 && opt.Status == "" {
		args = append(args, opt.Limit)
		q += fmt.Sprintf(` LIMIT $%d`, len(args))
	}
	rows, err := s.read.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []flow.Summary
	for rows.Next() {
		var sum flow.Summary
		var status, tags *string
		if err := rows.Scan(&sum.ID, &sum.FlowID, &sum.CreatedAt, &tags, &sum.Steps, &sum.UpdatedAt, &status); err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		if sum.Tags, err = segment.ReadTags(sum.ID, orEmpty(tags)); err != nil {
			return nil, err
		}
		sum.CreatedAt, sum.UpdatedAt = sum.CreatedAt.UTC(), sum.UpdatedAt.UTC()
		sum.Status = flow.StatusNew
		if status != nil {
			sum.Status = *status
		}
		if opt.Status != "" && sum.Status != opt.Status {
			continue
		}
		if out = append(out, sum); opt.Limit > 0 && len(out) == opt.Limit {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return out, nil
}
