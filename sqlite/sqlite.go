// Package sqlite stores flow instances in SQLite, through the pure-Go
// modernc.org/sqlite driver, so the binary needs no C toolchain.
//
// The schema is the log, one table of rows that are appended and never
// updated. A row is a segment of an instance's log: the consecutive events
// one commit wrote for it, as a JSON array of what a client may see, with
// the steps' hidden fields in a column of their own. An instance's first
// row also names its flow and when it was created, and holds no events if
// it was created without a run. A row says how many steps it holds and what
// the instance's status is after it, so that a listing need not read the
// events; everything else about an instance is derived from its events.
//
// A step's constitution or system prompt, the same long text in every step
// its node makes, is kept once, in a table of texts, and a segment refers
// to it by id. The guarded-calculator flow's two superego steps carry a
// constitution of 2 KB each, which made its row 7.8 KB, past what a 4 KiB
// page holds, so that every flow also wrote an overflow page; the row is
// now 3.3 KB.
//
// One table, not one for instances and one for events, because a commit
// then writes one row, to one table and its key, where it wrote to two
// tables and two keys: a new instance's first run on a sequential benchmark
// took a third less time for it.
//
// Writes go through one goroutine that commits whatever writes are waiting
// in a single transaction, then reports each done, in order: a run's events
// and concurrent runs share commits instead of queueing one by one for
// SQLite's one writer.
//
// The schema is the files in migrations/, applied by package migrate; the
// encoding of a segment, and its checksum, are package segment's, which
// the PostgreSQL store shares.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"superego/flow"
	"superego/migrate"
	"superego/segment"
)

//go:embed migrations/*.sql
var migrations embed.FS

// schema is the store's migrations, one a version, from the first layout
// on: a database any release wrote is brought up to date by the steps it
// lacks.
var schema = func() migrate.Schema {
	steps, err := migrate.Load(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded files are wrong: every test fails
	}
	return migrate.Schema{Migrations: steps, Version: version}
}()

// version reads the database's schema version. Releases before versions
// were recorded left one of four layouts, told apart by their tables.
func version(ctx context.Context, tx *sql.Tx) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		return 0, err
	}
	tables := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return 0, err
		}
		tables[name] = true
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	var texts bool
	if err := tx.QueryRowContext(ctx, `SELECT count(*) > 0 FROM pragma_table_info('log') WHERE name = 'texts'`).Scan(&texts); err != nil {
		return 0, err
	}
	switch {
	case tables["schema_migrations"]:
		return migrate.Recorded(ctx, tx)
	case tables["instances"]:
		return 1, nil // instances beside the log
	case tables["log"] && !texts:
		return 2, nil // instances in the log, texts inline
	case tables["log"] && !tables["held"]:
		return 3, nil // texts kept once
	case tables["log"]:
		return 4, nil // held events
	}
	return 0, nil
}

// readConns bounds the connections that read at once. SQLite reads
// in-process, on the CPU: more connections than cores add open files, not
// speed, and a burst of reads waits for one instead of opening hundreds.
var readConns = max(4, runtime.GOMAXPROCS(0))

// Store is a flow.Store in a SQLite database file.
type Store struct {
	// The writer's Create, Append, Settle and Hold; its writes of other
	// tables are functions of the batch's transaction.
	*segment.Writer[func(tx *sql.Tx) error]

	read  *sql.DB
	write *sql.DB // one connection: SQLite has one writer

	// Prepared once, on the one write connection: the writes every run
	// makes, which SQLite would otherwise compile each time.
	insertSegment, insertHeld, deleteHeld *sql.Stmt

	textIDs map[string]int64 // texts the database holds, by body; the writer's own

	texts segment.TextCache // texts read, by id
}

var _ flow.Store = (*Store)(nil)

// Open opens (creating if need be) the database at path, in WAL mode, and
// brings its schema up to date.
//
// SQLite copies the WAL back into the database every 8000 pages (32 MiB)
// rather than its default 1000: a checkpoint copies each page changed since
// the last one once, and the pages runs change are mostly the same few at
// the end of the log, so fewer checkpoints copy far fewer pages. Runs on a
// sequential benchmark take about 10% less time for it.
func Open(path string) (*Store, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_pragma=wal_autocheckpoint(8000)"
	write, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	if err := schema.Up(context.Background(), write); err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var stmts [3]*sql.Stmt
	for i, q := range []string{
		`INSERT INTO log (instance_id, first_seq, last_seq, flow_id, created_at, last_time, steps, status, events, hidden, texts, tags, sum) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		`INSERT INTO held (instance_id, name, data, hidden, sum) VALUES (?, ?, ?, ?, ?)`,
		`DELETE FROM held WHERE instance_id = ?`,
	} {
		if stmts[i], err = write.Prepare(q); err != nil {
			write.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	read, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	read.SetMaxOpenConns(readConns)
	read.SetMaxIdleConns(readConns)
	s := &Store{read: read, write: write, insertSegment: stmts[0], insertHeld: stmts[1], deleteHeld: stmts[2], textIDs: map[string]int64{}}
	s.Writer = segment.NewWriter(s.commitTx, ErrClosed)
	return s, nil
}

// Close stops the writer, once the writes already queued are done, and
// closes the database.
func (s *Store) Close() error {
	s.Writer.Close()
	return errors.Join(s.read.Close(), s.write.Close())
}

// row is a segment with the instance it belongs to and, on an instance's
// first row, its flow and creation.
type row struct {
	segment.Segment
	id                string
	flowID, createdAt sql.NullString // NULL but on an instance's first row
	tags              sql.NullString // on an instance's first row, when it has tags
}

// commitTx writes a batch in one transaction.
func (s *Store) commitTx(batch []segment.Write[func(tx *sql.Tx) error]) error {
	tx, err := s.write.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// An instance is queued before its events: its first row holds those
	// of them the batch holds.
	var rows []*row
	byInstance := map[string]*row{}
	fresh := map[string]int64{} // texts this transaction adds
	textID := func(body string) (int64, error) {
		if id, ok := s.textIDs[body]; ok {
			return id, nil
		}
		if id, ok := fresh[body]; ok {
			return id, nil
		}
		var id int64
		if err := tx.QueryRow(`INSERT INTO texts (body, sum) VALUES (?, ?) ON CONFLICT (body) DO UPDATE SET body = body RETURNING id`, body, textSum([]byte(body))).Scan(&id); err != nil {
			return 0, fmt.Errorf("keep text: %w", err)
		}
		fresh[body] = id
		return id, nil
	}
	for _, w := range batch {
		if w.Own != nil {
			if err := w.Own(tx); err != nil {
				return err
			}
			continue
		}
		r := byInstance[w.ID]
		if w.Inst != nil {
			if r != nil {
				return fmt.Errorf("instance %s is created in a batch that already holds it", w.ID) // committed one by one, the second write fails alone
			}
			tags := segment.Tags(w.Inst.Tags)
			r = &row{id: w.ID, flowID: sql.NullString{String: w.Inst.FlowID, Valid: true},
				createdAt: sql.NullString{String: w.Inst.CreatedAt.UTC().Format(segment.TimeFormat), Valid: true}, tags: sql.NullString{String: string(tags), Valid: tags != nil}}
			r.LastTime = w.Inst.CreatedAt
			byInstance[w.ID] = r
			rows = append(rows, r)
			continue
		}
		if w.Held {
			ev := w.Events[0]
			if _, err := tx.Stmt(s.insertHeld).Exec(w.ID, ev.Name, string(ev.JSON), nullText(ev.Hidden), heldSum(w.ID, ev.Name, ev.JSON, ev.Hidden)); err != nil {
				return fmt.Errorf("hold an event of %s: %w", w.ID, err)
			}
			continue
		}
		if w.Settle {
			if _, err := tx.Stmt(s.deleteHeld).Exec(w.ID); err != nil {
				return fmt.Errorf("settle %s: %w", w.ID, err)
			}
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
		lastTime := r.LastTime.UTC().Format(segment.TimeFormat)
		status := sql.NullString{String: r.Status, Valid: r.Status != ""}
		sum := logSum(r.id, r.First, r.Last, r.flowID, r.createdAt, lastTime, int64(r.Steps), status, events, hidden, texts, r.tags)
		// JSON is stored as text, as it was before: nil is NULL.
		if _, err := tx.Stmt(s.insertSegment).Exec(r.id, r.First, r.Last, r.flowID, r.createdAt, lastTime, r.Steps, status, nullText(events), nullText(hidden), nullText(texts), r.tags, sum); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	for body, id := range fresh {
		s.textIDs[body] = id
	}
	return nil
}

// nullText is a column's bytes as SQLite text, or NULL for nil.
func nullText(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// logSum, textSum and heldSum are the checksums of rows of the three
// tables: every column but the sum, in order. A log row's tags count only
// when it has them, so that rows from before tags keep their sums.
func logSum(id string, first, last int64, flowID, createdAt sql.NullString, lastTime string, steps int64, status sql.NullString, events, hidden, texts []byte, tags sql.NullString) int64 {
	var s segment.Sum
	s.String(id).Int(first).Int(last)
	nullString(&s, flowID)
	nullString(&s, createdAt)
	s.String(lastTime).Int(steps)
	nullString(&s, status)
	s.Bytes(events).Bytes(hidden).Bytes(texts)
	if tags.Valid {
		s.String(tags.String)
	}
	return s.Value()
}

func nullString(s *segment.Sum, v sql.NullString) {
	if v.Valid {
		s.String(v.String)
	} else {
		s.Null()
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

// checked compares a row's checksum with the one written, if one was:
// rows from before checksums have none.
func checked(written sql.NullInt64, now int64) bool {
	return !written.Valid || written.Int64 == now
}

// ErrClosed is the error of a write queued after Close.
var ErrClosed = errors.New("sqlite: store is closed")

// Held reads the instance's held events; their ids are 0.
func (s *Store) Held(ctx context.Context, id string) ([]flow.Event, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, `SELECT name, data, hidden, sum FROM held WHERE instance_id = ? ORDER BY rowid`, id)
	if err != nil {
		return nil, fmt.Errorf("held events of %s: %w", id, err)
	}
	defer rows.Close()
	var out []flow.Event
	for rows.Next() {
		var name string
		var data, hidden []byte
		var sum sql.NullInt64
		if err := rows.Scan(&name, &data, &hidden, &sum); err != nil {
			return nil, err
		}
		if !checked(sum, heldSum(id, name, data, hidden)) {
			return nil, fmt.Errorf("instance %q: held event %d: %w", id, len(out)+1, flow.ErrCorrupt)
		}
		e, err := segment.DecodeHeld(name, data, hidden)
		if err != nil {
			return nil, fmt.Errorf("held events of %s: %w", id, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Get reads the instance's first row, and checks it.
func (s *Store) Get(ctx context.Context, id string) (flow.Instance, error) {
	rows, err := s.segments(ctx, id, `flow_id IS NOT NULL`)
	if err != nil {
		return flow.Instance{ID: id}, err
	}
	created, err := time.Parse(segment.TimeFormat, rows[0].createdAt.String)
	if err != nil {
		return flow.Instance{ID: id}, fmt.Errorf("instance %q: %w", id, err)
	}
	tags, err := segment.ReadTags(id, rows[0].tags.String)
	if err != nil {
		return flow.Instance{ID: id}, err
	}
	return flow.Instance{ID: id, FlowID: rows[0].flowID.String, CreatedAt: created, Tags: tags}, nil
}

// stored is a row of the log as read.
type stored struct {
	segment.Row
	flowID, createdAt, status sql.NullString
	tags                      sql.NullString
	lastTime                  string
	steps                     int64
	sum                       sql.NullInt64
}

// segments reads the instance's rows that match where, in order, each
// checked against its checksum; none is flow.ErrNotFound. The rows are
// read whole before anything else is asked of the database, so that a
// reader holds one connection at a time, whatever the pool's bound.
func (s *Store) segments(ctx context.Context, id, where string, args ...any) ([]stored, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT first_seq, last_seq, flow_id, created_at, last_time, steps, status, events, hidden, texts, tags, sum
		FROM log WHERE instance_id = ? AND (`+where+`) ORDER BY first_seq`, append([]any{id}, args...)...)
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
		if !checked(r.sum, logSum(id, r.First, r.Last, r.flowID, r.createdAt, r.lastTime, r.steps, r.status, r.Events, r.Hidden, r.Texts, r.tags)) {
			return nil, fmt.Errorf("instance %q: %s: %w", id, r.Name(), flow.ErrCorrupt)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("instance %q: %w", id, err)
	}
	if len(out) == 0 || !out[0].flowID.Valid {
		return nil, fmt.Errorf("instance %q: %w", id, flow.ErrNotFound)
	}
	return out, nil
}

// Events reads the instance's first row, which says it exists, with the
// segments after event after, in one query.
func (s *Store) Events(ctx context.Context, id string, after int64) ([]flow.Event, error) {
	rows, err := s.segments(ctx, id, `flow_id IS NOT NULL OR last_seq > ?`, after)
	if err != nil {
		return nil, err
	}
	segs := make([]segment.Row, len(rows))
	for i, r := range rows {
		segs[i] = r.Row
	}
	return s.texts.Events(ctx, id, segs, after, s.loadTexts)
}

// loadTexts reads the texts with the given ids, and checks them.
func (s *Store) loadTexts(ctx context.Context, ids []int64) (map[int64]string, error) {
	read := make(map[int64]string, len(ids))
	for _, id := range ids {
		var body []byte
		var sum sql.NullInt64
		if err := s.read.QueryRowContext(ctx, `SELECT body, sum FROM texts WHERE id = ?`, id).Scan(&body, &sum); err != nil {
			return nil, fmt.Errorf("text %d: %w", id, err)
		}
		if !checked(sum, textSum(body)) {
			return nil, fmt.Errorf("text %d: %w", id, flow.ErrCorrupt)
		}
		read[id] = string(body)
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
	q := `SELECT i.instance_id, i.flow_id, i.created_at, i.tags,
		(SELECT SUM(l.steps) FROM log l WHERE l.instance_id = i.instance_id),
		(SELECT MAX(l.last_time) FROM log l WHERE l.instance_id = i.instance_id),
		(SELECT l.status FROM log l WHERE l.instance_id = i.instance_id AND l.status IS NOT NULL ORDER BY l.first_seq DESC LIMIT 1)
		FROM log i WHERE i.flow_id IS NOT NULL`
	var args []any
	if opt.FlowID != "" {
		q += ` AND i.flow_id = ?`
		args = append(args, opt.FlowID)
	}
	for _, k := range slices.Sorted(maps.Keys(opt.Tags)) {
		// The path is written out, a checked tag name, so that the index
		// on an experiment's tag serves it.
		q += ` AND i.tags IS NOT NULL AND json_extract(i.tags, '$.` + k + `') = ?`
		args = append(args, opt.Tags[k])
	}
	q += ` ORDER BY i.created_at DESC, i.rowid DESC`
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
		var created, updated string
		var status, tags sql.NullString
		if err := rows.Scan(&sum.ID, &sum.FlowID, &created, &tags, &sum.Steps, &updated, &status); err != nil {
			return nil, err
		}
		if sum.Tags, err = segment.ReadTags(sum.ID, tags.String); err != nil {
			return nil, err
		}
		if sum.CreatedAt, err = time.Parse(segment.TimeFormat, created); err != nil {
			return nil, err
		}
		if sum.UpdatedAt, err = time.Parse(segment.TimeFormat, updated); err != nil {
			return nil, err
		}
		sum.Status = flow.StatusNew
		if status.Valid {
			sum.Status = status.String
		}
		if opt.Status != "" && sum.Status != opt.Status {
			continue
		}
		if out = append(out, sum); opt.Limit > 0 && len(out) == opt.Limit {
			break
		}
	}
	return out, rows.Err()
}
