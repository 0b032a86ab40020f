package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"superego/experiment"
	"superego/flow"
	"superego/segment"
)

// The store keeps experiments beside the log (experiment.Store) and model
// replies (agents.ReplyCache). Writes go through the writer with the log's,
// in its group commits.
var _ experiment.Store = (*Store)(nil)

// write queues a write of the experiment tables and waits until it is
// durable.
func (s *Store) writeTables(exec func(tx *sql.Tx) error) error {
	return flow.Wait(func(done func(error)) { s.Enqueue(segment.Write[func(tx *sql.Tx) error]{Own: exec, Done: done}) })
}

func experimentSum(r experiment.Record, created string) int64 {
	var sum segment.Sum
	sum.String(r.ID).String(r.Name).String(created).String(r.Status).Bytes(r.Plan)
	if r.Out != "" { // rows from before it was kept have no out, and their sums stay
		sum.String(r.Out)
	}
	return sum.Value()
}

// reportSum is the checksum of an experiment's report, apart from its
// row's, which a listing checks without reading the report.
func reportSum(id string, report []byte) int64 {
	var sum segment.Sum
	return sum.String(id).Bytes(report).Value()
}

func outcomeSum(id string, k experiment.Kept) int64 {
	var sum segment.Sum
	return sum.String(id).String(k.Condition).String(k.Label).String(k.SampleID).Int(int64(k.Repeat)).String(k.Instance).Bytes(k.Outcome).Value()
}

// CreateExperiment writes a new experiment.
func (s *Store) CreateExperiment(ctx context.Context, r experiment.Record) error {
	created := r.CreatedAt.UTC().Format(segment.TimeFormat)
	return s.writeTables(func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO experiments (id, name, created_at, status, plan, out, sum) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Name, created, r.Status, string(r.Plan), sql.NullString{String: r.Out, Valid: r.Out != ""}, experimentSum(r, created))
		if err != nil {
			return fmt.Errorf("create experiment %s: %w", r.ID, err)
		}
		return nil
	})
}

// UpdateExperiment writes an experiment's status, plan and report, and
// its out where r's is set.
func (s *Store) UpdateExperiment(ctx context.Context, r experiment.Record) error {
	old, err := s.experiment(ctx, r.ID, false) // its report is replaced, not read
	if err != nil {
		return err
	}
	old.Status, old.Plan, old.Report = r.Status, r.Plan, r.Report
	if r.Out != "" {
		old.Out = r.Out
	}
	created := old.CreatedAt.UTC().Format(segment.TimeFormat)
	reported := sql.NullInt64{Int64: reportSum(old.ID, old.Report), Valid: old.Report != nil}
	return s.writeTables(func(tx *sql.Tx) error {
		if _, err := tx.Exec(`UPDATE experiments SET status = ?, plan = ?, out = ?, sum = ?, report = ?, report_sum = ? WHERE id = ?`,
			old.Status, string(old.Plan), sql.NullString{String: old.Out, Valid: old.Out != ""}, experimentSum(old, created),
			sql.NullString{String: string(old.Report), Valid: old.Report != nil}, reported, old.ID); err != nil {
			return fmt.Errorf("update experiment %s: %w", r.ID, err)
		}
		return nil
	})
}

const experimentColumns = `id, name, created_at, status, plan, out, sum`

// scanExperiment reads a row of experimentColumns, and with report, of
// report and report_sum after them.
func scanExperiment(row interface{ Scan(...any) error }, report bool) (experiment.Record, error) {
	var r experiment.Record
	var created string
	var out, kept sql.NullString
	var sum, keptSum sql.NullInt64
	dest := []any{&r.ID, &r.Name, &created, &r.Status, &r.Plan, &out, &sum}
	if report {
		dest = append(dest, &kept, &keptSum)
	}
	if err := row.Scan(dest...); err != nil {
		return r, err
	}
	r.Out = out.String
	if !checked(sum, experimentSum(r, created)) {
		return r, fmt.Errorf("experiment %q: %w", r.ID, flow.ErrCorrupt)
	}
	if kept.Valid {
		r.Report = []byte(kept.String)
		if !keptSum.Valid || keptSum.Int64 != reportSum(r.ID, r.Report) {
			return r, fmt.Errorf("experiment %q: its report: %w", r.ID, flow.ErrCorrupt)
		}
	}
	var err error
	if r.CreatedAt, err = time.Parse(segment.TimeFormat, created); err != nil {
		return r, fmt.Errorf("experiment %q: %w", r.ID, err)
	}
	return r, nil
}

// Experiment reads an experiment, with its report.
func (s *Store) Experiment(ctx context.Context, id string) (experiment.Record, error) {
	return s.experiment(ctx, id, true)
}

// experiment reads an experiment, with its report or without.
func (s *Store) experiment(ctx context.Context, id string, report bool) (experiment.Record, error) {
	columns := experimentColumns
	if report {
		columns += `, report, report_sum`
	}
	r, err := scanExperiment(s.read.QueryRowContext(ctx, `SELECT `+columns+` FROM experiments WHERE id = ?`, id), report)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("experiment %q: %w", id, flow.ErrNotFound)
	}
	return r, err
}

// Experiments reads every experiment, newest first, without its report.
func (s *Store) Experiments(ctx context.Context) ([]experiment.Record, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+experimentColumns+` FROM experiments ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("list experiments: %w", err)
	}
	defer rows.Close()
	var out []experiment.Record
	for rows.Next() {
		r, err := scanExperiment(rows, false)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// BeginOutcome records the instance that runs a slot.
func (s *Store) BeginOutcome(ctx context.Context, id string, slot experiment.Slot, instance string) error {
	k := experiment.Kept{Slot: slot, Instance: instance}
	return s.writeTables(func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO experiment_outcomes (experiment_id, condition, label, sample_id, repeat_index, instance_id, outcome, sum)
			VALUES (?, ?, ?, ?, ?, ?, NULL, ?)
			ON CONFLICT (experiment_id, condition, label, sample_id, repeat_index) DO UPDATE SET instance_id = excluded.instance_id, outcome = NULL, sum = excluded.sum`,
			id, slot.Condition, slot.Label, slot.SampleID, slot.Repeat, instance, outcomeSum(id, k))
		if err != nil {
			return fmt.Errorf("experiment %s: begin outcome: %w", id, err)
		}
		return nil
	})
}

// FinishOutcome records a slot's outcome.
func (s *Store) FinishOutcome(ctx context.Context, id string, slot experiment.Slot, outcome []byte) error {
	return s.writeTables(func(tx *sql.Tx) error {
		var instance string
		err := tx.QueryRow(`SELECT instance_id FROM experiment_outcomes WHERE experiment_id = ? AND condition = ? AND label = ? AND sample_id = ? AND repeat_index = ?`,
			id, slot.Condition, slot.Label, slot.SampleID, slot.Repeat).Scan(&instance)
		if err != nil {
			return fmt.Errorf("experiment %s: finish outcome: %w", id, err)
		}
		k := experiment.Kept{Slot: slot, Instance: instance, Outcome: outcome}
		_, err = tx.Exec(`UPDATE experiment_outcomes SET outcome = ?, sum = ? WHERE experiment_id = ? AND condition = ? AND label = ? AND sample_id = ? AND repeat_index = ?`,
			string(outcome), outcomeSum(id, k), id, slot.Condition, slot.Label, slot.SampleID, slot.Repeat)
		if err != nil {
			return fmt.Errorf("experiment %s: finish outcome: %w", id, err)
		}
		return nil
	})
}

// Outcomes reads an experiment's slots, each checked.
func (s *Store) Outcomes(ctx context.Context, id string) ([]experiment.Kept, error) {
	if _, err := s.Experiment(ctx, id); err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, `SELECT condition, label, sample_id, repeat_index, instance_id, outcome, sum FROM experiment_outcomes WHERE experiment_id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("experiment %s: %w", id, err)
	}
	defer rows.Close()
	var out []experiment.Kept
	for rows.Next() {
		var k experiment.Kept
		var outcome sql.NullString
		var sum sql.NullInt64
		if err := rows.Scan(&k.Condition, &k.Label, &k.SampleID, &k.Repeat, &k.Instance, &outcome, &sum); err != nil {
			return nil, err
		}
		if outcome.Valid {
			k.Outcome = []byte(outcome.String)
		}
		if !checked(sum, outcomeSum(id, k)) {
			return nil, fmt.Errorf("experiment %q: the outcome of %s, %s %s, repeat %d: %w", id, k.Condition, k.Label, k.SampleID, k.Repeat, flow.ErrCorrupt)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func replySum(key string, reply []byte) int64 {
	var sum segment.Sum
	return sum.String(key).Bytes(reply).Value()
}

// Reply reads a kept model reply. A row whose checksum does not match is
// an error, which the agent takes as a miss.
func (s *Store) Reply(ctx context.Context, key string) ([]byte, bool, error) {
	var reply []byte
	var sum sql.NullInt64
	err := s.read.QueryRowContext(ctx, `SELECT reply, sum FROM reply_cache WHERE key = ?`, key).Scan(&reply, &sum)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reply cache: %w", err)
	case !checked(sum, replySum(key, reply)):
		return nil, false, fmt.Errorf("reply cache: %w", flow.ErrCorrupt)
	}
	return reply, true, nil
}

// Keep queues a model reply for the cache and returns at once: a reply the
// process dies before writing costs a call the next time, no more. A key
// kept already keeps its reply.
func (s *Store) Keep(ctx context.Context, key string, reply []byte) error {
	s.Enqueue(segment.Write[func(tx *sql.Tx) error]{Own: func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO reply_cache (key, reply, sum) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING`, key, string(reply), replySum(key, reply))
		return err
	}, Done: func(error) {}})
	return nil
}
